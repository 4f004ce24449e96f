#include "optim/role_rates.h"

#include "model/parametrization.h"
#include "optim/registry.h"

namespace normlab {

RoleRates RoleRates::from(const OptimConfig& o) {
  RoleRates r;
  for (const auto& e : ChoiceTable<Role>::entries) r.set(e.value, {o.lr_mult.of(e.value), 1.0});
  return r;
}

RoleRates RoleRates::of(const Config& c) {
  RoleRates r = from(c.optim);
  ParamConfig p = c.param;
  resolve_param_config(p, c.model);
  const Parametrization pz = Parametrization::of(c.model, p);
  const OptimizerEntry* entry = find_optimizer(c.optim.type);
  const bool width_aware = entry && entry->width_aware_matrices;
  for (const auto& e : ChoiceTable<Role>::entries) {
    for (const bool in_block : {false, true}) {
      RoleRate& rate = r.at(e.value, in_block);
      // A factor of exactly 1 leaves the rate as it was (sp and the base shape: bit for bit).
      if (const double f = pz.lr_mult(e.value, in_block, width_aware); f != 1.0) rate.lr *= f;
      if (const double f = pz.decay_mult(e.value, width_aware); f != 1.0) rate.decay *= f;
    }
  }
  return r;
}

}  // namespace normlab
