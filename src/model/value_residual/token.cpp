// Value residual `token`: a per-token, per-head gate g = sigmoid(x W^T + b) (`vres_gate.weight`
// [H, d], `vres_gate.bias` [H], zeros: g = 1/2, so the mode starts as `fixed`):
// v'[h] = g_h v[h] + (1 - g_h) V_0[h].
#include "model/roles.h"
#include "model/value_residual/value_residual.h"

namespace normlab {
namespace {
class TokenMix : public ValueMix {
 public:
  TokenMix(torch::Tensor w, torch::Tensor b, int64_t n_heads) : w_(std::move(w)), b_(std::move(b)), H_(n_heads) {}
  torch::Tensor mix(const torch::Tensor& x, const torch::Tensor& v, const torch::Tensor& v0,
                    torch::Tensor* weight_on_v0) const override {
    const int64_t B = v.size(0), T = v.size(1), d = v.size(2), dh = d / H_;
    auto g = torch::sigmoid(torch::linear(x, w_, b_)).to(v.scalar_type()).unsqueeze(-1);  // (B, T, H, 1)
    if (weight_on_v0) *weight_on_v0 = (1 - g.detach().to(torch::kFloat)).mean();
    return (g * v.view({B, T, H_, dh}) + (1 - g) * v0.view({B, T, H_, dh})).view({B, T, d});
  }

 private:
  torch::Tensor w_, b_;  // the attention's vres_gate.weight, .bias
  int64_t H_;
};
}  // namespace

ValueResidualType token_value_residual() {
  return {"token", "v'[h] = g_h v[h] + (1 - g_h) V_0[h], g = sigmoid(x W^T + b) per token and head (init 1/2)",
          "its gate maps the width to one number per token: a readout µP does not scale",
          [](torch::nn::Module& attn, const ValueMixShape& s) {
            // Zeros, made without a Linear, whose constructor would draw from the generator and
            // shift every later weight of the seed's init.
            auto gate = attn.register_module("vres_gate", std::make_shared<torch::nn::Module>());
            auto w = gate->register_parameter("weight", with_role(torch::zeros({s.n_heads, s.d_model}), Role::kMixing));
            auto b = gate->register_parameter("bias", with_role(torch::zeros({s.n_heads}), Role::kMixing));
            return std::make_unique<TokenMix>(w, b, s.n_heads);
          }};
}
}  // namespace normlab
