// Causal multi-head self-attention (src/model/README.md) with the contract's options: QK-norm
// (per head, size dh, or over all heads, size d; before or after RoPE), V-norm, RoPE
// (rotate-half), score softcap, attention gate, a per-head output scale, an inner norm before
// out_proj, value residuals, and a layout's own q/k map (AttentionOptions::qk). The FFN is model/ffn.h.
// Optionally records its own statistics (entropy, max logit, sink, per-head max logit) for the
// diagnostics and QK-Clip, computed from the probabilities it already has.
#pragma once

#include <functional>
#include <optional>
#include <utility>

#include "config/config.h"
#include "model/norms/norm.h"
#include "model/value_residual/value_residual.h"

namespace normlab {

// A block's part in the value residual (model/value_residual/): block 0 puts its raw values V_0
// into the forward's ValueSource, every later block mixes them into its own raw values before
// v_norm, and the last one takes them out again.
enum class ValueRole { kNone, kSource, kMix, kMixLast };

struct AttentionOptions {
  int64_t d_model = 128;
  int64_t n_heads = 4;
  int64_t ctx = 128;
  bool bias = false;
  bool rope = false;
  double softcap = 0;                       // 0 = off
  // q times this before the scores (the parametrization's score scale sqrt(base_head_dim / dh),
  // so s = q k^T sqrt(base_head_dim) / dh); exactly 1 (no multiply) under sp and at base width.
  double score_q_mult = 1;
  bool head_scale = false;                  // NormFormer
  bool qk_norm = false;                     // q_norm, k_norm
  bool v_norm = false;                      // v_norm, like k
  std::string qk_norm_type = "layernorm";   // type of the q/k/v norms
  NormOptions qk_norm_options;              // size = dh (axis head) or d (axis all)
  bool qk_norm_all = false;                 // axis all: one norm of size d before the head split
  bool qk_norm_after_rope = false;
  bool force_qkv_norm = false;              // HybridNorm: q, k and v norms whatever the above say
  AttnGate gate = AttnGate::kNone;
  std::optional<std::string> inner_norm_type;  // Sub-LN: norm of the merged context, size d
  NormOptions inner_norm;
  // The value-residual mode's entry (nullptr: none), this block's part in it, and the forward's
  // carrier of block 0's values, one shared by every block of a model.
  const ValueResidualType* value_residual = nullptr;
  ValueRole value_role = ValueRole::kNone;
  std::shared_ptr<ValueSource> value_source;
  // A layout's own way of forming the scores (nGPT's scaled unit-norm q and k): qk registers its
  // parameters on the attention (after head_scale, before the value-residual ones) and returns the
  // map, which holds them and takes q, k (B, T, H, dh) after RoPE and any QK-norm to what the
  // scores read (the attention scales them by 1/sqrt(dh)), in `dtype` (the values' precision).
  // The code lives in the layout's file; this is the attention's one extension point for it.
  using QkMap = std::function<std::pair<torch::Tensor, torch::Tensor>(const torch::Tensor& q, const torch::Tensor& k,
                                                                      c10::ScalarType dtype)>;
  std::function<QkMap(torch::nn::Module& attn)> qk;
};


// Statistics of one forward, filled when capture is on: scalars, detached.
struct AttentionStats {
  torch::Tensor entropy;    // mean over batch, heads, query positions of -sum p log p
  torch::Tensor logit_max;  // max pre-softmax score over unmasked positions (after softcap)
  torch::Tensor sink;       // mean over batch, heads, query positions t >= 1 of p(t -> 0)
  torch::Tensor head_max;   // [H] max pre-softmax score per head (before any softcap)
  torch::Tensor head_entropy;  // [H] mean over batch and query positions of -sum p log p, per head
  torch::Tensor vres_lambda;   // value residual: the mean weight on block 0's values (1 in block 0)
};

// mean |x| over every entry, in fp32, detached (the coordinate check's statistic, src/train/coordcheck.h).
torch::Tensor mean_abs(const torch::Tensor& x);

// mean |s| over the entries of the scores s = q k^T / sqrt(dh) of (B, T, H, dh) q and k (before
// any softcap), in fp32, detached: [0] every entry, masked ones included (the scores before the
// mask), [1] the causal ones only (j <= i: the scores the softmax reads).
torch::Tensor score_mean_abs(const torch::Tensor& q, const torch::Tensor& k);

// Causal softmax attention of (B, T, H, dh) q, k, v -> (B, T, H, dh), scores scaled by
// 1/sqrt(dh), optional softcap c*tanh(s/c). `stats`, when not null, receives the diagnostics.
// The reference is composed LibTorch ops (any dtype or device); the fast path is the fused CPU
// kernel of attention_kernels.h, which the tests hold to the reference.
torch::Tensor causal_attention_reference(const torch::Tensor& q, const torch::Tensor& k,
                                         const torch::Tensor& v, double softcap,
                                         AttentionStats* stats);
torch::Tensor causal_attention_fast(const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& v, AttentionStats* stats);
// float32 CPU, no softcap, dh a multiple of 8, head dimension contiguous.
bool causal_attention_fast_path_applies(const torch::Tensor& q, double softcap);
// bf16 CPU with AVX512-BF16 (at run time), no softcap, dh a multiple of 16 up to 256, head
// dimension contiguous: the bf16 kernel (causal_attention_fast takes these too).
bool causal_attention_bf16_kernel_applies(const torch::Tensor& q, double softcap);

// The one dispatch point of attention. In order: the fused CPU kernel (float32 CPU; it also fills
// the statistics), the bf16 kernel for bf16 on a CPU with AVX512-BF16, the fp32 kernel for bf16 on
// other CPUs (autocast: q, k, v upcast, computed in fp32, the output cast back; both held to the
// fp32 reference at bf16 tolerances), then LibTorch 2.x's fused scaled_dot_product_attention (flash / memory-
// efficient on CUDA, any dtype, causal) when no statistics are wanted and there is no softcap
// (SDPA cannot express c*tanh(s/c)), else the composed reference. `allow_fast` false: reference.
// cpu_kernel_bf16: bf16 inputs on the CPU (autocast) through the fp32 kernel: upcast, computed in
// fp32, the output cast back to bf16; for heads up to 32 wide, or wider ones SDPA cannot take
// (statistics wanted, LibTorch 1.x). Wider heads without statistics take SDPA (faster there).
// cpu_kernel_bf16_native: bf16 inputs through the bf16 kernel (AVX512-BF16 dot products, fp32
// softmax and sums; attention_kernels.h), which takes the place of cpu_kernel_bf16 wherever the
// CPU has AVX512-BF16 and dh is a multiple of 16.
enum class AttentionPath { reference, cpu_kernel, cpu_kernel_bf16, cpu_kernel_bf16_native, sdpa };
AttentionPath choose_attention_path(const torch::Tensor& q, double softcap, bool want_stats, bool allow_fast);

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const AttentionOptions& o);
  // x: (B, T, d) -> (B, T, d)
  torch::Tensor forward(const torch::Tensor& x);

  void set_capture(bool on) { capture_ = on; }
  // Coordinate check: keep the next forwards' mean |s| (score_mean_abs of the q and k the
  // scores read, after the parametrization's score scale: [0] every entry, [1] the causal ones),
  // read by coord_score().
  void set_coord_capture(bool on) { coord_ = on; }
  const torch::Tensor& coord_score() const { return coord_score_; }
  // QK-Clip: keep the running max over forwards of each head's max logit (see take_head_max).
  void set_track_head_max(bool on) { track_head_max_ = on; }
  // [H] max of stats().head_max over the forwards since the last call (undefined if none).
  torch::Tensor take_head_max();
  // Tests: false forces the composed-op reference attention even where a fused path applies.
  void set_fast_path(bool on) { fast_path_ = on; }
  const AttentionStats& stats() const { return stats_; }
  AttentionPath last_path() const { return last_path_; }

  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, out_proj{nullptr};
  torch::nn::Linear gate{nullptr};
  NormPtr q_norm, k_norm, v_norm, inner_norm;
  torch::Tensor head_scale;

 private:
  torch::Tensor apply_rope(const torch::Tensor& x);  // x: (B, T, H, dh)
  AttentionOptions::QkMap qk_map_;  // the layout's q/k map (AttentionOptions::qk), or empty
  // The value-residual mode's rule in a mixing block (its parameters are registered on this module).
  std::unique_ptr<ValueMix> value_mix_;

  AttentionOptions o_;
  int64_t dh_;
  bool capture_ = false;
  bool coord_ = false;
  torch::Tensor coord_score_;
  bool track_head_max_ = false;
  torch::Tensor head_max_accum_;
  bool fast_path_ = true;
  AttentionPath last_path_ = AttentionPath::reference;
  AttentionStats stats_;
  torch::Tensor rope_cos_, rope_sin_;  // caches, not parameters or buffers
};
TORCH_MODULE(Attention);

}  // namespace normlab
