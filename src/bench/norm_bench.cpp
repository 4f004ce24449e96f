// The norm micro-benchmark behind `normlab bench norms`; see norm_bench.h.
#include "bench/norm_bench.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <thread>

#include "core/errors.h"
#include "core/torch.h"
#include "core/torch_compat.h"
#include "model/norms/layernorm.h"
#include "model/norms/norm.h"
#include "model/norms/rmsnorm.h"
#include "metrics/stats.h"
#include "train/device.h"

namespace normlab {

const char* const kNativeLayerNorm = "layer_norm (native)";

namespace {

constexpr const char* kComposedRms = "rmsnorm (composed)";
constexpr const char* kComposedLayerNorm = "layernorm (composed)";
constexpr const char* kNativeRms = "rms_norm (native)";

struct NormCandidate {
  std::string name;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  std::vector<torch::Tensor> params;  // grads reset before every round
  NormPtr module;                     // null for the functional candidates
};

bool took_fast_path(const NormPtr& m) {
  if (auto* r = dynamic_cast<RMSNormImpl*>(m.get())) return r->last_forward_was_fast();
  if (auto* l = dynamic_cast<LayerNormImpl*>(m.get())) return l->last_forward_was_fast();
  return false;
}

// The functional candidates take parameters of the input's dtype, as a model of that dtype calls
// LibTorch's ops (CUDA's fused rms_norm wants them equal); the registry modules keep their fp32
// parameters and upcast the input themselves (src/train/README.md).
std::vector<NormCandidate> candidates(int64_t width, const torch::Device& device, torch::ScalarType dtype) {
  std::vector<NormCandidate> out;
  const auto popts = torch::TensorOptions().device(device).dtype(dtype);
  auto w = torch::ones({width}, popts).requires_grad_(), b = torch::zeros({width}, popts).requires_grad_();
  out.push_back({kNativeLayerNorm,
                 [=](const torch::Tensor& x) { return torch::layer_norm(x, {width}, w, b, 1e-5); },
                 {w, b},
                 nullptr});
  for (const auto& type : norm_registry()) {
    NormOptions o;
    o.size = width;
    o.eps = std::isnan(type.default_eps) ? 1e-5 : type.default_eps;
    NormPtr m = type.make(o);
    m->to(device);
    out.push_back(
        {type.name, [m](const torch::Tensor& x) { return m->forward(x); }, m->parameters(), m});
  }
  auto rw = torch::ones({width}, popts).requires_grad_();
  out.push_back(
      {kComposedRms,
       [=](const torch::Tensor& x) { return RMSNormImpl::reference_forward(x, rw, 1e-6, false); },
       {rw},
       nullptr});
  out.push_back(
      {kComposedLayerNorm,
       [=](const torch::Tensor& x) { return LayerNormImpl::reference_forward(x, w, b, 1e-5); },
       {w, b},
       nullptr});
#if NORMLAB_TORCH_AT_LEAST(2, 4)
  out.push_back({kNativeRms,
                 [=](const torch::Tensor& x) { return at::rms_norm(x, {width}, rw, 1e-6); },
                 {rw},
                 nullptr});
#endif
  return out;
}

}  // namespace

std::vector<NormBenchEntry> run_norm_bench(const NormBenchOptions& options) {
  if (options.repeats < 1) throw UsageError("bench norms: --repeats must be >= 1");
  if (options.warmup < 0) throw UsageError("bench norms: --warmup must be >= 0");
  for (int64_t r : options.rows) {
    if (r < 1) throw UsageError(fmt::format("bench norms: rows must be >= 1, got {}", r));
  }
  for (int64_t w : options.widths) {
    if (w < 1) throw UsageError(fmt::format("bench norms: widths must be >= 1, got {}", w));
  }
  // Like `normlab train` (train.threads: 0): all cores, not LibTorch's own default.
  const int64_t threads = options.threads > 0
                              ? options.threads
                              : std::max<int64_t>(1, std::thread::hardware_concurrency());
  torch::set_num_threads(static_cast<int>(threads));
  const torch::Device device = resolve_device(options.device, "bench norms --device");
  if (options.dtype != "fp32" && options.dtype != "bf16") {
    throw UsageError("bench norms: --dtype must be fp32 or bf16, got " + options.dtype);
  }
  const auto dtype = options.dtype == "bf16" ? torch::kBFloat16 : torch::kFloat;
  auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.has_index() ? device.index() : -1);
  };
  spdlog::info(
      "bench norms: forward+backward, {} inputs on {}, {} threads, median of {} rounds after {} "
      "warm-up",
      options.dtype, device.str(), torch::get_num_threads(), options.repeats, options.warmup);
  torch::manual_seed(0);

  std::vector<NormBenchEntry> entries;
  for (int64_t rows : options.rows) {
    for (int64_t width : options.widths) {
      const auto opts = torch::TensorOptions().device(device).dtype(dtype);
      auto x = torch::randn({rows, width}, opts).requires_grad_();
      auto g = torch::randn({rows, width}, opts);
      auto cands = candidates(width, device, dtype);
      std::vector<std::vector<double>> times(cands.size());
      std::vector<bool> fast(cands.size(), false);
      using clock = std::chrono::steady_clock;
      for (int round = 0; round < options.warmup + options.repeats; ++round) {
        for (size_t c = 0; c < cands.size(); ++c) {
          x.mutable_grad().reset();
          for (auto& p : cands[c].params) p.mutable_grad().reset();
          sync();
          const auto t0 = clock::now();
          auto y = cands[c].forward(x);
          y.backward(g);
          sync();
          const auto t1 = clock::now();
          if (round >= options.warmup) {
            times[c].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
          }
          if (round == 0 && cands[c].module) fast[c] = took_fast_path(cands[c].module);
        }
      }
      const double base = median(times[0]);
      for (size_t c = 0; c < cands.size(); ++c) {
        const double ms = median(times[c]);
        entries.push_back({rows, width, cands[c].name, ms, ms / base, fast[c], device.str(), options.dtype});
      }
      spdlog::info("bench norms: rows {} width {} done (native layer_norm {:.3f} ms)", rows, width,
                   base);
    }
  }
  return entries;
}

