#include "train/muon.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "core/errors.h"

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

std::atomic<bool> g_bf16_gemm_allowed{true};

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

void set_ns_bf16_gemm_allowed(bool allowed) { g_bf16_gemm_allowed = allowed; }

bool ns_uses_bf16_gemm(int64_t A, int64_t B, const torch::Device& device) {
  const int64_t m = std::min(A, B), n = std::max(A, B);
  return g_bf16_gemm_allowed.load() && bf16_gemm_rounds_once(GemmForm::kMmTransposed, m, n, m, device) &&
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

Muon::Muon(std::vector<std::pair<std::string, torch::Tensor>> params, const OptimConfig& o)
    : params_(std::move(params)), o_(o) {
  for (const auto& [name, p] : params_) {
    TORCH_CHECK(p.dim() == 2, "Muon updates matrices; ", name, " has ", p.dim(), " dimensions");
    momentum_.push_back(torch::zeros_like(p));
    if (o_.type == OptimType::kNormuon) row_v_.push_back(torch::zeros({p.size(0), 1}, p.options()));
  }
}

void Muon::step(double f, double grad_scale) {
  torch::NoGradGuard ng;
  const MuonConfig& mu = o_.muon;
  const double eta = mu.lr * f, decay = eta * o_.weight_decay;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& W = params_[i].second;
    if (!W.grad().defined()) continue;
    const auto G = grad_scale != 1.0 ? W.grad() * grad_scale : W.grad();
    auto& M = momentum_[i];
    M.lerp_(G, 1.0 - mu.momentum);                          // M <- mu M + (1 - mu) G
    const auto U = mu.nesterov ? G.lerp(M, mu.momentum) : M;  // (1 - mu) G + mu M
    auto O = newton_schulz(U, mu.ns, mu.ns_steps, mu.ns_dtype);
    if (o_.type == OptimType::kNormuon) {
      auto& V = row_v_[i];
      const auto norm_before = O.norm();
      V.lerp_((O * O).mean(-1, /*keepdim=*/true), 1.0 - mu.beta2);
      O.mul_(1.0 / (V.sqrt() + 1e-10));
      O.mul_(norm_before / (O.norm() + 1e-10));
    }
    const double step = eta * muon_lr_adjust(mu.adjust_lr, W.size(0), W.size(1));
    if (decay != 0) {
      if (mu.cautious_wd) {
        W.sub_(W * (O * W >= 0).to(W.scalar_type()), decay);
      } else {
        W.mul_(1.0 - decay);
      }
    }
    W.add_(O, -step);
  }
}

std::vector<std::pair<std::string, torch::Tensor>> Muon::state() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back(params_[i].first + ".muon_momentum", momentum_[i]);
    if (!row_v_.empty()) out.emplace_back(params_[i].first + ".normuon_v", row_v_[i]);
  }
  return out;
}

void Muon::load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  torch::NoGradGuard ng;
  auto restore = [&](const std::string& key, torch::Tensor& dst) {
    auto it = by_name.find(key);
    if (it == by_name.end()) throw RuntimeFailure("optimizer state lacks " + key);
    if (!it->second.sizes().equals(dst.sizes())) throw RuntimeFailure("optimizer state " + key + " has the wrong shape");
    dst.copy_(it->second);
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    restore(params_[i].first + ".muon_momentum", momentum_[i]);
    if (!row_v_.empty()) restore(params_[i].first + ".normuon_v", row_v_[i]);
  }
}

}  // namespace normlab
