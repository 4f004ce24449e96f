// LayerNorm Scaling (Sun et al. 2025, "The Curse of Depth in Large Language Models"):
// x = x + F(Na(x) / sqrt(i + 1)), i the 0-based block index: the norm output of deep blocks is
// damped so Pre-LN's output variance stops growing with depth and deep blocks keep working.
// No init change (the paper drops GPT-2's scaled residual init: configs/layouts/lns.yaml does).
#include <cmath>

#include "model/block.h"

namespace normlab {
namespace {
BlockPlan lns_plan(int64_t layer, const ModelConfig&) {
  BlockPlan p;
  p.layout = "lns";
  const double s = 1.0 / std::sqrt(static_cast<double>(layer + 1));
  p.forward = [s](BlockImpl& b, const torch::Tensor& x) {
    auto h = x + b.ls(1, b.attn(b.norm("norm1", x) * s));
    return h + b.ls(2, b.ffn(b.norm("norm2", h) * s));
  };
  p.norm_slots = {"norm1", "norm2"};
  return p;
}
}  // namespace

LayoutType lns_layout() { return {"lns", "x = x + F(Na(x) / sqrt(i + 1))", true, lns_plan}; }
}  // namespace normlab
