// Which device a command runs on: "cpu", "cuda" or "cuda:N" (train.device, eval/sample --device).
// The one place that turns such a name into a torch::Device and says, in one line, why it cannot
// be used (this LibTorch build has no CUDA, or no such GPU). Everything downstream is
// device-agnostic: tensors follow the model's device and results come back in one host read.
#pragma once

#include <string>

#include "core/torch.h"

namespace normlab {

// Throws UsageError naming `what` (e.g. "--device") when `name` is malformed or not available.
torch::Device resolve_device(const std::string& name, const std::string& what);

// An empty string when the device named `name` can run here, else the reason in a few words.
std::string device_unavailable_reason(const std::string& name);

}  // namespace normlab
