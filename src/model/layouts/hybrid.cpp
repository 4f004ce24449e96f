// HybridNorm (Zhuo et al. 2025): attention x = x + A_qkv(x) with no input norm and q, k, v each
// normalised inside (attn.q_norm, k_norm, v_norm forced on); FFN y = norm2(x); x = y + M(y): the
// stream itself is replaced by its normalised value. HybridNorm* (model.hybrid.first_block_pre)
// makes block 0 pre-norm: x = x + A_qkv(norm1(x)); x = x + M(norm2(x)).
#include "model/block.h"

namespace normlab {
namespace {
torch::Tensor hybrid_forward(BlockImpl& b, const torch::Tensor& x) {
  auto h = x + b.ls(1, b.attn(x));
  auto y = b.norm("norm2", h);
  return y + b.ls(2, b.ffn(y));
}

BlockPlan hybrid_plan(int64_t layer, const ModelConfig& m) {
  BlockPlan p;
  if (layer == 0 && m.keys.boolean("hybrid.first_block_pre")) {
    p = pre_plan(layer, m);
  } else {
    p.forward = hybrid_forward;
    p.norm_slots = {"norm2"};
  }
  p.layout = "hybrid";
  p.sublayers = [](BlockOptions& o) { o.attn.force_qkv_norm = true; };
  return p;
}
}  // namespace

LayoutType hybrid_layout() {
  LayoutType t{"hybrid", "x = x + A_qkv(x); y = N(x); x = y + M(y)", true, hybrid_plan};
  t.qkv_norm = true;
  t.keys = {{"first_block_pre", KeyKind::kBoolean, false, "HybridNorm*: block 0 is pre-norm (with q/k/v norms)"}};
  t.reference = [](const torch::Tensor& x, const BlockReference& r) {
    if (r.layer == 0 && r.model->keys.boolean("hybrid.first_block_pre")) return find_layout("pre")->reference(x, r);
    auto h = x + r.scaled("ls1", r.attn(x));
    auto y = r.norm("norm2", h);
    return y + r.scaled("ls2", r.ffn(y));
  };
  return t;
}
}  // namespace normlab
