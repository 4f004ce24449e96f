// The residual stream as a registry entry (src/model/README.md, "Residual streams"): how the
// stream is carried between sublayers, `model.residual.type`. Every forward runs through a
// carrier, of one of two kinds: a ResidualStream runs whole blocks (`add`'s carries the layout's
// own stream x and runs each block's forward; a layout that carries more than x, ResiDual, supplies
// its own, LayoutType::make_stream); a TermStream replaces that one tensor by its own state and
// wraps each sublayer's term G_s, which an additive layout provides (BlockPlan::term): HC, mHC,
// AttnRes. An entry makes one kind or the other (ResidualType::make_blocks / make_terms). An entry owns its config keys
// (model.residual.<key>), its parameters, their init and names, and its diagnostics. Adding a
// stream method = one file defining `ResidualType xxx_residual()` + one line in registry.cpp +
// one row in src/model/README.md.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/torch.h"

namespace normlab {

class TransformerImpl;
class BlockImpl;
class LayerSeries;

// G_s(z): the whole term sublayer s adds to the stream in its layout, on input z.
using SublayerTerm = std::function<torch::Tensor(const torch::Tensor& z)>;

// Carries the stream through one forward: start, then block i = 0 .. L-1 in order, then finish,
// then head_input. It holds the forward's tensors between the calls and lets go of them by the end
// of head_input.
class ResidualStream {
 public:
  virtual ~ResidualStream() = default;
  // e: the embedding output (B, T, d).
  virtual void start(const torch::Tensor& e) = 0;
  // Block i (a carrier of whole blocks runs the block's forward on what it carries).
  virtual void block(int64_t i, BlockImpl& b) = 0;
  // What final_norm reads after the last block (the model applies final_norm, when the layout has
  // one, to it).
  virtual torch::Tensor finish() = 0;
  // The head's input from the final norm's output (ResiDual adds its x); the forward's state is
  // released.
  virtual torch::Tensor head_input(const torch::Tensor& normed) { return normed; }
  // The stream entering the next sublayer as one tensor, for the act_* statistics and block_cos:
  // the n streams as one (B, T, n*d) vector (HC, mHC), what the next sublayer reads (AttnRes).
  virtual torch::Tensor view() = 0;
  // Diagnostics: called (capture on) when block i's two sublayers are done; adds the entry's
  // per-block series.
  virtual void end_block(int64_t /*i*/, LayerSeries& /*stats*/) {}
  // Diagnostics (capture on): depth-attention weights of the last forward, one row per reader
  // (AttnRes: "blocks.{i}.attnres{k}" ..., "final_attnres"), each the mean weight per source in
  // reading order; empty for carriers without depth attention. Recorded as `depth_weights`.
  virtual std::vector<std::pair<std::string, torch::Tensor>> depth_weights() const { return {}; }
  void set_capture(bool on) { capture_ = on; }

