#include "train/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <fmt/format.h>

#include "core/json.h"
#include "core/system.h"
#include "core/torch_compat.h"
#include "data/corpus.h"
#include "metrics/grad_stats.h"
#include "model/transformer.h"
#include "optim/adamw.h"
#include "train/device.h"
#include "train/step.h"
#include "train/trainer.h"

namespace normlab {

using Clock = std::chrono::steady_clock;

namespace {

// Waits for the device's queued work (a no-op on the CPU, where every op is synchronous).
void sync(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.has_index() ? device.index() : -1);
}

}  // namespace

int64_t gemm_peak_size(const torch::Device& device) { return device.is_cuda() ? 8192 : 1024; }

double gemm_peak_gflops(const torch::Device& device, torch::ScalarType dtype, int64_t n, int repeats) {
  const auto opts = torch::TensorOptions().device(device).dtype(dtype);
  // Operands from a generator of its own: a training run that measures (the bf16 warning) must
  // leave torch's global generator, which its checkpoints save, as it was.
  at::Generator gen = at::detail::createCPUGenerator(1234);
  auto a = torch::randn({n, n}, gen, torch::kFloat).to(opts), b = torch::randn({n, n}, gen, torch::kFloat).to(opts);
  auto c = torch::empty({n, n}, opts);
  double best = 1e30;
  for (int i = 0; i < repeats + 3; ++i) {
    sync(device);
    const auto t0 = Clock::now();
    torch::mm_out(c, a, b);
    sync(device);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (i >= 3) best = std::min(best, dt);
  }
  return 2.0 * n * n * n / best / 1e9;
}

BenchResult bench_training(const Config& cfg, const std::string& config_name, int64_t warmup, int64_t steps,
                           const std::string& profile_path, bool diag) {
  configure_threads(cfg.train.threads);
  const torch::Device device = resolve_device(choice_name(cfg.train.device), "train.device");
  Corpus data = Corpus::load(cfg.data.train, cfg.data.format);
  Trainable t = make_trainable(cfg, device);
  Transformer& model = t.model;
  BenchResult r;
  r.config = config_name;
  r.threads = torch::get_num_threads();
  r.blas = blas_threading();
  r.device = device.str();
  r.precision = choice_name(cfg.train.precision);
  r.diag = diag;
  r.gemm_n = gemm_peak_size(device);
  r.steps = steps;
  r.params = count_params(model, true);
  r.non_embedding_params = count_params(model, false);
  const double L = cfg.model.n_layers, d = cfg.model.d_model, T = cfg.model.ctx;
  r.flops_per_token = 6.0 * r.non_embedding_params + 12.0 * L * d * T;

  // The peak is measured before and after the timed steps and the better one kept: on a shared VM a
  // single short measurement can land in a burst of stolen time (and report an MFU above 100%).
  const double peak_before = gemm_peak_gflops(device, torch::kFloat, r.gemm_n);
  cuda_reset_peak_allocated(device);  // the peak of the training steps, not of the GEMM measurement
  int64_t micro_batch = 0;
  // The trainer's step, decisions included (a spike or non-finite step is skipped here, never
  // stopped: there is no run to stop).
  TrainStep step(cfg, t, data, device);
  std::vector<double> times;
  std::unique_ptr<torch::autograd::profiler::RecordProfile> profile;
  for (int64_t s = 0; s < warmup + steps; ++s) {
    if (s == warmup && !profile_path.empty()) {
      profile = std::make_unique<torch::autograd::profiler::RecordProfile>(profile_path);
    }
    const auto t0 = Clock::now();
    StepPlan plan = step.plan_at(s);  // the trainer's plan, diagnostics as the bench asks
    plan.diag = diag;
    plan.per_param = false;
    const StepOutcome o = step.run(micro_batch, plan);
    if (o.action == StepAction::kSkipOverflow) ++r.overflow_steps;  // fp16: the scaler skipped it
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s == 0) r.first_loss = o.loss;
    r.last_loss = o.loss;
    if (s >= warmup) times.push_back(dt);
  }
  profile.reset();  // writes the trace
  sync(device);
  std::sort(times.begin(), times.end());
  r.median_step_s = times[times.size() / 2];
  r.min_step_s = times.front();
  const double tokens = static_cast<double>(cfg.train.batch_size * cfg.model.ctx * cfg.train.accum);
  r.tokens_per_s = tokens / r.median_step_s;
  r.gflops = r.tokens_per_s * r.flops_per_token / 1e9;
  r.peak_device_mib = static_cast<double>(cuda_peak_allocated_bytes(device)) / (1 << 20);
  r.gemm_peak_gflops = std::max(peak_before, gemm_peak_gflops(device, torch::kFloat, r.gemm_n));
  // The bf16 peak: on CUDA always, where bf16 is the speed option; on the CPU only for bf16/fp16
  // steps (there it shows how slow bf16 is).
  if (device.is_cuda() || r.precision != "fp32") {
    r.gemm_peak_bf16_gflops = gemm_peak_gflops(device, torch::kBFloat16, r.gemm_n);
  }
  // A step whose matmuls run in bf16 (or fp16) is scored against the bf16 GEMM peak, on the CPU too:
  // there that peak is what the CPU's bf16 units reach (AVX512-BF16, AMX), or where it has none the
  // slow rate the step is held to; against the fp32 peak a bf16 step could pass 100 %.
  r.mfu_of = r.precision != "fp32" ? "bf16" : "fp32";
  r.mfu = r.gflops / (r.mfu_of == "fp32" ? r.gemm_peak_gflops : r.gemm_peak_bf16_gflops);
  r.peak_rss_mib = peak_rss_mib();
  return r;
}

