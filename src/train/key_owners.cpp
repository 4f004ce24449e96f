// The owners of config keys (config/owned_keys.h), read from the norm, layout, residual, optimizer
// and schedule registries: the one place where the config layer learns which entries exist and what keys they
// declare.
#include "config/owned_keys.h"
#include "model/layouts/layout.h"
#include "model/norms/norm.h"
#include "model/residual/residual.h"
#include "optim/registry.h"
#include "train/schedules/schedule_type.h"

namespace normlab {

const std::vector<KeyOwner>& key_owners() {
  static const std::vector<KeyOwner> owners = [] {
    std::vector<KeyOwner> out;
    for (const auto& n : norm_registry()) out.push_back({OwnerKind::kNorm, n.name, "norm", n.keys});
    for (const auto& l : layout_registry()) out.push_back({OwnerKind::kLayout, l.name, l.name, l.keys});
    for (const auto& r : residual_registry()) out.push_back({OwnerKind::kResidual, r.name, "residual", r.keys});
    for (const auto& o : optimizer_registry()) out.push_back({OwnerKind::kOptim, o.name, o.section, o.keys, o.together});
    for (const auto& t : schedule_registry()) out.push_back({OwnerKind::kSchedule, t.name, t.name, t.keys});
    return out;
  }();
  return owners;
}

}  // namespace normlab
