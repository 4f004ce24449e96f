// The safetensors file format (8-byte little-endian header length, JSON header, raw
// little-endian data), F32 tensors only, as src/train/README.md requires for model and optimizer
// state. The header's __metadata__ carries string key/values (format, resolved config).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/torch.h"

namespace normlab {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Serialised bytes of a safetensors file (tensors are converted to contiguous CPU float32).
std::string safetensors_bytes(const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata);

struct SafetensorsFile {
  NamedTensors tensors;  // in header order
  std::map<std::string, std::string> metadata;
};

// Parses a safetensors file; throws RuntimeFailure naming the path on a malformed file.
SafetensorsFile read_safetensors(const std::string& path);

}  // namespace normlab
