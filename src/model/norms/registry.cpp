// The norm registry: one line per norm. Validation, `normlab keys`, the config keys the norms own
// and the parameterised tests all iterate this table.
#include <fmt/format.h>

#include "model/norms/norm.h"

#include "core/registry.h"
#include "model/roles.h"

namespace normlab {

NormType layernorm_norm();
NormType rmsnorm_norm();
NormType rmsnorm_1p_norm();
NormType scalenorm_norm();
NormType batchnorm_norm();
NormType dyt_norm();
NormType none_norm();
NormType rmsnorm_free_norm();
NormType derf_norm();
NormType ssnorm_norm();

const std::vector<NormType>& norm_registry() {
  static const std::vector<NormType> table = {
      layernorm_norm(), rmsnorm_norm(),      rmsnorm_1p_norm(), scalenorm_norm(), batchnorm_norm(),
      dyt_norm(),       none_norm(),         rmsnorm_free_norm(), derf_norm(),    ssnorm_norm(),
  };
  return table;
}

const NormType* find_norm(const std::string& name) { return find_by_name(norm_registry(), name); }

std::string norm_names() { return names_of(norm_registry()); }

NormPtr make_norm(const std::string& type, const NormOptions& options) {
  const NormType* t = find_norm(type);
  TORCH_CHECK(t != nullptr, "unknown norm type '", type, "' (known: ", norm_names(), ")");
  NormPtr norm = t->make(options);
  declare_roles(*norm, Role::kGain);  // every norm parameter is a gain (a residual entry may claim its own)
  return norm;
}

std::string check_positive(const KeyValue& v, const ModelConfig&) {
  const double* d = std::get_if<double>(&v);
  return d && *d > 0 ? "" : "must be > 0";
}

}  // namespace normlab
