// Pre-LN (Xiong et al. 2020; GPT-2): x = x + F(Na(x)) for each sublayer, final norm after the
// last block. The residual stream is never normalised, so gradients reach early blocks intact.
#include "model/block.h"

namespace normlab {
BlockPlan pre_plan(int64_t, const ModelConfig&) {
  BlockPlan p = additive_plan("pre", [](BlockImpl& b, int k, const torch::Tensor& x) {
    return k == 1 ? b.ls(1, b.attn(b.norm("norm1", x))) : b.ls(2, b.ffn(b.norm("norm2", x)));
  });
  p.norm_slots = {"norm1", "norm2"};
  return p;
}

LayoutType pre_layout() {
  LayoutType t{"pre", "x = x + F(Na(x))", true, pre_plan};
  t.depth_branch = true;
  t.reference = [](const torch::Tensor& x, const BlockReference& r) {
    auto h = x + r.scaled("ls1", r.attn(r.norm("norm1", x)));
    return h + r.scaled("ls2", r.ffn(r.norm("norm2", h)));
  };
  return t;
}
}  // namespace normlab
