#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"
#include "core/torch_compat.h"
#include "optim/adamw_kernel.h"
#include "optim/registry.h"

namespace normlab {

AdamW::AdamW(std::vector<RatedParam> params, const OptimConfig& o)
    : params_(std::move(params)), betas_(o.betas), eps_(o.eps) {
  for (const auto& p : params_) {
    m_.push_back(torch::zeros_like(p.tensor));
    v_.push_back(torch::zeros_like(p.tensor));
  }
}

void clear_grads(const NamedTensors& params) {
  for (const auto& [name, p] : params) {
    if (!p.grad().defined()) continue;
    // On CUDA the gradients go (set_to_none): the backward then writes fresh ones from the caching
    // allocator instead of a memset plus an accumulating add per parameter every step. On the CPU
    // the buffers are kept and zeroed (no allocation, no page faults).
    if (p.is_cuda()) {
      p.mutable_grad().reset();
    } else {
      p.mutable_grad().zero_();
    }
  }
}

bool AdamW::fast_path_ok() const {
  auto ok = [](const torch::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == torch::kFloat && t.is_contiguous();
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i].tensor;
    if (!ok(p) || !ok(m_[i]) || !ok(v_[i]) || (p.grad().defined() && !ok(p.grad()))) return false;
  }
  return true;
}

namespace {
// The groups one fused call serves: parameters of one rate multiplier whose decayed members share
// one coefficient (the undecayed ones join the first group of their multiplier).
struct Group {
  double mult, decay;
};
std::vector<Group> groups_of(const std::vector<RatedParam>& params) {
  std::vector<Group> out;
  auto has = [&](double mult, double decay) {
    return std::any_of(out.begin(), out.end(), [&](const Group& g) { return g.mult == mult && g.decay == decay; });
  };
  for (const auto& p : params) {
    if (p.weight_decay != 0 && !has(p.lr_mult, p.weight_decay)) out.push_back({p.lr_mult, p.weight_decay});
  }
  for (const auto& p : params) {
    const bool served = std::any_of(out.begin(), out.end(), [&](const Group& g) { return g.mult == p.lr_mult; });
    if (p.weight_decay == 0 && !served) out.push_back({p.lr_mult, 0.0});
  }
  return out;
}
// Whether group g (at index gi of groups) updates p: its multiplier, and its decay or, undecayed,
// the first group of its multiplier.
bool in_group(const RatedParam& p, const std::vector<Group>& groups, size_t gi) {
  const Group& g = groups[gi];
  if (p.lr_mult != g.mult) return false;
  if (p.weight_decay != 0) return p.weight_decay == g.decay;
  for (size_t j = 0; j < groups.size(); ++j) {
    if (groups[j].mult == p.lr_mult) return j == gi;
  }
  return false;
}
}  // namespace

void AdamW::step(const ScheduledRate& rate, double grad_scale) {
  torch::NoGradGuard ng;
  const double lr = rate.lr;
  ++t_;
  const double b1 = betas_[0], b2 = betas_[1];
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(t_));
  const double bc2_sqrt = std::sqrt(bc2);
  const Path path = forced_path_ ? *forced_path_ : choose_path();
  if (path == Path::own_cpu_kernel) {
    // One kernel call per rate and decay group (one call in all when every multiplier is 1).
    const std::vector<Group> groups = groups_of(params_);
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      const double r = lr * groups[gi].mult;
      std::vector<adamw_kernel::Buffers> buffers;
      for (size_t i = 0; i < params_.size(); ++i) {
        auto& p = params_[i].tensor;
        if (!p.grad().defined() || !in_group(params_[i], groups, gi)) continue;
        buffers.push_back({p.data_ptr<float>(), p.grad().data_ptr<float>(), m_[i].data_ptr<float>(),
                           v_[i].data_ptr<float>(), p.numel(), params_[i].weight_decay != 0});
      }
      if (buffers.empty()) continue;
      adamw_kernel::adamw_step(buffers, {grad_scale, r * groups[gi].decay, b1, b2, eps_, r / bc1, bc2_sqrt});
    }
    return;
  }
  if (path == Path::libtorch_fused && libtorch_fused_step(lr, grad_scale)) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i].tensor;
    if (!p.grad().defined()) continue;
    if (grad_scale != 1.0) p.mutable_grad().mul_(grad_scale);
    const auto& g = p.grad();
    const double r = lr * params_[i].lr_mult, step_size = r / bc1;
    if (params_[i].weight_decay != 0) p.mul_(1.0 - r * params_[i].weight_decay);
    m_[i].mul_(b1).add_(g, 1.0 - b1);
    v_[i].mul_(b2).addcmul_(g, g, 1.0 - b2);
    auto denom = (v_[i].sqrt() / bc2_sqrt).add_(eps_);
    p.addcdiv_(m_[i], denom, -step_size);
  }
}

