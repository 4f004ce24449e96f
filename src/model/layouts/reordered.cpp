// Reordered norm (OLMo 2, Team OLMo 2024): x = x + Nb(F(x)). The sublayer sees the raw stream;
// only its output is normalised before it joins the residual.
#include "model/block.h"

namespace normlab {
namespace {
torch::Tensor reordered_forward(BlockImpl& b, const torch::Tensor& x) {
  auto h = x + b.ls(1, b.norm("norm1_out", b.attn(x)));
  return h + b.ls(2, b.norm("norm2_out", b.ffn(h)));
}
}  // namespace

BlockPlan reordered_plan(int64_t, const ModelConfig&) {
  BlockPlan p;
  p.layout = "reordered";
  p.forward = reordered_forward;
  p.norm_slots = {"norm1_out", "norm2_out"};
  return p;
}

LayoutType reordered_layout() { return {"reordered", "x = x + Nb(F(x))", true, reordered_plan}; }
}  // namespace normlab
