#include "model/transformer.h"

#include <cmath>

#include <fmt/format.h>

#include "model/roles.h"

namespace normlab {

double norm_eps(const ModelConfig& m, const std::string& type) {
  if (m.norm.eps) return *m.norm.eps;
  const NormType* t = find_norm(type);
  return (t && std::isfinite(t->default_eps)) ? t->default_eps : 1e-5;
}

ResolvedModel ResolvedModel::of(const ModelConfig& m) {
  ResolvedModel r;
  r.norm = find_norm(m.norm.type);
  r.qkv_norm = find_norm(m.qk_norm_type.value_or(m.norm.type));
  r.layout = find_layout(m.layout);
  r.residual = find_residual(m.residual.type);
  r.value_residual = find_value_residual(m.value_residual);
  r.ffn = find_ffn(m.ffn);
  r.qkv_norm_used = m.qk_norm || m.v_norm || (r.layout && r.layout->qkv_norm);
  return r;
}

bool ResolvedModel::batch_statistics() const {
  return (norm && norm->batch_statistics) || (qkv_norm_used && qkv_norm && qkv_norm->batch_statistics);
}

void resolve_model_config(ModelConfig& m) {
  if (!m.qk_norm_type) m.qk_norm_type = m.norm.type;
  const ResolvedModel r = ResolvedModel::of(m);
  if (r.layout && r.layout->resolve) r.layout->resolve(m);
}

void check_layout_scope(const Config& c, const ResolvedModel& r, Problems& p) {
  if (r.layout && r.layout->check) r.layout->check(c, [&](const std::string& key, const std::string& message) { p.add(key, message); });
}

void check_init_config(const Config& c, const ResolvedModel& r, Problems& p) {
  const ModelConfig& m = c.model;
  if (!c.init.zero_query || !r.layout || m.n_layers <= 0) return;
  if (m.qk_norm) {
    p.add("init.zero_query", "needs an unnormalised query; model.qk_norm normalises q (a zero q has no direction)");
    return;
  }
  ModelConfig resolved = m;  // the plans read resolved values
  resolve_model_config(resolved);
  for (int64_t i = 0; i < m.n_layers; ++i) {
    BlockOptions probe;  // what the layout's plan changes in block i's sublayers
    const BlockPlan plan = r.layout->plan(i, resolved);
    if (plan.sublayers) plan.sublayers(probe);
    if (probe.attn.force_qkv_norm || probe.attn.qk || probe.attn.qk_norm) {
      p.add("init.zero_query", fmt::format("needs an unnormalised query; layout {} normalises q in block {} (a zero q "
                                           "has no direction)", m.layout, i));
      return;
    }
  }
}

void check_model_config(const ModelConfig& m, const ResolvedModel& r, Problems& p) {
  if (!r.norm) {
    p.add("model.norm.type", fmt::format("'{}' is not a registered norm; expected one of: {}",
                                         m.norm.type, norm_names()));
  }
  if (m.qk_norm_type && !r.qkv_norm) {
    p.add("model.qk_norm_type", fmt::format("'{}' is not a registered norm; expected one of: {}",
                                            *m.qk_norm_type, norm_names()));
  }
  if (!r.layout) {
    p.add("model.layout", fmt::format("'{}' is not a registered layout; expected one of: {}",
                                      m.layout, layout_names()));
  }
  if (!r.ffn) p.add("model.ffn", fmt::format("'{}' is not a registered FFN; expected one of: {}", m.ffn, ffn_names()));
  if (!r.residual) {
    p.add("model.residual.type", fmt::format("'{}' is not a registered residual type; expected one of: {}",
                                             m.residual.type, residual_names()));
  } else if (r.residual->wraps_terms() && r.layout && m.n_layers > 0) {
    ModelConfig resolved = m;  // the plans read resolved values
    resolve_model_config(resolved);
    if (!layout_is_additive(resolved)) {
      // The layout's own keys as set (normformer's resid_scale decides whether it is additive),
      // and the layouts that are additive with their own keys at the defaults.
      std::string own;
      for (const auto& k : r.layout->keys) {
        const std::string key = m.layout + "." + k.name;
        const KeyValue& v = m.keys.get(key);
        if (!(v == k.default_value)) own += " " + k.name + " " + key_value_text(v);
      }
      std::string additive;
      for (const auto& t : layout_registry()) {
        ModelConfig probe = resolved;
        probe.layout = t.name;
        probe.keys = ModelConfig().keys;
        resolve_model_config(probe);
        if (layout_is_additive(probe)) additive += (additive.empty() ? "" : ", ") + t.name;
      }
      p.add("model.residual.type",
            fmt::format("{} wraps the term an additive layout adds to the stream; layout {}{} is not additive "
                        "(additive with their own keys at the defaults: {})",
                        m.residual.type, m.layout, own.empty() ? "" : " with" + own, additive));
    }
  }
  if (!r.value_residual) {
    p.add("model.value_residual", fmt::format("'{}' is not a registered value-residual mode; expected one of: {}",
                                              m.value_residual, value_residual_names()));
  } else if (r.value_residual->make && m.n_layers < 2) {
    p.add("model.value_residual", fmt::format("{} mixes block 0's values into later blocks; n_layers {} has none",
                                              m.value_residual, m.n_layers));
  }
  // Keys that only mean something together with others: an error rather than a silent no-op.
  std::string qkv_layouts;
  for (const auto& t : layout_registry()) {
    if (t.qkv_norm) qkv_layouts += (qkv_layouts.empty() ? "" : ", ") + t.name;
  }
  const bool layout_qkv = r.layout && r.layout->qkv_norm;
  if (m.qk_norm_axis != QkNormAxis::kHead && !(m.qk_norm || m.v_norm || layout_qkv))
    p.add("model.qk_norm_axis",
          "'all' has no effect without model.qk_norm, model.v_norm or layout " + qkv_layouts);
  if (m.qk_norm_position == QkNormPosition::kAfterRope && !(m.qk_norm || layout_qkv))
    p.add("model.qk_norm_position", "'after_rope' has no effect without model.qk_norm or layout " + qkv_layouts);
  // An eps that no norm in use reads (dyt, derf, none have none).
  if (m.norm.eps && !p.has("model.norm.type") && !p.has("model.qk_norm_type")) {
    const NormType *n = r.norm, *q = r.qkv_norm;
    const bool qkv_used = r.qkv_norm_used;
    const bool read = (n && std::isfinite(n->default_eps)) || (qkv_used && q && std::isfinite(q->default_eps));
    if (!read) {
      p.add("model.norm.eps", fmt::format("norm type {} has no eps{}; it would do nothing here", m.norm.type,
                                          qkv_used && q && q != n ? " (nor has the q/k/v norm type " + q->name + ")" : ""));
    }
  }
  // A key a norm type or a layout owns, set under another one, would silently do nothing: an
  // error (and the owners' value checks).
  if (!p.has("model.norm.type") && !p.has("model.qk_norm_type") && !p.has("model.layout")) {
    check_owned_keys(m, r.qkv_norm_used, [&](const std::string& key, const std::string& message) { p.add(key, message); });
  }
}

void LayerSeries::add(const std::string& name, torch::Tensor value) {
  for (auto& [n, v] : series_) {
    if (n == name) {
      v.push_back(std::move(value));
      return;
    }
  }
  series_.push_back({name, {std::move(value)}});
}

const std::vector<torch::Tensor>& LayerSeries::get(const std::string& name) const {
  static const std::vector<torch::Tensor> none;
  for (const auto& [n, v] : series_) {
    if (n == name) return v;
  }
  return none;
}

void add_stream_stats(LayerSeries& s, const torch::Tensor& x) {
  torch::NoGradGuard ng;
  auto f = x.detach().to(torch::kFloat);
  auto sq = f.pow(2);
  auto m2 = sq.mean();
  s.add("act_rms", m2.sqrt());
  s.add("act_max", f.abs().max());
  s.add("act_kurtosis", sq.pow(2).mean() / m2.pow(2));
}

namespace {
using Impls = std::set<const c10::TensorImpl*>;
Impls impls(const std::vector<torch::Tensor>& ts) {
  Impls out;
  for (const auto& t : ts) out.insert(t.unsafeGetTensorImpl());
  return out;
}
}  // namespace

void for_each_block_matrix(TransformerImpl& model, const std::function<void(torch::Tensor& w, bool branch)>& fn) {
  torch::NoGradGuard ng;
  for (int64_t i = 0; i < model.n_blocks(); ++i) {
    BlockImpl& b = *model.block(i);
    const Impls branch = impls(b.branch_weights());
    for (auto& p : b.parameters()) {  // the block's part of named_parameters(), in its order
      if (role_of(p) == Role::kMatrix) fn(p, branch.count(p.unsafeGetTensorImpl()) > 0);
    }
  }
}

TransformerImpl::TransformerImpl(const ModelConfig& config, const ParamConfig& param) : m_(config) {
  resolve_model_config(m_);  // idempotent; the plans read resolved values
  const ModelConfig& m = m_;
  ParamConfig p = param;
  resolve_param_config(p, m);
  pz_ = Parametrization::of(m, p);
  entries_ = ResolvedModel::of(m);
  const LayoutType* layout = entries_.layout;
  TORCH_CHECK(layout, "unknown layout ", m.layout);
  NormOptions no;
  no.size = m.d_model;
  no.eps = norm_eps(m, m.norm.type);
  no.keys = m.norm.keys;

  tok_emb = register_module("tok_emb", torch::nn::Embedding(m.vocab_size, m.d_model));
  with_role(tok_emb->weight, Role::kEmbedding);  // a tied head is this tensor: still embedding
  if (m.pos == Position::kLearned) {
    pos_emb = register_module("pos_emb", torch::nn::Embedding(m.ctx, m.d_model));
    with_role(pos_emb->weight, Role::kEmbedding);
  }
  // A gain: no draw, no decay; Zhu et al.'s LLM recipe for DyT (tok_emb * s, s = sqrt(d) at init).
  if (m.embed_scale > 0) {
    embed_scale = register_parameter("embed_scale", with_role(torch::full({1}, m.embed_scale), Role::kGain));
  }
  if (m.embed_norm) embed_norm = register_module("embed_norm", make_norm(m.norm.type, no));

  BlockOptions bo;
  bo.attn.d_model = m.d_model;
  bo.attn.n_heads = m.n_heads;
  bo.attn.ctx = m.ctx;
  bo.attn.bias = m.bias;
  bo.attn.rope = m.pos == Position::kRope;
  bo.attn.softcap = m.attn_softcap;
  bo.attn.qk_norm = m.qk_norm;
  bo.attn.v_norm = m.v_norm;
  bo.attn.qk_norm_type = m.qk_norm_type.value_or(m.norm.type);
  bo.attn.qk_norm_all = m.qk_norm_axis == QkNormAxis::kAll;
  bo.attn.qk_norm_after_rope = m.qk_norm_position == QkNormPosition::kAfterRope;
  bo.attn.qk_norm_options = no;
  bo.attn.qk_norm_options.size = bo.attn.qk_norm_all ? m.d_model : m.d_model / m.n_heads;
  bo.attn.qk_norm_options.eps = norm_eps(m, bo.attn.qk_norm_type);
  bo.attn.gate = m.attn_gate;
  bo.attn.score_q_mult = pz_.score_q_mult();
  bo.branch_mult = pz_.branch_mult();
  bo.layerscale = m.layerscale;
  bo.ffn.d_model = m.d_model;
  bo.ffn.d_ff = m.d_ff;
  bo.ffn.type = entries_.ffn;
  bo.ffn.bias = false;  // the contract gives model.bias to the attention projections only
  bo.norm_type = m.norm.type;
  bo.norm = no;
  const ValueResidualType* vres = entries_.value_residual;
  TORCH_CHECK(vres, "unknown value-residual mode ", m.value_residual);
  if (vres->make) {
    bo.attn.value_residual = vres;
    bo.attn.value_source = std::make_shared<ValueSource>();
  }
  block_list_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < m.n_layers; ++i) {
    bo.plan = layout->plan(i, m);
    bo.attn.value_role = !vres->make             ? ValueRole::kNone
                         : i == 0                ? ValueRole::kSource
                         : i + 1 < m.n_layers    ? ValueRole::kMix
                                                 : ValueRole::kMixLast;
    Block b(bo);
    block_list_->push_back(b);
    blocks_.push_back(b);
  }
  if (layout->final_norm) final_norm = register_module("final_norm", make_norm(m.norm.type, no));
  if (!m.tie_embeddings) {
    lm_head = register_module("lm_head", make_linear(m.d_model, m.vocab_size, /*bias=*/false, Role::kHead));
  }
  if (layout->head) head_map_ = layout->head(*this, m);
  const ResidualType* residual = entries_.residual;
  TORCH_CHECK(residual, "unknown residual type ", m.residual.type);
  stream_ = layout->make_stream ? layout->make_stream(*this, m) : residual->make(*this, m);
}

