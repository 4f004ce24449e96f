#include "train/device.h"

#include <fmt/format.h>

#include "core/errors.h"

namespace normlab {
namespace {

bool parse_device(const std::string& name, torch::Device* out) {
  if (name == "cpu") {
    *out = torch::Device(torch::kCPU);
    return true;
  }
  if (name == "cuda") {
    *out = torch::Device(torch::kCUDA);
    return true;
  }
  if (name.rfind("cuda:", 0) == 0 && name.size() > 5 && name.size() < 9 &&
      name.find_first_not_of("0123456789", 5) == std::string::npos) {
    *out = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(std::stoi(name.substr(5))));
    return true;
  }
  return false;
}

}  // namespace

std::string device_unavailable_reason(const std::string& name) {
  torch::Device d(torch::kCPU);
  if (!parse_device(name, &d)) return "expected cpu, cuda or cuda:N";
  if (d.is_cpu()) return "";
  if (!torch::cuda::is_available()) return "this LibTorch build sees no CUDA device";
  const auto n = static_cast<int64_t>(torch::cuda::device_count());
  if (d.has_index() && d.index() >= n) return fmt::format("this machine has {} CUDA device(s)", n);
  return "";
}

torch::Device resolve_device(const std::string& name, const std::string& what) {
  const std::string why = device_unavailable_reason(name);
  if (!why.empty()) throw UsageError(fmt::format("{} {}: {}", what, name, why));
  torch::Device d(torch::kCPU);
  parse_device(name, &d);
  return d;
}

}  // namespace normlab
