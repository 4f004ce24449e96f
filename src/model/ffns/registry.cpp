// The feed-forward registry: one line per FFN. Validation, `normlab keys`, the docs test and the
// registry-wide tests iterate this table.
#include "model/ffns/ffn_type.h"

#include "core/registry.h"

namespace normlab {

FfnType gelu_ffn();
FfnType swiglu_ffn();
FfnType geglu_ffn();
FfnType relu2_ffn();

const std::vector<FfnType>& ffn_registry() {
  static const std::vector<FfnType> table = {gelu_ffn(), swiglu_ffn(), geglu_ffn(), relu2_ffn()};
  return table;
}

const FfnType* find_ffn(const std::string& name) { return find_by_name(ffn_registry(), name); }

std::string ffn_names() { return names_of(ffn_registry()); }

}  // namespace normlab
