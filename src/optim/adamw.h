// AdamW (Loshchilov & Hutter 2019) in the exact form of torch.optim.AdamW, with decoupled weight
// decay, as an update rule (optim/rule.h): each parameter's rate multiplier and decay coefficient
// come from its role (optim/role_rates.h). State is named by the contract's tensor names so it
// checkpoints as `exp_avg.<name>` / `exp_avg_sq.<name>`. The `adamw` optimizer is this rule for
// every parameter; Muon and NorMuon use it for every role but `matrix`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/torch.h"
#include "optim/rule.h"

namespace normlab {

// Clears the gradients of these parameters: zeroed on the CPU, undefined (set to none) on CUDA.
void clear_grads(const NamedTensors& params);

class AdamW : public UpdateRule {
 public:
  AdamW(std::vector<RatedParam> params, const OptimConfig& o);

  const char* name() const override { return "adamw"; }
  // Parameter i moves at rate lr(s) * lr_mult(i). Contiguous float32 CPU parameters take the fused
  // kernel of adamw_kernel.h; CUDA parameters LibTorch 2.x's fused multi-tensor AdamW (one launch
  // per rate and decay group); anything else the same update in LibTorch ops.
  void step(const ScheduledRate& rate, double grad_scale) override;
  void step(double lr, double grad_scale = 1.0) { step(ScheduledRate{lr, 0}, grad_scale); }

  // The three implementations of the same update; step() picks the first that applies.
  enum class Path { own_cpu_kernel, libtorch_fused, composed };
  Path choose_path() const;
  // Tests: force one (libtorch_fused falls back to composed where LibTorch has no fused AdamW).
  void force_path(std::optional<Path> path) { forced_path_ = path; }

  int64_t steps_taken() const { return t_; }
  // exp_avg.<name>, exp_avg_sq.<name> for every parameter.
  NamedTensors state() const override;
  void load_state(const NamedTensors& state, int64_t steps) override;

  const std::vector<RatedParam>& params() const override { return params_; }

 private:
  std::vector<RatedParam> params_;
  std::vector<torch::Tensor> m_, v_;
  std::vector<torch::Tensor> steps_;  // CUDA fused path: per-parameter step counts on the device
  int64_t steps_at_ = -1;             // the count steps_ hold
  bool fast_path_ok() const;
  bool libtorch_fused_step(double lr, double grad_scale);
  std::optional<Path> forced_path_;
  std::array<double, 2> betas_;
  double eps_;
  int64_t t_ = 0;
};

}  // namespace normlab
