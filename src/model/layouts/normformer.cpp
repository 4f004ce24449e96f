// NormFormer (Shleifer et al. 2021, paper form):
//   attention: x = s1 * x + Nb(A_hs(Na(x)))  with a learnable per-head scale before out_proj,
//   FFN:       x = s2 * x + M_mid(Na(x))     with a norm (ffn.mid_norm) after the activation.
// s1/s2 are learnable [d] skip scales (resid_scale1/2) when model.normformer.resid_scale is
// all / ffn, else 1.
#include "model/block.h"

namespace normlab {
namespace {
torch::Tensor normformer_forward(BlockImpl& b, const torch::Tensor& x) {
  auto h = b.scaled("resid_scale1", x) + b.ls(1, b.norm("norm1_out", b.attn(b.norm("norm1", x))));
  return b.scaled("resid_scale2", h) + b.ls(2, b.ffn(b.norm("norm2", h)));
}

BlockPlan normformer_plan(int64_t, const ModelConfig& m) {
  const std::string& rs = m.keys.name("normformer.resid_scale");
  BlockPlan p;
  if (rs == "none") {  // no skip scales: additive
    p = additive_plan("normformer", [](BlockImpl& b, int k, const torch::Tensor& x) {
      return k == 1 ? b.ls(1, b.norm("norm1_out", b.attn(b.norm("norm1", x)))) : b.ls(2, b.ffn(b.norm("norm2", x)));
    });
  } else {
    p.layout = "normformer";
    p.forward = normformer_forward;
  }
  p.norm_slots = {"norm1", "norm1_out", "norm2"};
  p.sublayers = [](BlockOptions& o) {
    o.attn.head_scale = true;
    add_ffn_mid_norm(o);
  };
  if (rs == "all") p.vectors.emplace_back("resid_scale1", 1.0);
  if (rs == "all" || rs == "ffn") p.vectors.emplace_back("resid_scale2", 1.0);
  return p;
}
}  // namespace

LayoutType normformer_layout() {
  LayoutType t{"normformer", "x = x + Nb(A_hs(Na(x))); x = x + M_mid(Na(x))", true, normformer_plan};
  t.depth_branch = true;
  t.keys = {{"resid_scale", KeyKind::kName, std::string("none"), "learnable skip scales on none, the ffn or all sublayers",
             {"none", "ffn", "all"}}};
  // The head scale and the FFN's mid norm sit inside the sublayers (stubbed in the equation test;
  // the attention tests cover the head scale, the reference check both).
  t.reference = [](const torch::Tensor& x, const BlockReference& r) {
    auto h = r.scaled("resid_scale1", x) + r.scaled("ls1", r.norm("norm1_out", r.attn(r.norm("norm1", x))));
    return r.scaled("resid_scale2", h) + r.scaled("ls2", r.ffn(r.norm("norm2", h)));
  };
  return t;
}
}  // namespace normlab
