// NormFormer (Shleifer et al. 2021, paper form):
//   attention: x = s1 * x + Nb(A_hs(Na(x)))  with a learnable per-head scale before out_proj,
//   FFN:       x = s2 * x + M_mid(Na(x))     with a norm (ffn.mid_norm) after the activation.
// s1/s2 are learnable [d] skip scales when model.normformer.resid_scale is all / ffn, else 1.
#include "model/block.h"

namespace normlab {
namespace {
torch::Tensor normformer_forward(BlockImpl& b, const torch::Tensor& x) {
  auto h = b.resid_scale(1, x) + b.norm("norm1_out", b.attn(b.norm("norm1", x)));
  return b.resid_scale(2, h) + b.ffn(b.norm("norm2", h));
}
}  // namespace

BlockPlan normformer_plan(int64_t, const ModelConfig& m) {
  BlockPlan p;
  p.layout = "normformer";
  p.forward = normformer_forward;
  p.norm_slots = {"norm1", "norm1_out", "norm2"};
  p.head_scale = true;
  p.ffn_mid_norm = true;
  p.resid_scale1 = m.normformer.resid_scale == "all";
  p.resid_scale2 = m.normformer.resid_scale == "all" || m.normformer.resid_scale == "ffn";
  return p;
}
}  // namespace normlab
