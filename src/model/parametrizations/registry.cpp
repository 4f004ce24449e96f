// The parametrization registry: one line per parametrization. Validation, resolution, `normlab keys`,
// the docs test and the registry-wide tests all iterate this table.
#include "model/parametrizations/parametrization_type.h"

#include <algorithm>

#include "core/registry.h"

namespace normlab {

ParametrizationType sp_parametrization();
ParametrizationType mup_parametrization();
ParametrizationType completep_parametrization();

const std::vector<ParametrizationType>& parametrization_registry() {
  static const std::vector<ParametrizationType> table = {sp_parametrization(), mup_parametrization(),
                                                         completep_parametrization()};
  return table;
}

const ParametrizationType* find_parametrization(const std::string& name) { return find_by_name(parametrization_registry(), name); }

std::string parametrization_names() { return names_of(parametrization_registry()); }

bool ParametrizationType::reads_key(const std::string& key) const {
  return std::find(reads.begin(), reads.end(), key) != reads.end();
}

}  // namespace normlab
