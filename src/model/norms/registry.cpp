// The norm registry: one line per norm. Validation, `normlab keys` and the parameterised tests
// all iterate this table.
#include <cmath>
#include <limits>

#include "model/norms/layernorm.h"
#include "model/norms/rmsnorm.h"

namespace normlab {

NormPtr make_scalenorm(const NormOptions& o);
NormPtr make_batchnorm(const NormOptions& o);
NormPtr make_dyt(const NormOptions& o);
NormPtr make_none(const NormOptions& o);
NormPtr make_rmsnorm_free(const NormOptions& o);
NormPtr make_derf(const NormOptions& o);

namespace {
constexpr double kNoEps = std::numeric_limits<double>::quiet_NaN();
}

const std::vector<NormType>& norm_registry() {
  static const std::vector<NormType> table = {
      {"layernorm", 1e-5, "(x - mean)/sqrt(var + eps)*weight + bias",
       [](const NormOptions& o) { return std::make_shared<LayerNormImpl>(o); }},
      {"rmsnorm", 1e-6, "x/sqrt(mean(x^2) + eps)*weight",
       [](const NormOptions& o) { return std::make_shared<RMSNormImpl>(o, false); }},
      {"rmsnorm_1p", 1e-6, "x/sqrt(mean(x^2) + eps)*(1 + weight)",
       [](const NormOptions& o) { return std::make_shared<RMSNormImpl>(o, true); }},
      {"scalenorm", 1e-5, "weight*x/max(||x||, eps)", make_scalenorm},
      {"batchnorm", 1e-5, "(x - mu_batch)/sqrt(var_batch + eps)*weight + bias", make_batchnorm},
      {"dyt", kNoEps, "weight*tanh(alpha*x) + bias", make_dyt},
      {"none", kNoEps, "x", make_none},
      {"rmsnorm_free", 1e-6, "x/sqrt(mean(x^2) + eps)", make_rmsnorm_free},
      {"derf", kNoEps, "weight*erf(alpha*x + shift) + bias", make_derf},
  };
  return table;
}

const NormType* find_norm(const std::string& name) {
  for (const auto& t : norm_registry()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string norm_names() {
  std::string out;
  for (const auto& t : norm_registry()) out += (out.empty() ? "" : ", ") + t.name;
  return out;
}

NormPtr make_norm(const std::string& type, const NormOptions& options) {
  const NormType* t = find_norm(type);
  TORCH_CHECK(t != nullptr, "unknown norm type '", type, "' (known: ", norm_names(), ")");
  return t->make(options);
}

}  // namespace normlab
