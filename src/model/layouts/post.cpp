// Post-LN (Vaswani et al. 2017): x = Na(x + F(x)) for each sublayer, no final norm. Every
// residual sum is normalised, which shrinks the gradient reaching early blocks at init
// (Xiong et al. 2020) and makes warm-up necessary.
#include "model/block.h"

namespace normlab {
namespace {
torch::Tensor post_forward(BlockImpl& b, const torch::Tensor& x) {
  auto h = b.norm("norm1", x + b.ls(1, b.attn(x)));
  return b.norm("norm2", h + b.ls(2, b.ffn(h)));
}
}  // namespace

BlockPlan post_plan(int64_t, const ModelConfig&) {
  BlockPlan p;
  p.layout = "post";
  p.forward = post_forward;
  p.norm_slots = {"norm1", "norm2"};
  return p;
}

LayoutType post_layout() {
  LayoutType t{"post", "x = Na(x + F(x))", false, post_plan};
  t.reference = [](const torch::Tensor& x, const BlockReference& r) {
    auto h = r.norm("norm1", x + r.scaled("ls1", r.attn(x)));
    return r.norm("norm2", h + r.scaled("ls2", r.ffn(h)));
  };
  return t;
}
}  // namespace normlab