void TransformerImpl::set_track_head_max(bool on) {
  for (auto& b : blocks_) b->attention()->set_track_head_max(on);
}

void TransformerImpl::set_capture(bool on) {
  capture_ = on;
  for (auto& b : blocks_) b->attention()->set_capture(on);
}

void TransformerImpl::set_coord_capture(bool on) {
  coord_ = on;
  coord_stats_.clear();
  for (auto& b : blocks_) b->set_coord_capture(on);
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens) { return head(hidden(tokens)); }

torch::Tensor TransformerImpl::head(const torch::Tensor& hidden) {
  // The readout multiplier (mup, completep: output_mult / m_N; exactly 1, so no multiply, otherwise).
  const double r = pz_.readout_mult();
  const torch::Tensor h = r == 1.0 ? hidden : hidden * r;
  auto logits = lm_head ? lm_head(h) : torch::matmul(h, tok_emb->weight.t());  // (B, T, V)
  if (head_map_) logits = head_map_(logits);
  if (m_.logit_softcap > 0) logits = torch::tanh(logits / m_.logit_softcap) * m_.logit_softcap;
  if (coord_) {
    // Before the readout multiplier (what a hook on the final norm sees): under mup the entries
    // after it are (output_mult / m_N) times these by construction, and the readout's own
    // coordinate is the logits (src/train/README.md, "Coordinate check").
    coord_stats_.add("head_in", mean_abs(hidden));
    coord_stats_.add("logits", mean_abs(logits));
  }
  return logits;
}

