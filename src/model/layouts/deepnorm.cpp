// DeepNorm (Wang et al. 2022, "DeepNet"): x = Na(alpha * x + F(x)), alpha = (2L)^(1/4) for a
// decoder-only model, plus its init: v_proj, out_proj, fc1, fc2 and ffn.gate xavier_normal with
// gain beta = (8L)^(-1/4), q_proj, k_proj (and attn.gate) gain 1 (the paper's form). Both parts
// are separately switchable (alpha = 1, beta = 1).
#include <cmath>

#include "model/block.h"
#include "model/norms/norm.h"
#include "model/transformer.h"

namespace normlab {
namespace {

BlockPlan deepnorm_plan(int64_t, const ModelConfig& m) {
  BlockPlan p;
  p.layout = "deepnorm";
  const double alpha = m.keys.number("deepnorm.alpha");
  p.forward = [alpha](BlockImpl& b, const torch::Tensor& x) {
    auto h = b.norm("norm1", x * alpha + b.ls(1, b.attn(x)));
    return b.norm("norm2", h * alpha + b.ls(2, b.ffn(h)));
  };
  p.norm_slots = {"norm1", "norm2"};
  return p;
}

void deepnorm_resolve(ModelConfig& m) {
  const double L = static_cast<double>(m.n_layers);
  if (m.keys.is_auto("deepnorm.alpha")) m.keys.set("deepnorm.alpha", std::pow(2.0 * L, 0.25));
  if (m.keys.is_auto("deepnorm.beta")) m.keys.set("deepnorm.beta", std::pow(8.0 * L, -0.25));
}

void deepnorm_init(TransformerImpl& model, const ModelConfig& m) {
  const double beta = m.keys.number("deepnorm.beta");
  for_each_block_matrix(model, [&](torch::Tensor& w, bool branch) { torch::nn::init::xavier_normal_(w, branch ? beta : 1.0); });
}
}  // namespace

LayoutType deepnorm_layout() {
  LayoutType t{"deepnorm", "x = Na(alpha*x + F(x))", false, deepnorm_plan};
  t.keys = {{"alpha", KeyKind::kNumber, {}, "residual scale; auto = (2L)^(1/4); 1 turns it off", {}, check_positive},
            {"beta", KeyKind::kNumber, {}, "init gain of v/out/fc1/fc2; auto = (8L)^(-1/4); 1 turns it off", {},
             check_positive}};
  t.resolve = deepnorm_resolve;
  t.init = deepnorm_init;
  t.reference = [](const torch::Tensor& x, const BlockReference& r) {
    const double alpha = r.model->keys.number("deepnorm.alpha");
    auto h = r.norm("norm1", alpha * x + r.scaled("ls1", r.attn(x)));
    return r.norm("norm2", alpha * h + r.scaled("ls2", r.ffn(h)));
  };
  return t;
}
}  // namespace normlab
