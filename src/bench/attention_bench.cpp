// The attention micro-benchmark behind `normlab bench attention`; see attention_bench.h.
#include "bench/attention_bench.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <sstream>
#include <thread>

#include "core/errors.h"
#include "core/torch.h"
#include "core/torch_compat.h"
#include "metrics/stats.h"
#include "model/attention.h"

namespace normlab {

const char* const kFp32AttentionKernel = "fp32 kernel";

namespace {

struct AttentionCandidate {
  std::string name;
  bool bf16;  // takes the bf16 inputs (else the fp32 ones)
  std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)> run;
  AttentionPath path;  // the dispatch's name for it
};

}  // namespace

AttentionShape parse_attention_shape(const std::string& text, const std::string& what) {
  AttentionShape s;
  std::vector<int64_t> v;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, 'x')) {
    try {
      size_t used = 0;
      const long long x = std::stoll(part, &used);
      if (used != part.size() || x < 1) throw std::invalid_argument(part);
      v.push_back(x);
    } catch (const std::exception&) {
      v.clear();
      break;
    }
  }
  if (v.size() != 4)
    throw UsageError(fmt::format("{}: expected BxTxHxdh with four positive integers (e.g. 2x1024x12x64), got '{}'", what,
                                 text));
  s.B = v[0];
  s.T = v[1];
  s.H = v[2];
  s.dh = v[3];
  return s;
}

std::vector<AttentionBenchEntry> run_attention_bench(const AttentionBenchOptions& options) {
  if (options.repeats < 1) throw UsageError("bench attention: --repeats must be >= 1");
  if (options.warmup < 0) throw UsageError("bench attention: --warmup must be >= 0");
  std::vector<AttentionShape> shapes;
  for (const auto& text : options.shapes) {
    shapes.push_back(parse_attention_shape(text, "bench attention: --shapes"));
    if (shapes.back().dh % 8 != 0)
      throw UsageError(fmt::format("bench attention: --shapes: dh must be a multiple of 8 (the fp32 kernel's), got {}",
                                   shapes.back().dh));
  }
  const int64_t threads =
      options.threads > 0 ? options.threads : std::max<int64_t>(1, std::thread::hardware_concurrency());
  torch::set_num_threads(static_cast<int>(threads));
  spdlog::info("bench attention: causal forward+backward on the CPU, {} threads, median of {} rounds after {} warm-up",
               torch::get_num_threads(), options.repeats, options.warmup);
  torch::manual_seed(0);

  std::vector<AttentionBenchEntry> entries;
  for (const auto& sh : shapes) {
    auto x32 = [&] { return torch::randn({sh.B, sh.T, sh.H, sh.dh}).requires_grad_(); };
    const torch::Tensor q = x32(), k = x32(), v = x32();
    auto bf = [](const torch::Tensor& t) { return t.detach().to(torch::kBFloat16).requires_grad_(); };
    const torch::Tensor qb = bf(q), kb = bf(k), vb = bf(v);
    const auto g32 = torch::randn_like(q), gb = g32.to(torch::kBFloat16);

    std::vector<AttentionCandidate> cands;
    auto fast = [](const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c) {
      return causal_attention_fast(a, b, c, nullptr);
    };
    cands.push_back({kFp32AttentionKernel, false, fast, AttentionPath::cpu_kernel});
    cands.push_back({"bf16 via fp32 kernel", true,
                     [](const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c) {
                       return causal_attention_fast(a.to(torch::kFloat), b.to(torch::kFloat), c.to(torch::kFloat), nullptr)
                           .to(torch::kBFloat16);
                     },
                     AttentionPath::cpu_kernel_bf16});
    if (causal_attention_bf16_kernel_applies(qb, 0))
      cands.push_back({"bf16 kernel", true, fast, AttentionPath::cpu_kernel_bf16_native});
    if (have_sdpa())
      cands.push_back({"bf16 SDPA", true,
                       [](const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c) {
                         return causal_sdpa(a, b, c);
                       },
                       AttentionPath::sdpa});
    const AttentionPath chosen = choose_attention_path(qb, 0, /*want_stats=*/false, /*allow_fast=*/true);

    std::vector<std::vector<double>> times(cands.size());
    using clock = std::chrono::steady_clock;
    for (int round = 0; round < options.warmup + options.repeats; ++round) {
      for (size_t c = 0; c < cands.size(); ++c) {
        const auto& in = cands[c].bf16 ? std::vector<torch::Tensor>{qb, kb, vb} : std::vector<torch::Tensor>{q, k, v};
        const auto t0 = clock::now();
        auto o = cands[c].run(in[0], in[1], in[2]);
        auto grads = torch::autograd::grad({o}, in, {cands[c].bf16 ? gb : g32});
        const auto t1 = clock::now();
        if (round >= options.warmup) times[c].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
    }
    const double base = median(times[0]);
    for (size_t c = 0; c < cands.size(); ++c) {
      const double ms = median(times[c]);
      entries.push_back({sh, cands[c].name, ms, ms / base, cands[c].bf16 && cands[c].path == chosen});
    }
    spdlog::info("bench attention: {}x{}x{}x{} done (fp32 kernel {:.3f} ms)", sh.B, sh.T, sh.H, sh.dh, base);
  }
  return entries;
}

std::string format_attention_bench(const std::vector<AttentionBenchEntry>& entries) {
  std::vector<std::string> names;
  for (const auto& e : entries)
    if (std::find(names.begin(), names.end(), e.name) == names.end()) names.push_back(e.name);
  std::string out =
      "Causal attention, forward + backward on the CPU: median ms (ratio to the fp32 kernel's in the same run; "
      "* = the path the dispatch takes for bf16):\n\n| B x T x H x dh |";
  std::string rule = "|---|";
  for (const auto& n : names) {
    out += " " + n + " |";
    rule += "---:|";
  }
  out += "\n" + rule + "\n";
  for (size_t i = 0; i < entries.size();) {
    const auto& s = entries[i].shape;
    out += fmt::format("| {}x{}x{}x{} |", s.B, s.T, s.H, s.dh);
    for (const auto& n : names) {
      const auto it = std::find_if(entries.begin() + static_cast<std::ptrdiff_t>(i), entries.end(), [&](const auto& e) {
        return e.name == n && e.shape.B == s.B && e.shape.T == s.T && e.shape.H == s.H && e.shape.dh == s.dh;
      });
      out += it == entries.end() ? " - |"
                                 : fmt::format(" {:.2f} ({:.2f}x){} |", it->median_ms, it->ratio, it->chosen ? " *" : "");
    }
    out += "\n";
    size_t j = i;
    while (j < entries.size() && entries[j].shape.B == s.B && entries[j].shape.T == s.T && entries[j].shape.H == s.H &&
           entries[j].shape.dh == s.dh)
      ++j;
    i = j;
  }
  return out;
}

}  // namespace normlab
