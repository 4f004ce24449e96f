// The run's optimizer (src/optim/README.md): every parameter's role (model/roles.h) decides
// whether it is decayed and its rate multipliers (RoleRates, one place); the entry of optim.type
// in the optimizer registry decides which update rule takes it. One schedule serves all: a
// parameter's rate at update s is its rule's peak times its multiplier times lr(s) / optim.lr.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "core/torch.h"
#include "optim/role_rates.h"
#include "optim/rule.h"

namespace normlab {

class Optimizer {
 public:
  // named: the model's parameters (named_parameters() order); each must have a declared role
  // (a RuntimeFailure names the first that has none). rates: each role's multipliers; in_block:
  // whether parameter i sits in a block (empty: none does), which picks its role's row.
  Optimizer(const NamedTensors& named, const OptimConfig& o, const RoleRates& rates,
            const std::vector<bool>& in_block = {});
  Optimizer(const NamedTensors& named, const OptimConfig& o) : Optimizer(named, o, RoleRates::from(o)) {}

  // One update with the current gradients times grad_scale (clipping coefficient / loss scale);
  // lr is the scheduled rate of optim.lr at this update (src/train/README.md, "Learning rate").
  void step(double lr, double grad_scale = 1.0);
  // Clears every parameter's gradient: zeroed on the CPU, undefined (set to none) on CUDA.
  void zero_grad();

  int64_t steps_taken() const { return t_; }
  // Every rule's state, rule by rule (AdamW's exp_avg.* / exp_avg_sq.*, then Muon's *.muon_momentum
  // and NorMuon's *.normuon_v).
  NamedTensors state() const;
  void load_state(const NamedTensors& state, int64_t steps);

  // The rules, each with its parameters and their rates.
  const UpdateRules& rules() const { return rules_; }
  // Every parameter with its role, in the order given.
  const NamedTensors& params() const { return params_; }
  Role role(size_t i) const { return roles_[i]; }

 private:
  NamedTensors params_;
  std::vector<Role> roles_;
  UpdateRules rules_;
  double peak_lr_;  // optim.lr: the schedule's reference
  int64_t t_ = 0;
};

}  // namespace normlab
