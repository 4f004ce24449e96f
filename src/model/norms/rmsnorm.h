// RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization"):
//   y = x / sqrt(mean(x^2) + eps) * weight,        weight[n] = 1, default eps 1e-6.
// rmsnorm_1p (Gemma 2/3, Qwen3-Next):
//   y = x / sqrt(mean(x^2) + eps) * (1 + weight),  weight[n] = 0,
// so the gain starts at 1 with its parameter at 0 (norm parameters are never weight-decayed here).
// One dispatch point (forward): contiguous float32 CPU input runs a hand-written forward and
// backward (cpu_kernels.h) wrapped as a custom autograd function; any other input (double,
// strided, CUDA; bf16/fp16 arrive upcast to fp32) runs native_forward: LibTorch 2.4+'s fused
// at::rms_norm on the upcast input, or on an older LibTorch (Debian's 1.13) the composed ops of
// reference_forward. Both paths are tested against reference_forward.
#pragma once
#include "model/norms/norm.h"

namespace normlab {
class RMSNormImpl : public NormImpl {
 public:
  RMSNormImpl(const NormOptions& o, bool one_plus);
  // x: (..., n) -> (..., n), same dtype as x.
  torch::Tensor forward(const torch::Tensor& x) override;

  // The composed-op definition; computes in fp32 (double stays double) and casts back.
  static torch::Tensor reference_forward(const torch::Tensor& x, const torch::Tensor& weight,
                                         double eps, bool one_plus);
  // The hand-written CPU path; x must satisfy cpu_fast_path_applies. Supports double backward
  // (create_graph) by switching its backward to differentiable ops.
  static torch::Tensor fast_forward(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                                    bool one_plus);

  // LibTorch's fused at::rms_norm where this LibTorch has it (native_fused_available), else
  // reference_forward; fp32 compute (double stays double), result cast back.
  static torch::Tensor native_forward(const torch::Tensor& x, const torch::Tensor& weight,
                                      double eps, bool one_plus);
  static bool native_fused_available();

  // Whether the last forward call took the fast path (tests and the benchmark check this).
  bool last_forward_was_fast() const { return last_forward_was_fast_; }

 private:
  double eps_;
  bool one_plus_;
  torch::Tensor weight_;
  bool last_forward_was_fast_ = false;
};
}  // namespace normlab
