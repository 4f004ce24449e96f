// Where the LibTorch families NormLab builds against differ (Debian's 1.13 CPU build; PyTorch 2.x
// from pip or the official zip, CPU or CUDA), behind one named guard each. Nothing else in the code
// base tests a LibTorch version or build option.
//   NORMLAB_TORCH_AT_LEAST(2, 0)  compile-time LibTorch version test
//   NORMLAB_WITH_CUDA             defined by the build when the LibTorch has CUDA (its c10_cuda is
//                                 linked; third_party/dependencies.cmake)
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/torch.h"

#define NORMLAB_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace normlab {

// "1.13.1 (CPU)", "2.11.0 (CUDA 13.0)": the LibTorch this binary was built against.
std::string torch_build_description();

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

}  // namespace normlab
