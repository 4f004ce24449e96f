// Pre-LN (Xiong et al. 2020; GPT-2): x = x + F(Na(x)) for each sublayer, final norm after the
// last block. The residual stream is never normalised, so gradients reach early blocks intact.
#include "model/block.h"

namespace normlab {
namespace {
torch::Tensor pre_forward(BlockImpl& b, const torch::Tensor& x) {
  auto h = x + b.ls(1, b.attn(b.norm("norm1", x)));
  return h + b.ls(2, b.ffn(b.norm("norm2", h)));
}
}  // namespace

BlockPlan pre_plan(int64_t, const ModelConfig&) {
  BlockPlan p;
  p.layout = "pre";
  p.forward = pre_forward;
  p.norm_slots = {"norm1", "norm2"};
  return p;
}

LayoutType pre_layout() { return {"pre", "x = x + F(Na(x))", true, pre_plan}; }
}  // namespace normlab
