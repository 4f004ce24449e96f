// Sandwich-LN (Ding et al. 2021, CogView; the shape of Gemma 2 and Peri-LN):
// x = x + Nb(F(Na(x))). The output norm bounds what each sublayer adds to the stream.
#include "model/block.h"

namespace normlab {
BlockPlan sandwich_plan(int64_t, const ModelConfig&) {
  BlockPlan p = additive_plan("sandwich", [](BlockImpl& b, int k, const torch::Tensor& x) {
    return k == 1 ? b.ls(1, b.norm("norm1_out", b.attn(b.norm("norm1", x))))
                  : b.ls(2, b.norm("norm2_out", b.ffn(b.norm("norm2", x))));
  });
  p.norm_slots = {"norm1", "norm1_out", "norm2", "norm2_out"};
  return p;
}

LayoutType sandwich_layout() {
  LayoutType t{"sandwich", "x = x + Nb(F(Na(x)))", true, sandwich_plan};
  t.depth_branch = true;
  t.reference = [](const torch::Tensor& x, const BlockReference& r) {
    auto h = x + r.scaled("ls1", r.norm("norm1_out", r.attn(r.norm("norm1", x))));
    return h + r.scaled("ls2", r.norm("norm2_out", r.ffn(r.norm("norm2", h))));
  };
  return t;
}
}  // namespace normlab
