// `normlab bench -c CONFIG`: times the real training step (forward, backward, gradient norms,
// clipping, AdamW) after warm-up steps and reports median step time, tokens/s, FLOPs/token,
// achieved GFLOP/s against a GEMM peak measured in the same process (MFU), and peak RSS.
// FLOPs/token = 6 x non-embedding params + 12 x L x d x ctx (Kaplan et al. 2020 / PaLM's MFU).
#pragma once

#include <string>

#include "config/config.h"
#include "core/torch.h"

namespace normlab {

struct BenchResult {
  std::string config;
  std::string device;  // "cpu", "cuda", "cuda:1"
  std::string blas;    // OpenBLAS threading: openmp, pthreads, sequential ("" if not OpenBLAS)
  std::string precision = "fp32";  // train.precision
  std::string mfu_of = "fp32";     // the peak MFU is against: fp32, or bf16 for bf16/fp16 steps
  int64_t overflow_steps = 0;      // fp16: steps whose update the loss scaler skipped
  bool diag = false;               // every step was a full-diagnostics step
  int64_t threads = 0, steps = 0, params = 0, non_embedding_params = 0, gemm_n = 0;
  double median_step_s = 0, min_step_s = 0, tokens_per_s = 0, flops_per_token = 0, gflops = 0,
         gemm_peak_gflops = 0, mfu = 0, peak_rss_mib = 0, first_loss = 0, last_loss = 0;
  double gemm_peak_bf16_gflops = 0;  // measured on CUDA, and for bf16/fp16 steps
  double peak_device_mib = 0;        // CUDA: peak memory allocated by LibTorch's caching allocator
};

// profile_path: when not empty, the timed steps run under LibTorch's autograd profiler and its
// chrome trace (chrome://tracing, Perfetto) is written there; the timings then include its
// overhead. diag: every step (warm-up and timed) is a full-diagnostics step, as `diag.every: 1`
// makes it in training (statistics captured, update ratio, the second host read); otherwise none is.
BenchResult bench_training(const Config& cfg, const std::string& config_name, int64_t warmup,
                           int64_t steps, const std::string& profile_path = "", bool diag = false);
// The device's matmul rate: best of `repeats` n x n x n products of `dtype` on `device`.
double gemm_peak_gflops(const torch::Device& device, torch::ScalarType dtype, int64_t n, int repeats = 10);
// The matrix size the peak is measured at: 1024 on the CPU, 8192 on a GPU (large enough to fill it).
int64_t gemm_peak_size(const torch::Device& device);
std::string bench_json(const BenchResult& r);
std::string bench_text(const BenchResult& r);

}  // namespace normlab
