#include "train/adamw.h"

#include <cmath>
#include <algorithm>
#include <map>

#include "core/errors.h"
#include "core/torch_compat.h"
#include "train/adamw_kernel.h"

namespace normlab {

AdamW::AdamW(std::vector<Param> params, const OptimConfig& o) : o_(o) {
  for (auto& p : params) {
    params_.emplace_back(p.name, p.tensor);
    decay_.push_back(p.decay);
    mult_.push_back(p.lr_mult);
    m_.push_back(torch::zeros_like(p.tensor));
    v_.push_back(torch::zeros_like(p.tensor));
  }
}

void AdamW::zero_grad() { clear_grads(params_); }

void clear_grads(const std::vector<std::pair<std::string, torch::Tensor>>& params) {
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
    const auto& p = params_[i].second;
    if (!ok(p) || !ok(m_[i]) || !ok(v_[i]) || (p.grad().defined() && !ok(p.grad()))) return false;
  }
  return true;
}

void AdamW::step(double lr, double grad_scale) {
  torch::NoGradGuard ng;
  ++t_;
  const double b1 = o_.betas[0], b2 = o_.betas[1];
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(t_));
  const double bc2_sqrt = std::sqrt(bc2);
  const Path path = forced_path_ ? *forced_path_ : choose_path();
  if (path == Path::own_cpu_kernel) {
    // One kernel call per distinct rate (one call in all when every multiplier is 1).
    std::vector<double> rates;
    for (double m : mult_) {
      if (std::find(rates.begin(), rates.end(), m) == rates.end()) rates.push_back(m);
    }
    for (const double mult : rates) {
      const double r = lr * mult;
      std::vector<adamw_kernel::Buffers> buffers;
      for (size_t i = 0; i < params_.size(); ++i) {
        auto& p = params_[i].second;
        if (!p.grad().defined() || mult_[i] != mult) continue;
        buffers.push_back({p.data_ptr<float>(), p.grad().data_ptr<float>(), m_[i].data_ptr<float>(),
                           v_[i].data_ptr<float>(), p.numel(), decay_[i]});
      }
      if (buffers.empty()) continue;
      adamw_kernel::adamw_step(buffers, {grad_scale, r * o_.weight_decay, b1, b2, o_.eps, r / bc1, bc2_sqrt});
    }
    return;
  }
  if (path == Path::libtorch_fused && libtorch_fused_step(lr, grad_scale)) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i].second;
    if (!p.grad().defined()) continue;
    if (grad_scale != 1.0) p.mutable_grad().mul_(grad_scale);
    const auto& g = p.grad();
    const double r = lr * mult_[i], step_size = r / bc1;
    if (decay_[i] && o_.weight_decay != 0) p.mul_(1.0 - r * o_.weight_decay);
    m_[i].mul_(b1).add_(g, 1.0 - b1);
    v_[i].mul_(b2).addcmul_(g, g, 1.0 - b2);
    auto denom = (v_[i].sqrt() / bc2_sqrt).add_(o_.eps);
    p.addcdiv_(m_[i], denom, -step_size);
  }
}

AdamW::Path AdamW::choose_path() const {
  if (fast_path_ok()) return Path::own_cpu_kernel;
  if (!params_.empty() && params_.front().second.is_cuda() && have_libtorch_fused_adamw()) return Path::libtorch_fused;
  return Path::composed;
}

bool AdamW::libtorch_fused_step(double lr, double grad_scale) {
  if (params_.empty() || !have_libtorch_fused_adamw()) return false;
  const auto opts = params_.front().second.options();
  for (const auto& [name, p] : params_) {
    if (p.device() != opts.device() || p.scalar_type() != torch::kFloat) return false;
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
  std::vector<std::pair<bool, double>> groups;  // (decay, multiplier), in first-seen order
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::pair<bool, double> key{decay_[i], mult_[i]};
    if (std::find(groups.begin(), groups.end(), key) == groups.end()) groups.push_back(key);
  }
  for (const auto& [decay, mult] : groups) {
    std::vector<torch::Tensor> p, g, m, v, st;
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto& t = params_[i].second;
      if (decay_[i] != decay || mult_[i] != mult) continue;
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
    libtorch_fused_adamw(p, g, m, v, st, lr * mult, o_.betas[0], o_.betas[1], decay ? o_.weight_decay : 0.0, o_.eps, divisor);
  }
  steps_at_ = all_grads ? t_ : -1;
  return true;
}

std::vector<std::pair<std::string, torch::Tensor>> AdamW::state() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back("exp_avg." + params_[i].first, m_[i]);
    out.emplace_back("exp_avg_sq." + params_[i].first, v_[i]);
  }
  return out;
}

void AdamW::load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state,
                       int64_t steps) {
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  torch::NoGradGuard ng;
  for (size_t i = 0; i < params_.size(); ++i) {
    for (auto [prefix, dst] : {std::pair{"exp_avg.", &m_[i]}, std::pair{"exp_avg_sq.", &v_[i]}}) {
      const std::string key = prefix + params_[i].first;
      auto it = by_name.find(key);
      if (it == by_name.end()) throw RuntimeFailure("optimizer state lacks " + key);
      if (!it->second.sizes().equals(dst->sizes()))
        throw RuntimeFailure("optimizer state " + key + " has the wrong shape");
      dst->copy_(it->second);
    }
  }
  t_ = steps;
  steps_at_ = -1;  // the fused path's device step counts are rebuilt from t_
}

}  // namespace normlab
