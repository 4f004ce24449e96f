// libFuzzer target for the safetensors header checks (train/safetensors_header.h), which stand
// between a damaged or hostile checkpoint file and LibTorch. They may only answer with
// RuntimeFailure; whatever they accept must be safe to copy: every tensor's byte range lies in
// the data and is as long as its shape says. Built and run by tests/fuzz/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/errors.h"
#include "train/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const normlab::SafetensorsHeader h = normlab::parse_safetensors_header(bytes, "fuzz.safetensors");
    for (const auto& e : h.tensors) {
      size_t numel = 1;
      for (int64_t d : e.shape) numel *= static_cast<size_t>(d);
      if (e.end < e.begin || h.data_start + e.end > size || e.end - e.begin != numel * sizeof(float)) {
        __builtin_trap();
      }
    }
  } catch (const normlab::RuntimeFailure&) {
  }
  return 0;
}
