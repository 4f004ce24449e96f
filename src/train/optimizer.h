// The run's optimizer (src/train/README.md, "Optimizers"): every parameter's role (model/roles.h)
// decides whether it is decayed, which rule updates it and at what rate. optim.type adamw: AdamW
// for every role; muon / normuon: that rule for role `matrix`, AdamW for the others. One
// schedule serves all: a group's rate at update s is its peak times lr(s) / optim.lr.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "core/torch.h"
#include "train/adamw.h"
#include "train/muon.h"

namespace normlab {

class Optimizer {
 public:
  // named: the model's parameters (named_parameters() order); each must have a declared role
  // (a RuntimeFailure names the first that has none).
  Optimizer(const std::vector<std::pair<std::string, torch::Tensor>>& named, const OptimConfig& o);

  // One update with the current gradients times grad_scale (clipping coefficient / loss scale);
  // lr is the scheduled rate of optim.lr at this update (src/train/README.md, "Learning rate").
  void step(double lr, double grad_scale = 1.0);
  // Clears every parameter's gradient: zeroed on the CPU, undefined (set to none) on CUDA.
  void zero_grad();

  int64_t steps_taken() const { return adamw_->steps_taken(); }
  // AdamW's exp_avg.* / exp_avg_sq.*, then Muon's *.muon_momentum (and *.normuon_v).
  std::vector<std::pair<std::string, torch::Tensor>> state() const;
  void load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state, int64_t steps);

  AdamW& adamw() { return *adamw_; }
  Muon* muon() { return muon_.get(); }
  // Every parameter with its role, in the order given.
  const std::vector<std::pair<std::string, torch::Tensor>>& params() const { return params_; }
  Role role(size_t i) const { return roles_[i]; }

 private:
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  std::vector<Role> roles_;
  std::unique_ptr<AdamW> adamw_;
  std::unique_ptr<Muon> muon_;  // null under adamw
  OptimConfig o_;
};

}  // namespace normlab
