// Where the LibTorch families NormLab builds against differ (Debian's 1.13 CPU build; PyTorch 2.x
// from pip or the official zip, CPU or CUDA), behind one named guard each. Nothing else in the code
// base tests a LibTorch version or build option.
//   NORMLAB_TORCH_AT_LEAST(2, 0)  compile-time LibTorch version test
//   NORMLAB_WITH_CUDA             defined by the build when the LibTorch has CUDA (its c10_cuda is
//                                 linked; third_party/dependencies.cmake)
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/impl/LocalDispatchKeySet.h>

#include "core/torch.h"

#define NORMLAB_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace normlab {

// "1.13.1 (CPU)", "2.11.0 (CUDA 13.0)": the LibTorch this binary was built against.
std::string torch_build_description();
// "cpu", "cuda:0 (NVIDIA H100 80GB HBM3)": a device and, for a GPU, its model.
std::string device_description(const torch::Device& device);

// Peak bytes allocated by LibTorch's CUDA caching allocator on `device` since the last reset;
// 0 for the CPU or a build without CUDA.
int64_t cuda_peak_allocated_bytes(const torch::Device& device);
void cuda_reset_peak_allocated(const torch::Device& device);

// Counts the host synchronisations LibTorch's CUDA code performs (an .item(), a device-to-host
// copy, a stream sync) on this thread while it lives, through CUDA's sync debug mode. count() is
// -1 in a build without CUDA. For tests of the one-read-per-step rule.
class CudaSyncCounter {
 public:
  CudaSyncCounter();
  ~CudaSyncCounter();
  CudaSyncCounter(const CudaSyncCounter&) = delete;
  CudaSyncCounter& operator=(const CudaSyncCounter&) = delete;
  int64_t count() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Autocast (src/train/README.md) for ops on `device`'s type while the guard lives: matmuls and
// attention in `dtype` (kBFloat16 or kHalf); kFloat (or kDouble) leaves autocast alone. Restores the
// previous state on exit and clears autocast's weight-cast cache when the outermost guard ends.
class AutocastGuard {
 public:
  AutocastGuard(const torch::Device& device, torch::ScalarType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  torch::DeviceType type_ = torch::kCPU;
  bool was_enabled_ = false;
  torch::ScalarType was_dtype_ = torch::kFloat;
};

// Ops inside run in their inputs' dtype even under an AutocastGuard (the residual streams' mixing
// weights are computed in fp32, as norms are).
class NoAutocastGuard {
 public:
  NoAutocastGuard() : guard_(c10::autocast_dispatch_keyset) {}

 private:
  c10::impl::ExcludeDispatchKeyGuard guard_;
};

// The fused multi-tensor AdamW of LibTorch >= 2.4 (at::_fused_adamw_, CUDA and CPU), as
// torch.optim.AdamW(fused=True) calls it. Every list has one entry per parameter, all on one
// device; steps are 0-dim float tensors there, holding the count of this update (the kernel reads
// them for the bias corrections and does not advance them). grad_divisor (0-dim, on the device)
// divides every gradient first. have_libtorch_fused_adamw() is false on older LibTorch, where
// libtorch_fused_adamw throws.
bool have_libtorch_fused_adamw();
void libtorch_fused_adamw(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                          const std::vector<torch::Tensor>& exp_avgs, const std::vector<torch::Tensor>& exp_avg_sqs,
                          const std::vector<torch::Tensor>& steps, double lr, double beta1, double beta2,
                          double weight_decay, double eps, const torch::Tensor& grad_divisor);

// Sum of squares of each tensor (fp32, stacked) from LibTorch 2.x's multi-tensor norm kernel, for
// CUDA tensors; an undefined tensor where that does not apply (the caller reduces per tensor).
torch::Tensor foreach_squared_norms(const std::vector<torch::Tensor>& tensors);

// The one line a user sees for an exception: a LibTorch error (c10::Error) loses the C++ stack
// trace and source location LibTorch appends ("Exception raised from ...", "frame #0: ..."),
// keeping its own message's first line; any other exception gives its what().
std::string error_message(const std::exception& e);

// SDPA (at::scaled_dot_product_attention, causal) where this LibTorch has it, on (B, T, H, dh) views:
// returns an undefined tensor on LibTorch 1.x.
torch::Tensor causal_sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);
bool have_sdpa();

}  // namespace normlab
