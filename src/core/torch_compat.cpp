#include "core/torch_compat.h"

#include <ATen/autocast_mode.h>
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#ifdef NORMLAB_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>
#endif

namespace normlab {

std::string torch_build_description() {
  std::string s = fmt::format("{}.{}.{}", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH);
#ifdef NORMLAB_WITH_CUDA
  return s + fmt::format(" (CUDA; {} GPU(s) visible)", torch::cuda::device_count());
#else
  return s + " (CPU)";
#endif
}

std::string device_description(const torch::Device& device) {
  std::string s = device.str();
#ifdef NORMLAB_WITH_CUDA
  if (device.is_cuda()) {
    const auto index = device.has_index() ? device.index() : c10::DeviceIndex(0);
    s += fmt::format(" ({})", at::cuda::getDeviceProperties(index)->name);
  }
#endif
  return s;
}

int64_t cuda_peak_allocated_bytes(const torch::Device& device) {
#ifdef NORMLAB_WITH_CUDA
  if (!device.is_cuda()) return 0;
  const auto index = device.has_index() ? device.index() : c10::DeviceIndex(0);
  // index 0 of the stat arrays is StatType::AGGREGATE in every LibTorch since 1.x
  return c10::cuda::CUDACachingAllocator::getDeviceStats(index).allocated_bytes[0].peak;
#else
  return 0;
#endif
}

void cuda_reset_peak_allocated(const torch::Device& device) {
#ifdef NORMLAB_WITH_CUDA
  if (!device.is_cuda()) return;
  c10::cuda::CUDACachingAllocator::resetPeakStats(device.has_index() ? device.index() : c10::DeviceIndex(0));
#endif
}

#ifdef NORMLAB_WITH_CUDA
struct CudaSyncCounter::Impl : c10::WarningHandler {
  int64_t syncs = 0;
  c10::WarningHandler* previous = c10::WarningUtils::get_warning_handler();
  c10::cuda::SyncDebugMode previous_mode = c10::cuda::warning_state().get_sync_debug_mode();
  void process(const c10::Warning& w) override {
    if (w.msg().find("synchroniz") != std::string::npos) {
      ++syncs;
    } else {
      previous->process(w);
    }
  }
};

CudaSyncCounter::CudaSyncCounter() : impl_(std::make_unique<Impl>()) {
  c10::WarningUtils::set_warning_handler(impl_.get());
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
}

CudaSyncCounter::~CudaSyncCounter() {
  c10::cuda::warning_state().set_sync_debug_mode(impl_->previous_mode);
  c10::WarningUtils::set_warning_handler(impl_->previous);
}

int64_t CudaSyncCounter::count() const { return impl_->syncs; }
#else
struct CudaSyncCounter::Impl {};
CudaSyncCounter::CudaSyncCounter() = default;
CudaSyncCounter::~CudaSyncCounter() = default;
int64_t CudaSyncCounter::count() const { return -1; }
#endif

}  // namespace normlab

namespace normlab {

AutocastGuard::AutocastGuard(const torch::Device& device, torch::ScalarType dtype) : type_(device.type()) {
  if (dtype == torch::kFloat || dtype == torch::kDouble) return;
  active_ = true;
#if NORMLAB_TORCH_AT_LEAST(2, 4)
  was_enabled_ = at::autocast::is_autocast_enabled(type_);
  was_dtype_ = at::autocast::get_autocast_dtype(type_);
  at::autocast::set_autocast_enabled(type_, true);
  at::autocast::set_autocast_dtype(type_, dtype);
#else
  if (type_ == torch::kCUDA) {
    was_enabled_ = at::autocast::is_enabled();
    was_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_enabled(true);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    was_enabled_ = at::autocast::is_cpu_enabled();
    was_dtype_ = at::autocast::get_autocast_cpu_dtype();
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if NORMLAB_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(type_, was_enabled_);
  at::autocast::set_autocast_dtype(type_, was_dtype_);
#else
  if (type_ == torch::kCUDA) {
    at::autocast::set_enabled(was_enabled_);
    at::autocast::set_autocast_gpu_dtype(was_dtype_);
  } else {
    at::autocast::set_cpu_enabled(was_enabled_);
    at::autocast::set_autocast_cpu_dtype(was_dtype_);
  }
#endif
}

bool have_libtorch_fused_adamw() { return NORMLAB_TORCH_AT_LEAST(2, 4); }

void libtorch_fused_adamw(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                          const std::vector<torch::Tensor>& exp_avgs, const std::vector<torch::Tensor>& exp_avg_sqs,
                          const std::vector<torch::Tensor>& steps, double lr, double beta1, double beta2,
                          double weight_decay, double eps, const torch::Tensor& grad_divisor) {
#if NORMLAB_TORCH_AT_LEAST(2, 4)
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, beta1, beta2,
                    weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false, grad_divisor, /*found_inf=*/{});
#else
  (void)params, (void)grads, (void)exp_avgs, (void)exp_avg_sqs, (void)steps, (void)lr, (void)beta1;
  (void)beta2, (void)weight_decay, (void)eps, (void)grad_divisor;
  throw std::runtime_error("this LibTorch has no fused AdamW (needs 2.4 or later)");
#endif
}

torch::Tensor foreach_squared_norms(const std::vector<torch::Tensor>& tensors) {
#if NORMLAB_TORCH_AT_LEAST(2, 0)
  if (!tensors.empty() && tensors.front().is_cuda()) {
    return torch::stack(torch::_foreach_norm(tensors, 2)).to(torch::kFloat).pow(2);
  }
#endif
  (void)tensors;
  return {};
}

std::string error_message(const std::exception& e) {
  std::string m = e.what();
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) m = c10->what_without_backtrace();
  for (const char* tail : {"Exception raised from", "frame #"}) {
    const size_t at = m.find(tail);
    if (at != std::string::npos) m.erase(at);
  }
  const size_t start = m.find_first_not_of(" \n\t");
  if (start == std::string::npos) return "LibTorch error without a message";
  m.erase(0, start);
  m.erase(std::min(m.find('\n'), m.size()));
  while (!m.empty() && (m.back() == ' ' || m.back() == '\t')) m.pop_back();
  return m;
}

bool have_sdpa() { return NORMLAB_TORCH_AT_LEAST(2, 0); }

torch::Tensor causal_sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
#if NORMLAB_TORCH_AT_LEAST(2, 0)
  auto t = [](const torch::Tensor& x) { return x.transpose(1, 2); };  // (B, T, H, dh) <-> (B, H, T, dh)
  return t(at::scaled_dot_product_attention(t(q), t(k), t(v), /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                            /*is_causal=*/true));
#else
  (void)q, (void)k, (void)v;
  return {};
#endif
}

}  // namespace normlab
