// The value-residual registry: one line per mode. Validation, `normlab keys` and the
// parameterised tests iterate this table.

#include "model/value_residual/value_residual.h"

#include "core/registry.h"

namespace normlab {

ValueResidualType fixed_value_residual();
ValueResidualType scalar_value_residual();
ValueResidualType token_value_residual();

namespace {
// The mode that mixes nothing: every block reads its own values.
ValueResidualType none_value_residual() { return {"none", "v (no value residual)", "", nullptr}; }
}  // namespace

const std::vector<ValueResidualType>& value_residual_registry() {
  static const std::vector<ValueResidualType> table = {none_value_residual(), fixed_value_residual(),
                                                       scalar_value_residual(), token_value_residual()};
  return table;
}

const ValueResidualType* find_value_residual(const std::string& name) { return find_by_name(value_residual_registry(), name); }

std::string value_residual_names() { return names_of(value_residual_registry()); }

const torch::Tensor& ValueSource::get() const {
  TORCH_CHECK(v0_.defined(), "value residual: block 0's values were not handed to this block");
  return v0_;
}

}  // namespace normlab
