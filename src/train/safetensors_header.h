// The header of a safetensors file, parsed and checked without LibTorch, so that the checks can
// be fuzzed on their own (tests/fuzz/safetensors_fuzz.cpp). F32 tensors only, as the checkpoint
// format of src/train/README.md requires.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace normlab {

struct SafetensorsEntry {
  std::string name;
  std::vector<int64_t> shape;
  size_t begin = 0, end = 0;  // byte range within the data, after the header
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // in header order
  std::map<std::string, std::string> metadata;
  size_t data_start = 0;  // offset of the data in the file
};

// Parses the header of a whole file's bytes and checks it against them: F32 only, no negative
// dimension, each tensor's byte range as long as its shape says, and the ranges tiling the data
// with no overlap and no hole. Throws RuntimeFailure naming `path`.
SafetensorsHeader parse_safetensors_header(std::string_view bytes, const std::string& path);

}  // namespace normlab
