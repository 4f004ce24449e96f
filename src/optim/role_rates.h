// The multipliers of each role's peak learning rate and weight decay: the one place they are
// decided, and every optimizer receives them (as RatedParam::lr_mult / weight_decay, through
// Optimizer). Standard parametrization: optim.lr_mult.<role> (matrix 1) and decay 1; a
// parametrization that scales rates with the model's shape multiplies its factors in here.
#pragma once

#include <array>

#include "config/config.h"

namespace normlab {

struct RoleRate {
  double lr = 1;     // times the rule's peak rate
  double decay = 1;  // times optim.weight_decay (for the roles that decay: model/roles.h)
};

class RoleRates {
 public:
  RoleRates() = default;
  static RoleRates from(const OptimConfig& o);  // optim.lr_mult.<role>, decay 1
  RoleRate& operator[](Role r) { return rates_[static_cast<size_t>(r)]; }
  const RoleRate& operator[](Role r) const { return rates_[static_cast<size_t>(r)]; }

 private:
  std::array<RoleRate, 6> rates_{};
};

}  // namespace normlab
