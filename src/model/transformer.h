// The decoder-only Transformer of src/model/README.md: embeddings, L blocks of the configured layout, the
// final norm when the layout has one, and a (tied by default) output head. Parameter names are
// the contract's tensor names (src/model/README.md, Tensor names).
#pragma once

#include "config/config.h"
#include "config/load.h"
#include <set>

#include "model/block.h"
#include "model/parametrization.h"
#include "model/residual/residual.h"
#include "model/value_residual/value_residual.h"

namespace normlab {

// What the diagnostics read from one forward when capture is on: named per-layer series of
// detached scalars, in the order they were first added. Each becomes `layers.<name>` in the train
// records (src/metrics/README.md defines them); report and plots show whatever is there. A new
// statistic is one `add` where it is computed (and its definition and test).
class LayerSeries {
 public:
  // Appends value (a 0-dim tensor) to the series `name`.
  void add(const std::string& name, torch::Tensor value);
  const std::vector<std::pair<std::string, std::vector<torch::Tensor>>>& all() const { return series_; }
  // The series `name` (empty if nothing was added under it).
  const std::vector<torch::Tensor>& get(const std::string& name) const;
  void clear() { series_.clear(); }

 private:
  std::vector<std::pair<std::string, std::vector<torch::Tensor>>> series_;
};

// Statistics of the residual stream x at one position (the act_* series): RMS, max |x| and the
// kurtosis about zero mean(x^4) / mean(x^2)^2 (3 for a Gaussian), over every element, in fp32.
void add_stream_stats(LayerSeries& s, const torch::Tensor& x);

// A model config's registry entries, looked up once by name: the model, the config checks and the
// start-up warnings all read them from here. An entry is nullptr where its name is not registered
// (check_model_config reports that).
struct ResolvedModel {
  const NormType* norm = nullptr;          // model.norm.type
  const NormType* qkv_norm = nullptr;      // model.qk_norm_type (auto: the norm type)
  const LayoutType* layout = nullptr;      // model.layout
  const ResidualType* residual = nullptr;  // model.residual.type
  const ValueResidualType* value_residual = nullptr;  // model.value_residual
  const FfnType* ffn = nullptr;                       // model.ffn
  bool qkv_norm_used = false;              // model.qk_norm, model.v_norm or a layout with q/k/v norms
  static ResolvedModel of(const ModelConfig& m);
  // A norm in use pools statistics over the batch's positions (batchnorm: warned about at start-up).
  bool batch_statistics() const;
};

class TransformerImpl : public torch::nn::Module {
 public:
  const ResolvedModel& entries() const { return entries_; }
  // m must be resolved (resolve_model_config).
  // p: the parametrization (resolved; default sp).
  explicit TransformerImpl(const ModelConfig& m, const ParamConfig& p = {});
  // tokens: (B, T) int64 -> logits (B, T, V), T <= ctx
  torch::Tensor forward(const torch::Tensor& tokens);  // = head(hidden(tokens))
  // The states the head reads: the final norm's output (the last block's where there is none).
  torch::Tensor hidden(const torch::Tensor& tokens);
  torch::Tensor head(const torch::Tensor& hidden);

  // Record activation and attention statistics during the next forwards.
  void set_capture(bool on);
  // Coordinate check (src/train/coordcheck.h): each next forward fills coord_stats() anew with
  // mean |x| (fp32) of `embed` (the stream entering block 0), per block `attn_out`, `ffn_out` (the
  // sublayers' outputs), `attn_logits` (the scores s before the mask), `attn_logits_causal` (the
  // entries j <= i of s only) and `stream` (the stream after the block), then `head_in` (the head's input, before the readout multiplier) and `logits`.
  void set_coord_capture(bool on);
  const LayerSeries& coord_stats() const { return coord_stats_; }
  // QK-Clip: every block's attention keeps each head's max logit over the next forwards.
  void set_track_head_max(bool on);
  const LayerSeries& stats() const { return stats_; }

