// Reordered norm (OLMo 2, Team OLMo 2024): x = x + Nb(F(x)). The sublayer sees the raw stream;
// only its output is normalised before it joins the residual.
#include "model/block.h"

namespace normlab {
BlockPlan reordered_plan(int64_t, const ModelConfig&) {
  BlockPlan p = additive_plan("reordered", [](BlockImpl& b, int k, const torch::Tensor& x) {
    return k == 1 ? b.ls(1, b.norm("norm1_out", b.attn(x))) : b.ls(2, b.norm("norm2_out", b.ffn(x)));
  });
  p.norm_slots = {"norm1_out", "norm2_out"};
  return p;
}

LayoutType reordered_layout() {
  LayoutType t{"reordered", "x = x + Nb(F(x))", true, reordered_plan};
  t.depth_branch = true;
  t.reference = [](const torch::Tensor& x, const BlockReference& r) {
    auto h = x + r.scaled("ls1", r.norm("norm1_out", r.attn(x)));
    return h + r.scaled("ls2", r.norm("norm2_out", r.ffn(h)));
  };
  return t;
}
}  // namespace normlab
