#include "train/optimizer.h"

#include "core/errors.h"
#include "model/roles.h"

namespace normlab {

Optimizer::Optimizer(const std::vector<std::pair<std::string, torch::Tensor>>& named, const OptimConfig& o)
    : params_(named), o_(o) {
  const bool muon = o.type != OptimType::kAdamw;
  std::vector<AdamW::Param> by_adamw;
  std::vector<std::pair<std::string, torch::Tensor>> by_muon;
  for (const auto& [name, p] : named) {
    const std::optional<Role> r = role_of(p);
    if (!r) throw RuntimeFailure("parameter " + name + " has no declared role (src/model/README.md, Parameter roles)");
    roles_.push_back(*r);
    if (muon && *r == Role::kMatrix) {
      by_muon.emplace_back(name, p);
    } else {
      by_adamw.push_back({name, p, role_decays(*r), o.lr_mult.of(*r)});
    }
  }
  adamw_ = std::make_unique<AdamW>(std::move(by_adamw), o);
  if (muon) muon_ = std::make_unique<Muon>(std::move(by_muon), o);
}

void Optimizer::step(double lr, double grad_scale) {
  if (muon_) muon_->step(lr / o_.lr, grad_scale);
  adamw_->step(lr, grad_scale);
}

void Optimizer::zero_grad() { clear_grads(params_); }

std::vector<std::pair<std::string, torch::Tensor>> Optimizer::state() const {
  auto out = adamw_->state();
  if (muon_) {
    for (auto& kv : muon_->state()) out.push_back(std::move(kv));
  }
  return out;
}

void Optimizer::load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state, int64_t steps) {
  adamw_->load_state(state, steps);
  if (muon_) muon_->load_state(state);
}

}  // namespace normlab
