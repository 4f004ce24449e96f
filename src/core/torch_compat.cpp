#include "core/torch_compat.h"

#include <fmt/format.h>

#ifdef NORMLAB_WITH_CUDA
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
