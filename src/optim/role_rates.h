// The multipliers of each role's peak learning rate and weight decay: the one place they are
// decided, and every optimizer receives them (as RatedParam::lr_mult / weight_decay, through
// Optimizer). Standard parametrization: optim.lr_mult.<role> (matrix 1) and decay 1. A
// parametrization (param.type, model/parametrization.h) multiplies its width and depth factors in
// here; CompleteP's depth factor on gains and biases applies inside the blocks only, so each role
// has a row for parameters in a block and one for those outside.
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
  static RoleRates from(const OptimConfig& o);  // optim.lr_mult.<role>, decay 1 (sp)
  // from(c.optim) times the factors of c.param for c.model's shape under c.optim.type's entry.
  static RoleRates of(const Config& c);
  // Role r's rates for a parameter in a block (in_block) or outside the blocks.
  RoleRate& at(Role r, bool in_block) { return rates_[in_block ? 1 : 0][static_cast<size_t>(r)]; }
  const RoleRate& at(Role r, bool in_block) const { return rates_[in_block ? 1 : 0][static_cast<size_t>(r)]; }
  // Both rows of role r.
  void set(Role r, const RoleRate& rate) { at(r, false) = at(r, true) = rate; }

 private:
  std::array<std::array<RoleRate, 6>, 2> rates_{};
};

}  // namespace normlab