std::string bench_json(const BenchResult& r) {
  return JsonObject()
             .add("impl", "normlab").add("config", r.config).add("device", r.device).add("precision", r.precision).add("diag", r.diag).add("threads", r.threads).add("blas", r.blas).add("steps", r.steps)
             .add("median_step_s", r.median_step_s).add("min_step_s", r.min_step_s)
             .add("tokens_per_s", r.tokens_per_s).add("flops_per_token", r.flops_per_token)
             .add("flops_formula", "6*non_embedding_params + 12*L*d*ctx").add("gflops", r.gflops)
             .add("gemm_peak_gflops", r.gemm_peak_gflops).add("gemm_peak_bf16_gflops", r.gemm_peak_bf16_gflops)
             .add("mfu", r.mfu).add("mfu_of", r.mfu_of).add("overflow_steps", r.overflow_steps).add("peak_rss_mib", r.peak_rss_mib).add("peak_device_mib", r.peak_device_mib)
             .add("params", r.params).add("non_embedding_params", r.non_embedding_params)
             .add("first_loss", r.first_loss).add("last_loss", r.last_loss)
             .str() +
         "\n";
}

std::string bench_text(const BenchResult& r) {
  std::string o;
  o += fmt::format("config            {}\n", r.config);
  o += fmt::format("device            {} ({})\n", r.device, r.precision);
  auto env = [](const char* name) { return std::getenv(name) ? std::getenv(name) : "unset"; };
  o += fmt::format("threads           {} (OpenBLAS {}{}; OMP_WAIT_POLICY={}, OPENBLAS_THREAD_TIMEOUT={})\n",
                   r.threads, r.blas.empty() ? "not loaded" : r.blas,
                   r.blas == "openmp" ? ": one pool with LibTorch" : r.blas == "pthreads" ? ": a pool of its own" : "",
                   env("OMP_WAIT_POLICY"), env("OPENBLAS_THREAD_TIMEOUT"));
  o += fmt::format("median step       {:.2f} ms over {} timed steps (min {:.2f} ms){}\n", r.median_step_s * 1e3,
                   r.steps, r.min_step_s * 1e3, r.diag ? ", every one a full-diagnostics step" : "");
  o += fmt::format("tokens/s          {:.0f}\n", r.tokens_per_s);
  o += fmt::format("FLOPs/token       {:.4g} = 6 x {} non-embedding params + 12 x L x d x ctx\n",
                   r.flops_per_token, r.non_embedding_params);
  o += fmt::format("achieved          {:.1f} GFLOP/s\n", r.gflops);
  o += fmt::format("GEMM peak         {:.1f} GFLOP/s (fp32 {}^3 matmul on {}, best of 10 before and 10 after the timed steps, same process)\n",
                   r.gemm_peak_gflops, r.gemm_n, r.device);
  if (r.gemm_peak_bf16_gflops > 0) {
    o += fmt::format("GEMM peak bf16    {:.1f} GFLOP/s (same size, bf16)\n", r.gemm_peak_bf16_gflops);
  }
  o += fmt::format("MFU               {:.1f}% (of the {} peak{})\n", 100 * r.mfu, r.mfu_of,
                   r.precision == "fp32" ? std::string(": the step runs in fp32")
                                         : ": autocast matmuls run in " + r.precision);
  if (r.overflow_steps > 0) o += fmt::format("fp16 overflows    {} steps skipped by the loss scaler\n", r.overflow_steps);
  o += fmt::format("peak RSS          {:.0f} MiB\n", r.peak_rss_mib);
  if (r.peak_device_mib > 0) o += fmt::format("peak GPU memory   {:.0f} MiB (allocated by LibTorch)\n", r.peak_device_mib);
  return o;
}

}  // namespace normlab
