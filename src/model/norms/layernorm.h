// LayerNorm (Ba, Kiros & Hinton 2016, "Layer Normalization"):
//   y = (x - mean) / sqrt(var + eps) * weight + bias,  var biased (divides by n),
// weight[n] = 1, bias[n] = 0 (absent with model.norm.bias: false, a key layernorm owns), default eps 1e-5.
// One dispatch point (forward): contiguous float32 CPU input runs a hand-written forward and
// backward (cpu_kernels.h) wrapped as a custom autograd function. Other input (double, strided,
// CUDA; bf16/fp16 arrive upcast to fp32) runs native_forward, LibTorch's fused at::layer_norm on
// the upcast input, which computes the same formula on every device.
// reference_forward is the formula in composed ops, the independent reference for both.
#pragma once
#include "model/norms/norm.h"

namespace normlab {
class LayerNormImpl : public NormImpl {
 public:
  explicit LayerNormImpl(const NormOptions& o);
  // x: (..., n) -> (..., n), same dtype as x.
  torch::Tensor forward(const torch::Tensor& x) override;

  // The formula in composed ops (bias may be undefined); fp32 compute (double stays double),
  // result cast back.
  static torch::Tensor reference_forward(const torch::Tensor& x, const torch::Tensor& weight,
                                         const torch::Tensor& bias, double eps);
  // The hand-written CPU path; x must satisfy cpu_fast_path_applies. Supports double backward
  // (create_graph) by switching its backward to differentiable ops.
  static torch::Tensor fast_forward(const torch::Tensor& x, const torch::Tensor& weight,
                                    const torch::Tensor& bias, double eps);

  // LibTorch's fused layer_norm; fp32 compute (double stays double), result cast back.
  static torch::Tensor native_forward(const torch::Tensor& x, const torch::Tensor& weight,
                                      const torch::Tensor& bias, double eps);

  // Whether the last forward call took the fast path (tests and the benchmark check this).
  bool last_forward_was_fast() const { return last_forward_was_fast_; }

 private:
  int64_t size_;
  double eps_;
  torch::Tensor weight_, bias_;
  bool last_forward_was_fast_ = false;
};
}  // namespace normlab
