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
  return {"none", std::numeric_limits<double>::quiet_NaN(), "x",
          [](const NormOptions&) { return std::make_shared<IdentityNormImpl>(); }};
}
}  // namespace normlab
