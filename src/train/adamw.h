// AdamW (Loshchilov & Hutter 2019) in the exact form of torch.optim.AdamW, with decoupled weight
// decay and a learning-rate multiplier per parameter, both given by the caller from the parameter's
// role (train/optimizer.h; src/train/README.md). State is named by the contract's tensor names so
// it checkpoints as `exp_avg.<name>` / `exp_avg_sq.<name>`.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/torch.h"

namespace normlab {

// Clears the gradients of these parameters: zeroed on the CPU, undefined (set to none) on CUDA.
void clear_grads(const std::vector<std::pair<std::string, torch::Tensor>>& params);

class AdamW {
 public:
  struct Param {
    std::string name;
    torch::Tensor tensor;
    bool decay = false;    // decoupled weight decay applies
    double lr_mult = 1.0;  // this parameter's rate is lr * lr_mult
  };
  explicit AdamW(std::vector<Param> params, const OptimConfig& o);

  // One update with the current .grad() of every parameter, each gradient multiplied by
  // grad_scale first (the clipping coefficient, divided by an fp16 loss scale); parameter i moves
  // at rate lr * lr_mult(i). Contiguous float32
  // CPU parameters take the fused kernel of adamw_kernel.h; CUDA parameters LibTorch 2.x's fused
  // multi-tensor AdamW (one launch per decay group); anything else the same update in LibTorch ops.
  void step(double lr, double grad_scale = 1.0);

  // The three implementations of the same update; step() picks the first that applies.
  enum class Path { own_cpu_kernel, libtorch_fused, composed };
  Path choose_path() const;
  // Tests: force one (libtorch_fused falls back to composed where LibTorch has no fused AdamW).
  void force_path(std::optional<Path> path) { forced_path_ = path; }
  // Clears the gradients: zeroed on the CPU, undefined (set to none) on CUDA.
  void zero_grad();

  int64_t steps_taken() const { return t_; }
  // exp_avg.<name>, exp_avg_sq.<name> for every parameter.
  std::vector<std::pair<std::string, torch::Tensor>> state() const;
  // Restores state() output; throws RuntimeFailure naming a missing or mis-shaped tensor.
  void load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state, int64_t steps);

  const std::vector<std::pair<std::string, torch::Tensor>>& params() const { return params_; }
  bool decays(size_t i) const { return decay_[i]; }
  double lr_mult(size_t i) const { return mult_[i]; }

 private:
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  std::vector<bool> decay_;
  std::vector<double> mult_;
  std::vector<torch::Tensor> m_, v_;
  std::vector<torch::Tensor> steps_;  // CUDA fused path: per-parameter step counts on the device
  int64_t steps_at_ = -1;             // the count steps_ hold
  bool fast_path_ok() const;
  bool libtorch_fused_step(double lr, double grad_scale);
  std::optional<Path> forced_path_;
  OptimConfig o_;
  int64_t t_ = 0;
};

}  // namespace normlab
