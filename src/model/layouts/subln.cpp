// Sub-LN (Magneto, Wang et al. 2022b; torchscale's default): x = x + A_sub(Na(x)) where the
// attention normalises its merged head context (attn.inner_norm) before out_proj, and
// x = x + M_mid(Na(x)) with ffn.mid_norm after the activation. Init: after the scheme, v_proj,
// out_proj, fc1, fc2 and ffn.gate are multiplied by gamma = sqrt(log(2L)) (Magneto's decoder
// rule; model.subln.gamma, 1 turns it off).
#include <cmath>

#include "model/block.h"
#include "model/norms/norm.h"
#include "model/transformer.h"

namespace normlab {
namespace {
BlockPlan subln_plan(int64_t layer, const ModelConfig& m) {
  BlockPlan p = pre_plan(layer, m);  // the pre equation; the extra norms sit inside F
  p.layout = "subln";
  p.sublayers = [](BlockOptions& o) {
    o.attn.inner_norm_type = o.norm_type;
    o.attn.inner_norm = o.norm;
    add_ffn_mid_norm(o);
  };
  return p;
}
}  // namespace

LayoutType subln_layout() {
  LayoutType t{"subln", "x = x + F_sub(Na(x)), F_sub with a norm before its output projection", true,
               subln_plan};
  t.depth_branch = true;
  t.resolve = [](ModelConfig& m) {
    if (m.keys.is_auto("subln.gamma"))
      m.keys.set("subln.gamma", std::sqrt(std::log(2.0 * static_cast<double>(m.n_layers))));
  };
  t.keys = {{"gamma", KeyKind::kNumber, {}, "Sub-LN init gain of v/out/fc1/fc2/ffn.gate; auto = sqrt(log(2L)); 1 turns it off",
             {}, check_positive}};
  t.init = [](TransformerImpl& model, const ModelConfig& m) {
    const double gamma = m.keys.number("subln.gamma");
    for_each_block_matrix(model, [&](torch::Tensor& w, bool branch) {
      if (branch) w.mul_(gamma);
    });
  };
  // Sub-LN's extra norms sit inside the sublayers (stubbed in the equation test; the attention
  // tests and the reference check cover them): the block equation is pre's.
  t.reference = [](const torch::Tensor& x, const BlockReference& r) {
    auto h = x + r.scaled("ls1", r.attn(r.norm("norm1", x)));
    return h + r.scaled("ls2", r.ffn(r.norm("norm2", h)));
  };
  return t;
}
}  // namespace normlab
