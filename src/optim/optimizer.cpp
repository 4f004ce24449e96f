#include "optim/optimizer.h"

#include "core/errors.h"
#include "model/roles.h"
#include "optim/adamw.h"
#include "optim/registry.h"

namespace normlab {

Optimizer::Optimizer(const NamedTensors& named, const OptimConfig& o, const RoleRates& rates,
                     const std::vector<bool>& in_block)
    : params_(named), peak_lr_(o.lr) {
  const OptimizerEntry* entry = find_optimizer(o.type);
  if (!entry) throw RuntimeFailure("optim.type " + o.type + " is not one of: " + optimizer_names());
  std::vector<RatedParam> rated;
  for (size_t i = 0; i < named.size(); ++i) {
    const auto& [name, p] = named[i];
    const std::optional<Role> r = role_of(p);
    if (!r) throw RuntimeFailure("parameter " + name + " has no declared role (src/model/README.md, Parameter roles)");
    roles_.push_back(*r);
    const RoleRate& rate = rates.at(*r, i < in_block.size() && in_block[i]);
    rated.push_back({name, p, *r, rate.lr, role_decays(*r) ? o.weight_decay * rate.decay : 0.0});
  }
  rules_ = entry->make(std::move(rated), o);
}

void Optimizer::step(double lr, double grad_scale) {
  const ScheduledRate rate{lr, lr / peak_lr_};
  for (auto& rule : rules_) rule->step(rate, grad_scale);
  ++t_;
}

void Optimizer::zero_grad() { clear_grads(params_); }

NamedTensors Optimizer::state() const {
  NamedTensors out;
  for (const auto& rule : rules_) {
    for (auto& kv : rule->state()) out.push_back(std::move(kv));
  }
  return out;
}

void Optimizer::load_state(const NamedTensors& state, int64_t steps) {
  for (auto& rule : rules_) rule->load_state(state, steps);
  t_ = steps;
}

}  // namespace normlab
