// nGPT, the normalized Transformer (Loshchilov et al. 2024; NVIDIA/ngpt): every hidden state and
// every matrix row along d lives on the unit sphere, and each sublayer moves h toward its output
// by a learned per-channel step ("eigen learning rate"):
//   h = N(N(h) + a1 * (N(h_A) - N(h))),  a1 = |alpha_init * sqrt(d) * alpha1|   (attention)
//   h = N(N(h) + a2 * (N(h_M) - N(h))),  a2 = |alpha_init * sqrt(d) * alpha2|   (FFN)
// with N(z) = z / |z|, unit-norm q and k scaled by sqrt(d) s_qk, the FFN's s_u and s_v, logits
// scaled by sqrt(d) s_z, no norms and no final norm. The matrices are renormalised after init and
// after every applied update (after_update).
#include <cmath>

#include <fmt/format.h>

#include "model/block.h"
#include "model/norms/norm.h"
#include "model/roles.h"
#include "model/transformer.h"

namespace normlab {
namespace {

// x / |x| over the last axis, no eps, computed in fp32 (double stays double): nGPT's N.
torch::Tensor unit_norm(const torch::Tensor& x) {
  auto f = compute_dtype(x);
  return f / f.norm(2, -1, /*keepdim=*/true);
}

// nGPT's sublayers. Attention: s_qk [d] (init 1/sqrt(d)); after RoPE q_h, k_h = Q_h * N(q_h),
// Q_h * N(k_h) with Q = sqrt(d) * s_qk viewed [H, dh], scores sqrt(dh) q k^T (the dh factor on q
// turns the attention's 1/sqrt(dh) into sqrt(dh)). FFN: s_u, s_v [d_ff] (init 1);
// h = (sqrt(d) s_u) * fc1 x * silu((sqrt(d) s_v) * gate x).
void ngpt_sublayers(BlockOptions& o) {
  const int64_t d = o.attn.d_model, d_ff = o.ffn.d_ff;
  const double sd = std::sqrt(static_cast<double>(d));
  o.attn.qk = [d, sd](torch::nn::Module& a) -> AttentionOptions::QkMap {
    const torch::Tensor s_qk = a.register_parameter("s_qk", with_role(torch::full({d}, 1.0 / sd), Role::kGain));
    return [s_qk, sd](const torch::Tensor& q, const torch::Tensor& k, c10::ScalarType dtype) {
      const int64_t H = q.size(2), dh = q.size(3);
      auto Q = (s_qk * sd).view({1, 1, H, dh});
      return std::make_pair((unit_norm(q) * Q * static_cast<double>(dh)).to(dtype), (unit_norm(k) * Q).to(dtype));
    };
  };
  o.ffn.hidden = [d_ff, sd](FfnImpl& f) -> FfnOptions::HiddenMap {
    const torch::Tensor s_u = f.register_parameter("s_u", with_role(torch::ones({d_ff}), Role::kGain));
    const torch::Tensor s_v = f.register_parameter("s_v", with_role(torch::ones({d_ff}), Role::kGain));
    return [s_u, s_v, sd, fc1 = f.fc1, gate = f.gate](const torch::Tensor& x) mutable {
      return (s_u * sd) * fc1(x) * torch::silu((s_v * sd) * gate(x));
    };
  };
}

BlockPlan ngpt_plan(int64_t, const ModelConfig& m) {
  BlockPlan p;
  p.layout = "ngpt";
  p.sublayers = ngpt_sublayers;
  const double sd = std::sqrt(static_cast<double>(m.d_model));
  const double step = m.keys.number("ngpt.alpha_init") * sd;
  p.forward = [step](BlockImpl& b, const torch::Tensor& x) {  // the sublayers read h as it is
    auto n = unit_norm(x);
    auto a1 = (b.vector("alpha1") * step).abs();
    auto h = unit_norm(n + a1 * (unit_norm(b.attn(x)) - n));
    n = unit_norm(h);
    auto a2 = (b.vector("alpha2") * step).abs();
    return unit_norm(n + a2 * (unit_norm(b.ffn(h)) - n));
  };
  p.vectors = {{"alpha1", 1.0 / sd}, {"alpha2", 1.0 / sd}};
  return p;
}

// W = N(W) in fp32: rows (over d) of the embeddings and input projections, columns (over d) of
// the output projections.
void renormalise(TransformerImpl& model) {
  torch::NoGradGuard ng;
  auto rows = [](torch::Tensor& w) { w.copy_(unit_norm(w).to(w.scalar_type())); };
  auto cols = [](torch::Tensor& w) { w.copy_(unit_norm(w.t()).t().to(w.scalar_type())); };
  rows(model.tok_emb->weight);
  rows(model.lm_head->weight);
  for (int64_t i = 0; i < model.n_blocks(); ++i) {
    auto& a = model.block(i)->attention();
    auto& f = model.block(i)->feed_forward();
    for (auto* w : {&a->q_proj->weight, &a->k_proj->weight, &a->v_proj->weight, &f->fc1->weight, &f->gate->weight})
      rows(*w);
    cols(a->out_proj->weight);
    cols(f->fc2->weight);
  }
}

void ngpt_check(const Config& c, const std::function<void(const std::string&, const std::string&)>& add) {
  const ModelConfig& m = c.model;
  const ModelConfig plain;
  const std::string why = "nGPT needs it";
  if (m.pos != Position::kRope) add("model.pos", "must be rope under layout ngpt (no learned positions on the sphere)");
  if (m.ffn != "swiglu") add("model.ffn", "must be swiglu under layout ngpt (its s_u, s_v scale SwiGLU's two inputs)");
  if (m.tie_embeddings) add("model.tie_embeddings", "must be false under layout ngpt (tok_emb and lm_head are normalised apart)");
  if (m.bias) add("model.bias", "must be false under layout ngpt (no biases on the sphere)");
  if (c.optim.weight_decay != 0)
    add("optim.weight_decay", fmt::format("{} must be 0 under layout ngpt (the renormalisation undoes any decay)",
                                          c.optim.weight_decay));
  auto unused = [&](const std::string& key, bool non_default) {
    if (non_default) add(key, "has no effect under layout ngpt (it has no norms, layer scales or QK-Clip); leave it at its default");
  };
  unused("model.norm.type", m.norm.type != plain.norm.type);
  unused("model.norm.eps", m.norm.eps.has_value());
  unused("model.qk_norm", m.qk_norm);
  unused("model.qk_norm_type", m.qk_norm_type.has_value() && *m.qk_norm_type != m.norm.type);
  unused("model.v_norm", m.v_norm);
  unused("model.embed_norm", m.embed_norm);
  unused("model.layerscale", m.layerscale != 0);
  unused("model.embed_scale", m.embed_scale != 0);
  unused("optim.qk_clip", c.optim.qk_clip != 0);
  // model.residual.type other than add: the model check's rule for layouts that are not additive.
}
}  // namespace

LayoutType ngpt_layout() {
  LayoutType t{"ngpt", "h = N(N(h) + a * (N(F(h)) - N(h))), unit-norm states and matrices", false, ngpt_plan};
  t.keys = {{"alpha_init", KeyKind::kNumber, 0.05, "the steps a1, a2 start at this (alpha = 1/sqrt(d) stored)", {},
             check_positive}};
  t.check = ngpt_check;
  t.fit = [](Config& c) {  // what ngpt_check demands, and nothing else
    ModelConfig& m = c.model;
    const ModelConfig plain;
    m.pos = Position::kRope;
    m.ffn = "swiglu";
    m.tie_embeddings = false;
    m.bias = false;
    c.optim.weight_decay = 0;
    m.norm = plain.norm;
    m.qk_norm = false;
    m.qk_norm_type.reset();
    m.v_norm = false;
    m.embed_norm = false;
    m.layerscale = 0;
    m.embed_scale = 0;
    c.optim.qk_clip = 0;
  };
  t.own_parametrization = true;
  t.head = [](TransformerImpl& model, const ModelConfig& m) -> LayoutType::HeadMap {
    const double sd = std::sqrt(static_cast<double>(m.d_model));
    const torch::Tensor s_z = model.register_parameter("s_z", with_role(torch::full({m.vocab_size}, 1.0 / sd), Role::kGain));
    return [s_z, sd](const torch::Tensor& logits) { return logits * (s_z * sd).to(logits.scalar_type()); };
  };
  t.init = [](TransformerImpl& model, const ModelConfig&) { renormalise(model); };
  t.after_update = renormalise;
  t.block_stats = [](BlockImpl& b, const ModelConfig& m, LayerSeries& stats) {
    torch::NoGradGuard ng;
    const double step = m.keys.number("ngpt.alpha_init") * std::sqrt(static_cast<double>(m.d_model));
    stats.add("ngpt_a1", (b.vector("alpha1") * step).abs().mean().to(torch::kFloat));
    stats.add("ngpt_a2", (b.vector("alpha2") * step).abs().mean().to(torch::kFloat));
  };
  // N(z) = z / |z|; steps a = |alpha_init * sqrt(d) * alpha| (alpha1, alpha2 are stored scaled).
  t.reference = [](const torch::Tensor& x, const BlockReference& r) {
    auto N = [](const torch::Tensor& z) { return z / z.norm(2, -1, true); };
    const double step = r.model->keys.number("ngpt.alpha_init") * std::sqrt(static_cast<double>(r.model->d_model));
    auto h = N(N(x) + (r.param("alpha1") * step).abs() * (N(r.attn(x)) - N(x)));
    return N(N(h) + (r.param("alpha2") * step).abs() * (N(r.ffn(h)) - N(h)));
  };
  return t;
}
}  // namespace normlab