namespace {
// block_cos: mean over positions of cos(x_in, x_out) of one block.
torch::Tensor mean_cos(const torch::Tensor& in, const torch::Tensor& out) {
  torch::NoGradGuard ng;
  auto a = in.detach().to(torch::kFloat), o = out.detach().to(torch::kFloat);
  return ((a * o).sum(-1) / (a.norm(2, -1) * o.norm(2, -1)).clamp_min(1e-30)).mean();
}
}  // namespace

void TransformerImpl::block_stats(int64_t i, const torch::Tensor& x_in, const torch::Tensor& x_out) {
  stats_.add("block_cos", mean_cos(x_in, x_out));
  const auto& as = blocks_[i]->attention()->stats();
  stats_.add("attn_entropy", as.entropy);
  stats_.add("attn_logit_max", as.logit_max);
  stats_.add("attn_sink", as.sink);
  if (as.vres_lambda.defined()) stats_.add("vres_lambda", as.vres_lambda);
  if (entries_.layout->block_stats) entries_.layout->block_stats(*blocks_[i], m_, stats_);
}

void TransformerImpl::coord_block(int64_t i, const torch::Tensor& x_out) {
  // A sublayer a layout did not call this forward leaves NaN (the series stay one entry a block).
  auto or_nan = [](const torch::Tensor& t) { return t.defined() ? t : torch::full({}, std::nan("")); };
  const BlockImpl::CoordTerms terms = blocks_[i]->take_coord();
  coord_stats_.add("attn_out", or_nan(terms.attn_out));
  coord_stats_.add("ffn_out", or_nan(terms.ffn_out));
  const torch::Tensor& scores = blocks_[i]->attention()->coord_score();
  coord_stats_.add("attn_logits", scores.defined() ? scores[0] : or_nan(scores));
  coord_stats_.add("attn_logits_causal", scores.defined() ? scores[1] : or_nan(scores));
  coord_stats_.add("stream", mean_abs(x_out));
}

