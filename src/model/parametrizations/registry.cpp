// The parametrization registry: one line per parametrization. Validation, resolution, `normlab keys`,
// the docs test and the registry-wide tests all iterate this table.
#include "model/parametrizations/parametrization_type.h"

#include <algorithm>

#include <fmt/format.h>

#include "config/load.h"
#include "model/residual/residual.h"
#include "model/transformer.h"
#include "model/value_residual/value_residual.h"
#include "model/layouts/layout.h"

namespace normlab {

ParametrizationType sp_parametrization();
ParametrizationType mup_parametrization();
ParametrizationType completep_parametrization();

const std::vector<ParametrizationType>& parametrization_registry() {
  static const std::vector<ParametrizationType> table = {sp_parametrization(), mup_parametrization(),
                                                         completep_parametrization()};
  return table;
}

const ParametrizationType* find_parametrization(const std::string& name) {
  for (const auto& t : parametrization_registry()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string parametrization_names() {
  std::string out;
  for (const auto& t : parametrization_registry()) out += (out.empty() ? "" : ", ") + t.name;
  return out;
}

bool ParametrizationType::reads_key(const std::string& key) const {
  return std::find(reads.begin(), reads.end(), key) != reads.end();
}

void check_width_scope(const std::string& mode, const Config& c, const ResolvedModel& entries, Problems& problems) {
  const ModelConfig& m = c.model;
  if (entries.residual && entries.residual->wraps_terms())
    problems.add("param.type", fmt::format("{} needs model.residual.type: add (the {} stream's maps to n streams are "
                                           "not parametrized here)", mode, m.residual.type));
  if (entries.value_residual && !entries.value_residual->outside_parametrization.empty())
    problems.add("param.type", fmt::format("{} does not take model.value_residual: {} ({})", mode, m.value_residual,
                                           entries.value_residual->outside_parametrization));
  if (m.attn_gate == AttnGate::kHead)
    problems.add("param.type", fmt::format("{} does not take model.attn_gate: head (its gate maps the width to one "
                                           "number per head: a readout µP does not scale)", mode));
  if (entries.layout && entries.layout->own_parametrization)
    problems.add("param.type", fmt::format("{} does not apply to layout {}: it has its own parametrization", mode, m.layout));
}

}  // namespace normlab
