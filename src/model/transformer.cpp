#include "model/transformer.h"

#include <cmath>

#include <fmt/format.h>

namespace normlab {

double norm_eps(const ModelConfig& m, const std::string& type) {
  if (m.norm.eps) return *m.norm.eps;
  const NormType* t = find_norm(type);
  return (t && std::isfinite(t->default_eps)) ? t->default_eps : 1e-5;
}

void resolve_model_config(ModelConfig& m) {
  const double L = static_cast<double>(m.n_layers);
  if (!m.deepnorm.alpha) m.deepnorm.alpha = std::pow(2.0 * L, 0.25);
  if (!m.deepnorm.beta) m.deepnorm.beta = std::pow(8.0 * L, -0.25);
  if (!m.mix.post_layers) m.mix.post_layers = m.n_layers / 4;
  if (!m.qk_norm_type) m.qk_norm_type = m.norm.type;
}

void check_model_config(const ModelConfig& m, Problems& p) {
  if (!find_norm(m.norm.type)) {
    p.add("model.norm.type", fmt::format("'{}' is not a registered norm; expected one of: {}",
                                         m.norm.type, norm_names()));
  }
  if (m.qk_norm_type && !find_norm(*m.qk_norm_type)) {
    p.add("model.qk_norm_type", fmt::format("'{}' is not a registered norm; expected one of: {}",
                                            *m.qk_norm_type, norm_names()));
  }
  if (!find_layout(m.layout)) {
    p.add("model.layout", fmt::format("'{}' is not a registered layout; expected one of: {}",
                                      m.layout, layout_names()));
  }
}

TransformerImpl::TransformerImpl(const ModelConfig& m) : m_(m) {
  const LayoutType* layout = find_layout(m.layout);
  TORCH_CHECK(layout, "unknown layout ", m.layout);
  NormOptions no;
  no.size = m.d_model;
  no.eps = norm_eps(m, m.norm.type);
  no.bias = m.norm.bias;
  no.dyt_alpha = m.norm.dyt_alpha;

  tok_emb = register_module("tok_emb", torch::nn::Embedding(m.vocab_size, m.d_model));
  if (m.pos == "learned") pos_emb = register_module("pos_emb", torch::nn::Embedding(m.ctx, m.d_model));
  if (m.embed_norm) embed_norm = register_module("embed_norm", make_norm(m.norm.type, no));

  BlockOptions bo;
  bo.attn.d_model = m.d_model;
  bo.attn.n_heads = m.n_heads;
  bo.attn.ctx = m.ctx;
  bo.attn.bias = m.bias;
  bo.attn.rope = m.pos == "rope";
  bo.attn.softcap = m.attn_softcap;
  if (m.qk_norm) {
    const std::string qk_type = m.qk_norm_type.value_or(m.norm.type);
    bo.attn.qk_norm_type = qk_type;
    bo.attn.qk_norm = no;
    bo.attn.qk_norm.size = m.d_model / m.n_heads;
    bo.attn.qk_norm.eps = norm_eps(m, qk_type);
  }
  bo.ffn.d_model = m.d_model;
  bo.ffn.d_ff = m.d_ff;
  bo.ffn.swiglu = m.ffn == "swiglu";
  bo.ffn.bias = false;  // the contract gives model.bias to the attention projections only
  bo.norm_type = m.norm.type;
  bo.norm = no;
  block_list_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < m.n_layers; ++i) {
    bo.plan = layout->plan(i, m);
    Block b(bo);
    block_list_->push_back(b);
    blocks_.push_back(b);
  }
  if (layout->final_norm) final_norm = register_module("final_norm", make_norm(m.norm.type, no));
  if (!m.tie_embeddings) {
    lm_head = register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(m.d_model, m.vocab_size).bias(false)));
  }
}

void TransformerImpl::set_capture(bool on) {
  capture_ = on;
  for (auto& b : blocks_) b->attention()->set_capture(on);
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens) {
  const int64_t T = tokens.size(1);
  TORCH_CHECK(T <= m_.ctx, "sequence of ", T, " tokens is longer than ctx ", m_.ctx);
  auto x = tok_emb(tokens);  // (B, T, d)
  if (pos_emb) x = x + pos_emb->weight.narrow(0, 0, T);
  if (embed_norm) x = embed_norm->forward(x);
  if (capture_) stats_ = ForwardStats{};
  auto rms = [](const torch::Tensor& t) { return t.detach().to(torch::kFloat).pow(2).mean().sqrt(); };
  for (auto& b : blocks_) {
    if (capture_) stats_.act_rms.push_back(rms(x));
    x = b->forward(x);
    if (capture_) {
      stats_.attn_entropy.push_back(b->attention()->stats().entropy);
      stats_.attn_logit_max.push_back(b->attention()->stats().logit_max);
    }
  }
  if (capture_) stats_.act_rms.push_back(rms(x));
  if (final_norm) x = final_norm->forward(x);
  auto logits = lm_head ? lm_head(x) : torch::matmul(x, tok_emb->weight.t());  // (B, T, V)
  if (m_.logit_softcap > 0) logits = torch::tanh(logits / m_.logit_softcap) * m_.logit_softcap;
  return logits;
}

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

void init_weights(Transformer& model, const InitConfig& init) {
  torch::NoGradGuard ng;
  const ModelConfig& m = model->config();
  const double L = static_cast<double>(m.n_layers);
  const bool deepnorm = m.layout == "deepnorm";
  const double beta = m.deepnorm.beta.value_or(std::pow(8.0 * L, -0.25));
  for (auto& kv : model->named_parameters()) {
    const std::string& name = kv.key();
    auto& p = kv.value();
    if (name == "tok_emb.weight" || name == "pos_emb.weight") {
      p.normal_(0.0, init.embed_std);
      continue;
    }
    const bool is_linear_weight = p.dim() == 2;
    if (!is_linear_weight) {
      if (ends_with(name, ".bias") && (name.find("_proj.") != std::string::npos ||
                                       name.find(".fc") != std::string::npos ||
                                       name.find(".gate.") != std::string::npos)) {
        p.zero_();
      }
      continue;  // norm parameters, head scale and residual scales keep their constructor values
    }
    const bool residual_out = ends_with(name, "out_proj.weight") || ends_with(name, "fc2.weight");
    if (deepnorm && name.rfind("blocks.", 0) == 0) {
      const bool qk = ends_with(name, "q_proj.weight") || ends_with(name, "k_proj.weight");
      torch::nn::init::xavier_normal_(p, qk ? 1.0 : beta);
    } else if (init.scheme == "xavier") {
      torch::nn::init::xavier_normal_(p, 1.0);
    } else {
      double std = init.std;
      if (init.scaled_residual && residual_out) std /= std::sqrt(2.0 * L);
      p.normal_(0.0, std);
    }
  }
}

int64_t count_params(Transformer& model, bool include_embeddings) {
  int64_t n = 0;
  for (auto& kv : model->named_parameters()) {
    if (!include_embeddings && (kv.key() == "tok_emb.weight" || kv.key() == "pos_emb.weight")) continue;
    n += kv.value().numel();
  }
  return n;
}

}  // namespace normlab