 protected:
  bool capture_ = false;
};

// A carrier that wraps the sublayers' terms of an additive layout: block i is its two sublayers'
// terms (BlockImpl::term) through sublayer(2i, .) and sublayer(2i + 1, .).
class TermStream : public ResidualStream {
 public:
  void block(int64_t i, BlockImpl& b) final;
  // Sublayer s (2i attention, 2i + 1 FFN of block i) with its term G.
  virtual void sublayer(int64_t s, const SublayerTerm& G) = 0;
};

// What an entry adds to a model's memory, for the estimate made before anything is built
// (estimate_training_memory): its parameters, and the d-wide vectors per token its carrier keeps
// per sublayer for the backward (the streams, their mixtures, stored sources). A rough count, so
// that absurd sizes are refused with a message instead of an allocator error.
struct ResidualCost {
  double params = 0;
  double vectors_per_sublayer = 0;
};

struct ResidualType {
  std::string name;
  std::string equation;       // one line, for `normlab keys` and the README table
  std::vector<KeySpec> keys;  // model.residual.<key> this type owns
  // Exactly one of the two: registers the entry's parameters on the model (blocks.{i}.<name>{k} in
  // each block, heads on the model) with their init values and returns the carrier. make_blocks:
  // a carrier of whole blocks, under any layout (add); make_terms: one that wraps an additive
  // layout's sublayer terms (the config check refuses other layouts).
  std::function<std::unique_ptr<ResidualStream>(TransformerImpl& model, const ModelConfig& m)> make_blocks;
  std::function<std::unique_ptr<TermStream>(TransformerImpl& model, const ModelConfig& m)> make_terms;
  bool wraps_terms() const { return static_cast<bool>(make_terms); }
  std::unique_ptr<ResidualStream> make(TransformerImpl& model, const ModelConfig& m) const {
    if (make_terms) return make_terms(model, m);
    return make_blocks(model, m);
  }
  // Its memory beyond the layout's own stream; empty: none (add).
  std::function<ResidualCost(const ModelConfig& m)> cost;
};

// For an entry's make: registers make(i, k) as blocks.{i}.<name>{k} for every block i and
// sublayer k = 1 (attention), 2 (FFN), in that order (sublayer 2i + k - 1).
void register_per_sublayer(TransformerImpl& model, const std::string& name,
                           const std::function<std::shared_ptr<torch::nn::Module>(int64_t i, int k)>& make);

const std::vector<ResidualType>& residual_registry();
const ResidualType* find_residual(const std::string& name);  // nullptr if unknown
std::string residual_names();

// n streams, each (B, T, d). Kept as separate tensors: a stream's slice of one (B, T, n, d) tensor
// would cost a full-size zero-filled gradient per slice in the backward.
using Streams = std::vector<torch::Tensor>;

// The shared operations of the stream methods (streams.cpp). Each is one dispatch point: the fused
// CPU loops of stream_kernels.h (one pass over the streams forward and one backward) where they
// apply (CPU, float or double, streams of one shape and dtype, weights in that dtype), else the
// composed LibTorch ops of namespace `composed`, the reference the tests hold the loops to.
//
// Y_c = sum_j W[..., j, c] * X_j (c = 0 .. m-1): W (B, T, n, m) weights per position, or (n, m)
// shared by all. Multiply-adds in X's precision, so the streams stay fp32 under autocast.
Streams mix_streams(const torch::Tensor& W, const Streams& X);
// sum_j w[..., j] * X_j: w (B, T, n) or (n).
torch::Tensor weighted_sum(const torch::Tensor& w, const Streams& X);
// Out_k = R_k + b[..., k] * y: b (B, T, n) or (n); y (B, T, d), widened to the streams' precision.
Streams add_scaled(const Streams& R, const torch::Tensor& b, const torch::Tensor& y);
// z = F xf / sqrt(mean(xf^2) + eps), xf the n streams' concatenation at each position (never
// built): F (k, n*d) -> z (B, T, k). HC's dynamic weights (n = 1, per stream) and mHC's z.
torch::Tensor rms_project(const Streams& X, const torch::Tensor& F, double eps);
// mHC's mixing matrix from its logits (..., n, n): softmax over each row + eps, then columns
// normalised, then iters - 1 times rows and columns (eps 1e-6 in every division).
torch::Tensor sinkhorn(const torch::Tensor& logits, int64_t iters);
// The n streams as one (B, T, n*d) vector, stream-major.
torch::Tensor concat_streams(const Streams& X);

// Whether the fused loops may run: on by default; off for the whole process when the environment
// sets NORMLAB_COMPOSED_STREAMS=1 (for before/after timing, scripts/bench_residual.sh), or through
// set_fused_stream_kernels(false) (tests).
bool fused_stream_kernels();
void set_fused_stream_kernels(bool on);

namespace composed {  // the reference: the same operations in LibTorch ops, any dtype or device
Streams mix_streams(const torch::Tensor& W, const Streams& X);
torch::Tensor weighted_sum(const torch::Tensor& w, const Streams& X);
Streams add_scaled(const Streams& R, const torch::Tensor& b, const torch::Tensor& y);
torch::Tensor rms_project(const Streams& X, const torch::Tensor& F, double eps);
torch::Tensor sinkhorn(const torch::Tensor& logits, int64_t iters);
}  // namespace composed

// The composite-gain statistics of HC and mHC (src/metrics/README.md): P (B, T, n, n) the product
// of the stream-mixing matrices so far; adds res_gain_fwd (max row sum of |P|) and res_gain_bwd
// (max column sum), each averaged over positions.
void add_residual_gain(LayerSeries& stats, const torch::Tensor& P);

}  // namespace normlab
