// LayerNorm Scaling (Sun et al. 2025, "The Curse of Depth in Large Language Models"):
// x = x + F(Na(x) / sqrt(i + 1)), i the 0-based block index: the norm output of deep blocks is
// damped so Pre-LN's output variance stops growing with depth and deep blocks keep working.
// No init change (the paper drops GPT-2's scaled residual init: configs/layouts/lns.yaml does).
#include <cmath>

#include "model/block.h"

namespace normlab {
namespace {
BlockPlan lns_plan(int64_t layer, const ModelConfig&) {
  const double s = 1.0 / std::sqrt(static_cast<double>(layer + 1));
  BlockPlan p = additive_plan("lns", [s](BlockImpl& b, int k, const torch::Tensor& x) {
    return k == 1 ? b.ls(1, b.attn(b.norm("norm1", x) * s)) : b.ls(2, b.ffn(b.norm("norm2", x) * s));
  });
  p.norm_slots = {"norm1", "norm2"};
  return p;
}
}  // namespace

LayoutType lns_layout() {
  LayoutType t{"lns", "x = x + F(Na(x) / sqrt(i + 1))", true, lns_plan};
  t.depth_branch = true;
  t.reference = [](const torch::Tensor& x, const BlockReference& r) {
    const double s = 1.0 / std::sqrt(static_cast<double>(r.layer + 1));
    auto h = x + r.scaled("ls1", r.attn(r.norm("norm1", x) * s));
    return h + r.scaled("ls2", r.ffn(r.norm("norm2", h) * s));
  };
  return t;
}
}  // namespace normlab