  const ModelConfig& config() const { return m_; }
  const Parametrization& parametrization() const { return pz_; }
  int64_t n_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  Block& block(int64_t i) { return blocks_[i]; }

  // p (role gain or mixing, which otherwise keep their constructor values) is drawn by the init
  // scheme after every other parameter (so that the seed gives the shared tensors the weights of a
  // model without it): mHC's fn.
  void draw_after_the_others(const torch::Tensor& p);
  bool drawn_after_the_others(const torch::Tensor& p) const { return late_init_.count(p.unsafeGetTensorImpl()) > 0; }
  ResidualStream* residual_stream() { return stream_.get(); }
  // The layout's action after each applied update (and at the end of init_weights): nGPT's
  // renormalisation; nothing for the other layouts.
  void after_update();

  torch::nn::Embedding tok_emb{nullptr}, pos_emb{nullptr};
  torch::Tensor embed_scale;  // [1], model.embed_scale > 0 only
  NormPtr embed_norm, final_norm;
  torch::nn::Linear lm_head{nullptr};

 private:
  ModelConfig m_;
  Parametrization pz_;
  torch::nn::ModuleList block_list_;
  std::vector<Block> blocks_;
  bool capture_ = false;
  LayerSeries stats_;
  bool coord_ = false;
  LayerSeries coord_stats_;
  std::unique_ptr<ResidualStream> stream_;  // the residual type's carrier, or the layout's own (ResiDual)
  ResolvedModel entries_;  // the config's registry entries, looked up once
  LayoutType::HeadMap head_map_;  // the layout's map of the logits (LayoutType::head), or empty
  std::set<const c10::TensorImpl*> late_init_;
  // Diagnostics of block i (capture on): block_cos and its attention's statistics.
  void block_stats(int64_t i, const torch::Tensor& x_in, const torch::Tensor& x_out);
  // Coordinate check: block i's terms, scores and the stream after it (x_out) into coord_stats_.
  void coord_block(int64_t i, const torch::Tensor& x_out);
};
TORCH_MODULE(Transformer);

// Fills the auto values that depend only on the model config (deepnorm alpha/beta,
// mix.post_layers, qk_norm_type), so the resolved config records the numbers. eps stays auto:
// it resolves per norm type at construction (a QK-norm of another type keeps its own default).
void resolve_model_config(ModelConfig& m);

// Registry checks (norm and layout names) that config/ cannot do on its own.
void check_model_config(const ModelConfig& m, const ResolvedModel& entries, Problems& problems);
inline void check_model_config(const ModelConfig& m, Problems& problems) {
  check_model_config(m, ResolvedModel::of(m), problems);
}
// The layout's scope rules over the whole config (nGPT: rope, swiglu, no weight decay, ...).
void check_layout_scope(const Config& c, const ResolvedModel& entries, Problems& problems);
// Section init's rules that need the model: init.zero_query needs a query that reaches the scores
// unnormalised (no model.qk_norm, no layout that normalises q: a zero vector has no direction, and
// a norm's gradient there is 1/sqrt(eps)).
void check_init_config(const Config& c, const ResolvedModel& entries, Problems& problems);

// eps for a norm of this type under this config.
double norm_eps(const ModelConfig& m, const std::string& type);

// Initialises every parameter per src/model/README.md from torch's global generator (seeded by
// the caller), in named_parameters() order, by its role: embeddings N(0, embed_std); matrices and
// an untied head by the scheme (the sublayers' output maps scaled under init.scaled_residual, the
// matrices by the parametrization); biases 0; gains and mixing tensors keep their constructor
// values (but those drawn after the others). Then the layout's own rule, then init.zero_query.
// No name is read.
void init_weights(Transformer& model, const InitConfig& init);

// Parameter count, without the embeddings' (role embedding; a tied head counts 0) unless
// include_embeddings.
int64_t count_params(Transformer& model, bool include_embeddings);

}  // namespace normlab
