// Value residual `scalar`: a learnable lambda per mixing block (`vres_lambda` [1], init 0.5, so the
// mode starts as `fixed`): v' = (1 - lambda) v + lambda V_0.
#include "model/roles.h"
#include "model/value_residual/value_residual.h"

namespace normlab {
namespace {
class ScalarMix : public ValueMix {
 public:
  explicit ScalarMix(torch::Tensor lambda) : lambda_(std::move(lambda)) {}
  torch::Tensor mix(const torch::Tensor&, const torch::Tensor& v, const torch::Tensor& v0,
                    torch::Tensor* weight_on_v0) const override {
    auto l = lambda_.to(v.scalar_type());
    if (weight_on_v0) *weight_on_v0 = lambda_.detach().to(torch::kFloat).reshape({});
    return (1 - l) * v + l * v0;
  }

 private:
  torch::Tensor lambda_;  // the attention's vres_lambda (a handle: the module's own tensor)
};
}  // namespace

ValueResidualType scalar_value_residual() {
  return {"scalar", "v' = (1 - lambda) v + lambda V_0, lambda learnable per block (init 0.5)", "",
          [](torch::nn::Module& attn, const ValueMixShape&) {
            auto lambda = attn.register_parameter("vres_lambda", with_role(torch::full({1}, 0.5), Role::kMixing));
            return std::make_unique<ScalarMix>(lambda);
          }};
}
}  // namespace normlab
