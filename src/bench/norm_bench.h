// `normlab bench norms`: a micro-benchmark of every registered norm, forward + backward, on
// (rows, width) inputs (float32 CPU by default; any device and float32 or bf16 inputs), each
// reported as a ratio to LibTorch's native torch::layer_norm timed in the same run. Not a
// profiler: one input layout, wall time (on CUDA the device is synchronised around each call).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace normlab {

struct NormBenchOptions {
  std::vector<int64_t> rows = {4096, 16384};       // B*T positions
  std::vector<int64_t> widths = {128, 512, 2048};  // n, the normalised dimension
  int warmup = 3;       // untimed rounds first (allocator, caches, thread pool)
  int repeats = 15;     // timed rounds; the median is reported
  int64_t threads = 0;  // LibTorch intra-op threads; 0 = all cores, as train.threads: 0
  std::string device = "cpu";   // cpu | cuda | cuda:N
  std::string dtype = "fp32";   // input dtype: fp32 | bf16 (norm parameters stay fp32)
};

// One measured candidate at one size. Candidates: "layer_norm (native)" (the baseline), every
// registry norm by name (using its automatic path, fast where it has one), the composed-op
// references "rmsnorm (composed)" and "layernorm (composed)" that the fast paths replace, and on
// LibTorch 2.x "rms_norm (native)" (at::rms_norm).
struct NormBenchEntry {
  int64_t rows = 0, width = 0;
  std::string name;
  double median_ms = 0;    // forward + backward, one call
  double ratio = 0;        // median_ms / the native layer_norm's median_ms at this size
  bool fast_path = false;  // the module took its hand-written CPU path
  std::string device = "cpu", dtype = "fp32";
};

extern const char* const kNativeLayerNorm;  // "layer_norm (native)"

// Runs the benchmark; progress goes to the log (stderr). Rounds interleave the candidates so
// that load from other processes hits all of them alike.
std::vector<NormBenchEntry> run_norm_bench(const NormBenchOptions& options);

// Two Markdown tables (ratios, then milliseconds), one line per size, one column per candidate.
std::string format_norm_bench(const std::vector<NormBenchEntry>& entries);

}  // namespace normlab
