// `normlab bench attention`: a micro-benchmark of causal attention on the CPU, forward + backward
// of q, k, v of shape (B, T, H, dh), for the candidates the dispatch chooses between: the fp32
// kernel (fp32 inputs; the baseline every ratio is to), and for bf16 inputs the fp32 kernel on
// upcast inputs, the bf16 kernel (CPUs with AVX512-BF16) and LibTorch 2.x's
// scaled_dot_product_attention (SDPA), each where it can run. Wall time, rounds interleaved.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace normlab {

struct AttentionShape {
  int64_t B = 0, T = 0, H = 0, dh = 0;
};

// "BxTxHxdh", e.g. "2x1024x12x64"; a UsageError naming `what` for anything else.
AttentionShape parse_attention_shape(const std::string& text, const std::string& what);

struct AttentionBenchOptions {
  // tiny / small / medium's attention (configs/bench) and a GPT-2-small-like context of 1024.
  std::vector<std::string> shapes = {"16x128x4x32", "8x256x8x32", "8x256x8x64", "2x1024x12x64"};
  int warmup = 2;       // untimed rounds first
  int repeats = 10;     // timed rounds; the median is reported
  int64_t threads = 0;  // LibTorch intra-op threads; 0 = all cores
};

struct AttentionBenchEntry {
  AttentionShape shape;
  std::string name;        // "fp32 kernel", "bf16 via fp32 kernel", "bf16 kernel", "bf16 SDPA"
  double median_ms = 0;    // forward + backward
  double ratio = 0;        // median_ms / the fp32 kernel's at this shape
  bool chosen = false;     // the path the dispatch takes for this dtype and shape (no statistics)
};

extern const char* const kFp32AttentionKernel;  // "fp32 kernel"

std::vector<AttentionBenchEntry> run_attention_bench(const AttentionBenchOptions& options);

// A Markdown table (milliseconds and ratio per candidate), one line per shape; `*` marks the
// candidate the dispatch chooses for bf16.
std::string format_attention_bench(const std::vector<AttentionBenchEntry>& entries);

}  // namespace normlab
