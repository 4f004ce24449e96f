#include "optim/role_rates.h"

namespace normlab {

RoleRates RoleRates::from(const OptimConfig& o) {
  RoleRates r;
  for (const auto& e : ChoiceTable<Role>::entries) r[e.value].lr = o.lr_mult.of(e.value);
  return r;
}

}  // namespace normlab