void TransformerImpl::after_update() {
  if (entries_.layout->after_update) entries_.layout->after_update(*this);
}

torch::Tensor TransformerImpl::hidden(const torch::Tensor& tokens) {
  const int64_t T = tokens.size(1);
  TORCH_CHECK(T <= m_.ctx, "sequence of ", T, " tokens is longer than ctx ", m_.ctx);
  auto x = tok_emb(tokens);  // (B, T, d)
  if (pos_emb) x = x + pos_emb->weight.narrow(0, 0, T);
  if (embed_scale.defined()) x = x * embed_scale;
  if (embed_norm) x = embed_norm->forward(x);
  if (capture_) stats_.clear();
  ResidualStream& S = *stream_;
  S.set_capture(capture_);
  S.start(x);
  if (coord_) {
    coord_stats_.clear();
    coord_stats_.add("embed", mean_abs(S.view()));
  }
  for (int64_t i = 0; i < n_blocks(); ++i) {
    torch::Tensor x_in;
    if (capture_) {
      x_in = S.view();
      add_stream_stats(stats_, x_in);
    }
    S.block(i, *blocks_[i]);
    if (coord_) coord_block(i, S.view());
    if (capture_) {
      block_stats(i, x_in, S.view());
      S.end_block(i, stats_);
    }
  }
  if (capture_) add_stream_stats(stats_, S.view());
  x = S.finish();
  if (final_norm) x = final_norm->forward(x);
  return S.head_input(x);
}