AdamW::Path AdamW::choose_path() const {
  if (fast_path_ok()) return Path::own_cpu_kernel;
  if (!params_.empty() && params_.front().tensor.is_cuda() && have_libtorch_fused_adamw()) return Path::libtorch_fused;
  return Path::composed;
}

bool AdamW::libtorch_fused_step(double lr, double grad_scale) {
  if (params_.empty() || !have_libtorch_fused_adamw()) return false;
  const auto opts = params_.front().tensor.options();
  for (const auto& p : params_) {
    if (p.tensor.device() != opts.device() || p.tensor.scalar_type() != torch::kFloat) return false;
  }
  if (steps_at_ != t_ - 1) {  // first use, or a restored state: counts before this update
    steps_.clear();
    for (size_t i = 0; i < params_.size(); ++i) steps_.push_back(torch::full({}, static_cast<double>(t_ - 1), opts));
  }
  // The kernel reads the step count (bias corrections) but does not advance it: one multi-tensor
  // add, as torch.optim.AdamW(fused=True) does.
  torch::_foreach_add_(steps_, 1);
  // A fill, not a host-to-device copy: no sync.
  const auto divisor = torch::full({}, 1.0 / grad_scale, opts);
  bool all_grads = true;
  std::vector<std::pair<double, double>> groups;  // (decay, multiplier), in first-seen order
  for (const auto& p : params_) {
    const std::pair<double, double> key{p.weight_decay, p.lr_mult};
    if (std::find(groups.begin(), groups.end(), key) == groups.end()) groups.push_back(key);
  }
  for (const auto& [decay, mult] : groups) {
    std::vector<torch::Tensor> p, g, m, v, st;
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto& t = params_[i].tensor;
      if (params_[i].weight_decay != decay || params_[i].lr_mult != mult) continue;
      if (!t.grad().defined()) {
        all_grads = false;  // its step count stays behind: rebuild the counts next time
        continue;
      }
      p.push_back(t);
      g.push_back(t.grad());
      m.push_back(m_[i]);
      v.push_back(v_[i]);
      st.push_back(steps_[i]);
    }
    if (p.empty()) continue;
    libtorch_fused_adamw(p, g, m, v, st, lr * mult, betas_[0], betas_[1], decay, eps_, divisor);
  }
  steps_at_ = all_grads ? t_ : -1;
  return true;
}

NamedTensors AdamW::state() const {
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back("exp_avg." + params_[i].name, m_[i]);
    out.emplace_back("exp_avg_sq." + params_[i].name, v_[i]);
  }
  return out;
}

void AdamW::load_state(const NamedTensors& state, int64_t steps) {
  restore_state(state, params_.size(), [&](size_t i) { return "exp_avg." + params_[i].name; },
                [&](size_t i) -> torch::Tensor& { return m_[i]; });
  restore_state(state, params_.size(), [&](size_t i) { return "exp_avg_sq." + params_[i].name; },
                [&](size_t i) -> torch::Tensor& { return v_[i]; });
  t_ = steps;
  steps_at_ = -1;  // the fused path's device step counts are rebuilt from t_
}

OptimizerEntry adamw_optimizer() {
  OptimizerEntry e;
  e.name = "adamw";
  e.summary = "AdamW for every parameter (optim.lr times each role's multiplier)";
  e.make = [](std::vector<RatedParam> params, const OptimConfig& o) {
    UpdateRules rules;
    rules.push_back(std::make_unique<AdamW>(std::move(params), o));
    return rules;
  };
  return e;
}

}  // namespace normlab
