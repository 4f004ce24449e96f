// DeepNorm (Wang et al. 2022, "DeepNet"): x = Na(alpha * x + F(x)), alpha = (2L)^(1/4) for a
// decoder-only model, plus the beta-scaled xavier init of v/out/fc1/fc2 (model/init.cpp). Both
// parts are separately switchable (alpha = 1, beta = 1).
#include <cmath>

#include "model/block.h"

namespace normlab {
namespace {
torch::Tensor deepnorm_forward(BlockImpl& b, const torch::Tensor& x) {
  auto h = b.norm("norm1", x * b.alpha() + b.attn(x));
  return b.norm("norm2", h * b.alpha() + b.ffn(h));
}
}  // namespace

BlockPlan deepnorm_plan(int64_t, const ModelConfig& m) {
  BlockPlan p;
  p.layout = "deepnorm";
  p.forward = deepnorm_forward;
  p.norm_slots = {"norm1", "norm2"};
  p.alpha = m.deepnorm.alpha.value_or(std::pow(2.0 * m.n_layers, 0.25));
  return p;
}
}  // namespace normlab