void TransformerImpl::draw_after_the_others(const torch::Tensor& p) { late_init_.insert(p.unsafeGetTensorImpl()); }

void init_weights(Transformer& model, const InitConfig& init) {
  torch::NoGradGuard ng;
  const ModelConfig& m = model->config();
  const Parametrization& pz = model->parametrization();
  const double L = pz.residual_init_depth();  // completep: base_depth
  Impls out_weights;  // the sublayers' output maps (init.scaled_residual)
  for (int64_t i = 0; i < model->n_blocks(); ++i) {
    const Impls w = impls(model->block(i)->output_weights());
    out_weights.insert(w.begin(), w.end());
  }
  // Two passes: the tensors an entry asks to be drawn last come after all others, so a seed gives
  // the same weights to every tensor a model shares with the plain one (mHC beside add).
  for (const bool late : {false, true})
  for (auto& p : model->parameters()) {
    if (model->drawn_after_the_others(p) != late) continue;
    const std::optional<Role> role = role_of(p);
    TORCH_CHECK(role, "init: a parameter of shape ", p.sizes(), " has no declared role");
    if (*role == Role::kEmbedding) {
      p.normal_(0.0, init.embed_std);
      continue;
    }
    if (*role == Role::kBias) {  // biases of linear maps
      p.zero_();
      continue;
    }
    // Gains and mixing tensors keep their constructor values (the norm table, the layouts' and
    // residual entries' own inits), except those an entry asks to be drawn.
    if ((*role == Role::kGain || *role == Role::kMixing) && !late) continue;
    if (init.scheme == InitScheme::kXavier) {
      torch::nn::init::xavier_normal_(p, 1.0);
    } else {
      double std = init.std;
      if (init.scaled_residual && out_weights.count(p.unsafeGetTensorImpl())) std /= std::sqrt(2.0 * L);
      if (*role == Role::kMatrix) std *= pz.matrix_init_mult();  // mup, completep: m_N^(-1/2)
      p.normal_(0.0, std);
    }
  }
  const LayoutType* layout = model->entries().layout;
  // The layout's own rule (src/model/README.md, Initialisation).
  if (layout && layout->init) layout->init(*model, m);
  // Last, so that every other tensor is drawn exactly as without it (check_init_config keeps it
  // to layouts whose q reaches the scores unnormalised).
  if (init.zero_query) {
    for (int64_t i = 0; i < model->n_blocks(); ++i) model->block(i)->attention()->q_proj->weight.zero_();
  }
}

int64_t count_params(Transformer& model, bool include_embeddings) {
  int64_t n = 0;
  for (const auto& p : model->parameters()) {
    if (!include_embeddings && role_of(p) == Role::kEmbedding) continue;
    n += p.numel();
  }
  return n;
}

}  // namespace normlab
