#include "optim/muon.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/system.h"
#include "optim/registry.h"

namespace normlab {

namespace {
// (a, b, c) of each step: X <- a X + (b S + c S S) X with S = X X^T.
constexpr std::array<double, 3> kKeller{3.4445, -4.7750, 2.0315};
constexpr std::array<std::array<double, 3>, 5> kPolarExpress{{
    {8.156554524902461, -22.48329292557795, 15.878769915207462},
    {4.042929935166739, -2.808917465908714, 0.5000178451051316},
    {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
    {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
    {2.3465413258596377, -1.7097828382687081, 0.42323551169305323},
}};

std::atomic<NsBf16Gemm> g_bf16_gemm{NsBf16Gemm::kWhereFast};

// Does LibTorch's bf16 GEMM of this shape and layout on this device compute what NS's bf16 products
// mean: exact products summed in float32, alpha and beta applied, the result rounded to bf16 once?
// Asked with values where the other roundings give another answer. mm: each row sums one 1 and three
// 2^-9 (the 1 first in row 0, last in row 1): rounded once 1 + 2^-7; summed in bf16, 1. addmm: rows
// of 2 and three 2^-9 with alpha 0.5 (1 + 3 * 2^-10) plus beta * C = 2 * 3 * 2^-11: rounded once
// 1 + 2^-7; product and beta term rounded separately, 1. Debian's LibTorch 1.13 answers no below
// 16^3 multiply-adds (its fallback GEMM accumulates in bf16) and yes above (oneDNN).
enum class GemmForm { kMmTransposed, kAddmm };

bool bf16_gemm_rounds_once(GemmForm form, int64_t m, int64_t k, int64_t n, const torch::Device& device) {
  if (k < 4) return false;
  static std::mutex mu;
  static std::map<std::tuple<int, int, int64_t, int64_t, int64_t>, bool> known;
  const auto key = std::make_tuple(static_cast<int>(form), static_cast<int>(device.type()), m, k, n);
  std::lock_guard<std::mutex> lock(mu);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  const auto bf = torch::TensorOptions().dtype(torch::kBFloat16).device(device);
  const double scale = form == GemmForm::kAddmm ? 2.0 : 1.0;
  auto A = torch::zeros({m, k}, torch::kFloat);
  A.select(1, 0).fill_(scale);
  A.narrow(1, 1, 3).fill_(std::ldexp(1.0, -9));
  if (m > 1) {  // row 1: the three small terms first, the 1 last
    A[1].zero_();
    A[1].narrow(0, 0, 3).fill_(std::ldexp(1.0, -9));
    A[1][k - 1] = scale;
  }
  torch::Tensor got;
  if (form == GemmForm::kMmTransposed) {
    const auto Bt = torch::ones({n, k}, bf);  // the second operand is a transposed view, as X X^T
    got = torch::mm(A.to(bf), Bt.t());
  } else {
    const auto C = torch::full({m, n}, 3.0 * std::ldexp(1.0, -11), bf);
    got = torch::addmm(C, A.to(bf), torch::ones({k, n}, bf), /*beta=*/2.0, /*alpha=*/0.5);
  }
  const bool once = torch::all(got.to(torch::kCPU).to(torch::kFloat) == static_cast<float>(1.0 + std::ldexp(1.0, -7))).item<bool>();
  known.emplace(key, once);
  return once;
}

const std::array<double, 3>& coefficients(NsKind kind, int64_t k) {
  return kind == NsKind::kKeller ? kKeller : kPolarExpress.at(static_cast<size_t>(k));
}

}  // namespace

NsBf16Gemm set_ns_bf16_gemm(NsBf16Gemm policy) { return g_bf16_gemm.exchange(policy); }

bool ns_uses_bf16_gemm(int64_t A, int64_t B, const torch::Device& device) {
  const NsBf16Gemm policy = g_bf16_gemm.load();
  if (policy == NsBf16Gemm::kNever) return false;
  if (policy == NsBf16Gemm::kWhereFast && device.is_cpu() && !cpu_has_avx512_bf16()) return false;
  const int64_t m = std::min(A, B), n = std::max(A, B);
  return bf16_gemm_rounds_once(GemmForm::kMmTransposed, m, n, m, device) &&
         bf16_gemm_rounds_once(GemmForm::kAddmm, m, m, m, device) &&
         bf16_gemm_rounds_once(GemmForm::kAddmm, m, m, n, device);
}

torch::Tensor newton_schulz(const torch::Tensor& U, NsKind kind, int64_t steps, NsDtype dtype) {
  TORCH_CHECK(U.dim() == 2, "newton_schulz: a matrix, got ", U.dim(), " dimensions");
  torch::NoGradGuard ng;
  // bf16: every operation's result is rounded to bf16 once, from products of bf16 values taken
  // exactly and summed in float32: what torch.optim.Muon's bf16 addmm computes on CUDA and in
  // PyTorch 2.x on the CPU. The reference holds the bf16 values in float32 tensors and rounds each
  // float32 result; the fast path hands bf16 tensors to LibTorch's bf16 GEMM where a probe shows it
  // computes the same (bf16_gemm_rounds_once). The two differ only in the order of the float32 sums.
  const bool bf16 = dtype == NsDtype::kBf16;
  auto r = [bf16](const torch::Tensor& t) { return bf16 ? t.to(torch::kBFloat16).to(torch::kFloat) : t; };
  const bool tall = U.size(0) > U.size(1);
  if (bf16 && ns_uses_bf16_gemm(U.size(0), U.size(1), U.device())) {
    // The reference's first steps with fewer passes over the matrix (the same values: U rounded,
    // the float32 norm of the rounded values rounded, the float32 quotient rounded), then every
    // product on bf16 tensors.
    auto Ub = U.to(torch::kFloat).to(torch::kBFloat16);
    if (tall) Ub = Ub.t().contiguous();
    auto Xf = Ub.to(torch::kFloat);
    const auto norm = r(Xf.norm());
    Xf.div_(kind == NsKind::kKeller ? norm.clamp_min(1e-7) : r(r(norm * 1.02) + 1e-6));
    auto Xb = Xf.to(torch::kBFloat16);
    for (int64_t k = 0; k < steps; ++k) {
      const auto& [a, b, c] = coefficients(kind, k);
      const auto S = torch::mm(Xb, Xb.t());
      const auto Bm = torch::addmm(S, S, S, /*beta=*/b, /*alpha=*/c);
      Xb = torch::addmm(Xb, Bm, Xb, /*beta=*/a);
    }
    return tall ? Xb.t().contiguous().to(torch::kFloat) : Xb.to(torch::kFloat);
  }
  auto X = r(U.to(torch::kFloat));
  if (tall) X = X.t();
  const auto norm = r(X.norm());
  X = kind == NsKind::kKeller ? r(X / norm.clamp_min(1e-7)) : r(X / r(r(norm * 1.02) + 1e-6));
  for (int64_t k = 0; k < steps; ++k) {
    const auto& [a, b, c] = coefficients(kind, k);
    // torch.optim.Muon's two addmm calls: S = X X^T; B = b S + c S S; X = a X + B X.
    const auto S = r(torch::mm(X, X.t()));
    const auto Bm = r(torch::addmm(S, S, S, /*beta=*/b, /*alpha=*/c));
    X = r(torch::addmm(X, Bm, X, /*beta=*/a));
  }
  if (tall) X = X.t();
  return X.contiguous();
}

double muon_lr_adjust(AdjustLr rule, int64_t A, int64_t B) {
  const double a = static_cast<double>(A), b = static_cast<double>(B);
  return rule == AdjustLr::kOriginal ? std::sqrt(std::max(1.0, a / b)) : 0.2 * std::sqrt(std::max(a, b));
}

MuonSettings MuonSettings::from(const OptimConfig& o) {
  const OwnedValues& k = o.keys;
  MuonSettings s;
  s.lr = k.number("muon.lr");
  s.momentum = k.number("muon.momentum");
  s.nesterov = k.boolean("muon.nesterov");
  s.ns = *parse_choice<NsKind>(k.name("muon.ns"));
  s.ns_steps = k.integer("muon.ns_steps");
  s.ns_dtype = *parse_choice<NsDtype>(k.name("muon.ns_dtype"));
  s.adjust_lr = *parse_choice<AdjustLr>(k.name("muon.adjust_lr"));
  s.cautious_wd = k.boolean("muon.cautious_wd");
  s.beta2 = k.number("muon.beta2");
  return s;
}

namespace {
template <class E>
std::vector<std::string> names_of() {
  std::vector<std::string> out;
  for (const auto& e : ChoiceTable<E>::entries) out.push_back(e.name);
  return out;
}
std::string check_rate(const KeyValue& v, const ModelConfig&) {
  const double x = std::get<double>(v);
  return x > 0 && std::isfinite(x) ? "" : "must be a finite number > 0";
}
}  // namespace

std::string check_unit_interval(const KeyValue& v, const ModelConfig&) {
  const double x = std::get<double>(v);
  return x >= 0 && x < 1 ? "" : "must be in [0, 1)";
}

std::vector<KeySpec> muon_keys() {
  const MuonSettings d;
  return {
      {"lr", KeyKind::kNumber, d.lr, "peak learning rate of the block matrices", {}, check_rate},
      {"momentum", KeyKind::kNumber, d.momentum, "momentum mu of the matrices' update", {}, check_unit_interval},
      {"nesterov", KeyKind::kBoolean, d.nesterov, "Nesterov momentum"},
      {"ns", KeyKind::kName, std::string(choice_name(d.ns)), "orthogonalisation: Newton-Schulz coefficients",
       names_of<NsKind>()},
      {"ns_steps", KeyKind::kInteger, d.ns_steps, "Newton-Schulz iterations; polar_express takes 5", {},
       [](const KeyValue& v, const ModelConfig&) -> std::string {
         const int64_t n = std::get<int64_t>(v);
         return n >= 1 && n <= kMaxNsSteps
                    ? ""
                    : fmt::format("must be in [1, {}] (each step costs three products per matrix and update; "
                                  "5 is the usual count)", kMaxNsSteps);
       }},
      {"ns_dtype", KeyKind::kName, std::string(choice_name(d.ns_dtype)), "precision of the Newton-Schulz products",
       names_of<NsDtype>()},
      {"adjust_lr", KeyKind::kName, std::string(choice_name(d.adjust_lr)),
       "per-shape rate factor: sqrt(max(1,A/B)) or 0.2 sqrt(max(A,B))", names_of<AdjustLr>()},
      {"cautious_wd", KeyKind::kBoolean, d.cautious_wd, "decay only entries whose update and weight agree in sign"},
  };
}

void check_muon_keys(const OwnedValues& k, const KeyOwner::Problem& add) {
  const auto n = k.integer("muon.ns_steps");
  if (k.name("muon.ns") == choice_name(NsKind::kPolarExpress) && n != 5)
    add("muon.ns_steps", fmt::format("{}: polar_express has coefficients for exactly 5 steps", n));
}

Muon::Muon(std::vector<RatedParam> params, const MuonSettings& s) : params_(std::move(params)), s_(s) {
  for (const auto& p : params_) {
    TORCH_CHECK(p.tensor.dim() == 2, "Muon updates matrices; ", p.name, " has ", p.tensor.dim(), " dimensions");
    momentum_.push_back(torch::zeros_like(p.tensor));
  }
}

void Muon::step(const ScheduledRate& rate, double grad_scale) {
  torch::NoGradGuard ng;
  const double f = rate.f;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& W = params_[i].tensor;
    if (!W.grad().defined()) continue;
    const double eta = s_.lr * f * params_[i].lr_mult, decay = eta * params_[i].weight_decay;
    const auto G = grad_scale != 1.0 ? W.grad() * grad_scale : W.grad();
    auto& M = momentum_[i];
    M.lerp_(G, 1.0 - s_.momentum);                           // M <- mu M + (1 - mu) G
    const auto U = s_.nesterov ? G.lerp(M, s_.momentum) : M;  // (1 - mu) G + mu M
    auto O = newton_schulz(U, s_.ns, s_.ns_steps, s_.ns_dtype);
    shape_update(i, O);
    const double step = eta * muon_lr_adjust(s_.adjust_lr, W.size(0), W.size(1));
    if (decay != 0) {
      if (s_.cautious_wd) {
        W.sub_(W * (O * W >= 0).to(W.scalar_type()), decay);
      } else {
        W.mul_(1.0 - decay);
      }
    }
    W.add_(O, -step);
  }
}

NamedTensors Muon::state() const {
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i) out.emplace_back(params_[i].name + ".muon_momentum", momentum_[i]);
  return out;
}

void Muon::load_state(const NamedTensors& state, int64_t) {
  restore_state(state, params_.size(), [&](size_t i) { return params_[i].name + ".muon_momentum"; },
                [&](size_t i) -> torch::Tensor& { return momentum_[i]; });
}

OptimizerEntry muon_optimizer() {
  OptimizerEntry e;
  e.name = "muon";
  e.summary = "Muon for role matrix (optim.muon.lr), AdamW for every other role";
  e.section = "muon";
  e.keys = muon_keys();
  e.together = check_muon_keys;
  e.width_aware_matrices = true;
  e.make = [](std::vector<RatedParam> params, const OptimConfig& o) {
    const MuonSettings s = MuonSettings::from(o);
    return matrices_by(std::move(params), o, [&](std::vector<RatedParam> m) { return std::make_unique<Muon>(std::move(m), s); });
  };
  return e;
}

}  // namespace normlab
