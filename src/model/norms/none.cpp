// No normalisation: y = x, no parameters. The baseline every norm ablation needs.
#include <limits>

#include "model/norms/norm.h"

namespace normlab {
namespace {
class IdentityNormImpl : public NormImpl {
 public:
  torch::Tensor forward(const torch::Tensor& x) override { return x; }
};
}  // namespace

NormType none_norm() {
  NormType t{"none", std::numeric_limits<double>::quiet_NaN(), "x",
             [](const NormOptions&) { return std::make_shared<IdentityNormImpl>(); }};
  t.reference = [](const double* x, double* y, int64_t rows, int64_t n, const NormTensors&, double) {
    for (int64_t i = 0; i < rows * n; ++i) y[i] = x[i];
  };
  return t;  // no tensors
}
}  // namespace normlab