std::string format_norm_bench(const std::vector<NormBenchEntry>& entries) {
  // Columns in first-seen order; rows keyed by (rows, width) in run order.
  std::vector<std::string> names;
  std::vector<std::pair<int64_t, int64_t>> sizes;
  std::map<std::pair<std::pair<int64_t, int64_t>, std::string>, const NormBenchEntry*> cell;
  for (const auto& e : entries) {
    if (std::find(names.begin(), names.end(), e.name) == names.end()) names.push_back(e.name);
    const auto size = std::make_pair(e.rows, e.width);
    if (std::find(sizes.begin(), sizes.end(), size) == sizes.end()) sizes.push_back(size);
    cell[{size, e.name}] = &e;
  }
  auto header = [&](const std::string& first) {
    std::string h = "| rows | width | " + first + " |", rule = "|---:|---:|---:|";
    for (const auto& n : names) {
      if (n == kNativeLayerNorm) continue;
      bool fast = false;
      for (const auto& e : entries) fast = fast || (e.name == n && e.fast_path);
      h += " " + n + (fast ? " (fast path)" : "") + " |";
      rule += "---:|";
    }
    return h + "\n" + rule + "\n";
  };
  auto table = [&](const std::string& first, auto value) {
    std::string out = header(first);
    for (const auto& s : sizes) {
      out += fmt::format("| {} | {} |", s.first, s.second);
      const auto* base = cell.count({s, kNativeLayerNorm}) ? cell[{s, kNativeLayerNorm}] : nullptr;
      out += base ? fmt::format(" {:.3f} |", base->median_ms) : " - |";
      for (const auto& n : names) {
        if (n == kNativeLayerNorm) continue;
        const auto it = cell.find({s, n});
        out += it == cell.end() ? " - |" : " " + value(*it->second) + " |";
      }
      out += "\n";
    }
    return out;
  };
  std::string out;
  out +=
      "Forward+backward time relative to LibTorch's native layer_norm in the same run "
      "(lower is faster; " + (entries.empty() ? std::string("float32 CPU")
                                 : entries.front().dtype + " inputs on " + entries.front().device) +
      ", median of the timed rounds):\n\n";
  out += table(std::string(kNativeLayerNorm) + " ms",
               [](const NormBenchEntry& e) { return fmt::format("{:.2f}", e.ratio); });
  out += "\nMedian forward+backward time in milliseconds:\n\n";
  out += table(std::string(kNativeLayerNorm) + " ms",
               [](const NormBenchEntry& e) { return fmt::format("{:.3f}", e.median_ms); });
  return out;
}

}  // namespace normlab
