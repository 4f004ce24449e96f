// Value residual `fixed`: every mixing block reads 0.5 v + 0.5 V_0; no parameters.
#include "model/value_residual/value_residual.h"

namespace normlab {
namespace {
class FixedMix : public ValueMix {
 public:
  torch::Tensor mix(const torch::Tensor&, const torch::Tensor& v, const torch::Tensor& v0,
                    torch::Tensor* weight_on_v0) const override {
    if (weight_on_v0) *weight_on_v0 = torch::full({}, 0.5);
    return 0.5 * v + 0.5 * v0;
  }
};
}  // namespace

ValueResidualType fixed_value_residual() {
  return {"fixed", "v' = 0.5 v + 0.5 V_0", "",
          [](torch::nn::Module&, const ValueMixShape&) { return std::make_unique<FixedMix>(); }};
}
}  // namespace normlab
