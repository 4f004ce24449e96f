#include "metrics/probe.h"

#include "metrics/lanczos_kernel.h"

#include <algorithm>
#include <cmath>
#include <array>
#include <map>

namespace normlab {

const std::vector<double>& Diagnostics::layer(const std::string& name) const {
  static const std::vector<double> none;
  for (const auto& [n, v] : layers) {
    if (n == name) return v;
  }
  return none;
}

void UpdateProbe::before(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard ng;
  before_.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    if (!before_[i].defined() || !before_[i].sizes().equals(params[i].sizes())) {
      before_[i] = params[i].detach().clone();
    } else {
      before_[i].copy_(params[i].detach());
    }
  }
}

torch::Tensor UpdateProbe::update_ratio(const std::vector<torch::Tensor>& params, const GradStats& groups, int64_t L) {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> dw2, w2;
  for (size_t i = 0; i < params.size(); ++i) {
    dw2.push_back((params[i].detach() - before_[i]).to(torch::kFloat).pow(2).sum());
    w2.push_back(before_[i].to(torch::kFloat).pow(2).sum());
  }
  auto d = groups.groups(torch::stack(dw2)).narrow(0, 1, L);
  auto w = groups.groups(torch::stack(w2)).narrow(0, 1, L);
  return (d / w.clamp_min(1e-30)).sqrt();
}

torch::Tensor spectral_norm(const torch::Tensor& W) {
  torch::NoGradGuard ng;
  const auto w = W.detach().to(torch::kDouble);
  const auto gram = w.size(0) <= w.size(1) ? torch::mm(w, w.t()) : torch::mm(w.t(), w);
  return torch::linalg_eigvalsh(gram).max().clamp_min(0).sqrt();
}

namespace {
// A fixed start vector with no structure (a hash of the index), unit length.
torch::Tensor start_vector(int64_t n, const torch::TensorOptions& o) {
  auto q = torch::arange(n, o).mul(12.9898).sin().mul(43758.5453).frac().sub(0.5);
  return q / q.norm();
}

// The Lanczos tridiagonal of each Gram G (m, n, n) from q0, K steps, in LibTorch ops (any device):
// alpha (m, K), beta (m, K - 1), double. The reference of lanczos_kernel.h.
std::pair<torch::Tensor, torch::Tensor> lanczos_composed(const torch::Tensor& G, int64_t K, const torch::Tensor& q0) {
  const int64_t m = G.size(0), n = G.size(1);
  std::vector<torch::Tensor> Q{q0.view({1, n, 1}).expand({m, n, 1}).contiguous()}, alpha, beta;
  for (int64_t j = 0; j < K; ++j) {
    auto w = torch::bmm(G, Q.back());
    alpha.push_back((w * Q.back()).sum({1, 2}, false, torch::kDouble));
    const auto basis = torch::cat(Q, 2);  // (m, n, j + 1): full reorthogonalisation, twice
    for (int pass = 0; pass < 2; ++pass) w = w - torch::bmm(basis, torch::bmm(basis.transpose(1, 2), w));
    if (j + 1 == K) break;
    const auto b = w.to(torch::kDouble).norm(2, {1, 2});
    beta.push_back(b);
    Q.push_back(w / b.clamp_min(1e-30).to(w.scalar_type()).view({m, 1, 1}));
  }
  return {torch::stack(alpha, 1), beta.empty() ? torch::zeros({m, 0}, alpha[0].options()) : torch::stack(beta, 1)};
}

// The same by lanczos_kernel.h: float32 CPU Grams.
std::pair<torch::Tensor, torch::Tensor> lanczos_cpu(const torch::Tensor& G, int64_t K, const torch::Tensor& q0) {
  const int64_t m = G.size(0), n = G.size(1);
  const auto g = G.contiguous(), q = q0.contiguous();
  auto alpha = torch::empty({m, K}, torch::kDouble), beta = torch::zeros({m, std::max<int64_t>(K - 1, 1)}, torch::kDouble);
  lanczos_kernel::tridiagonal(g.data_ptr<float>(), m, n, K, q.data_ptr<float>(), alpha.data_ptr<double>(),
                              beta.data_ptr<double>());
  return {alpha, beta.narrow(1, 0, K - 1)};
}
}  // namespace

std::vector<torch::Tensor> spectral_norms(const std::vector<torch::Tensor>& matrices, int64_t steps, bool allow_fast) {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> out(matrices.size());
  std::map<int64_t, std::vector<size_t>> by_size;  // Gram size -> the matrices with it
  for (size_t k = 0; k < matrices.size(); ++k) by_size[std::min(matrices[k].size(0), matrices[k].size(1))].push_back(k);
  for (const auto& [n, ks] : by_size) {
    std::vector<torch::Tensor> grams;
    for (size_t k : ks) {
      const auto w = matrices[k].detach().to(torch::kFloat);
      grams.push_back(w.size(0) <= w.size(1) ? torch::mm(w, w.t()) : torch::mm(w.t(), w));
    }
    const auto G = torch::stack(grams);  // (m, n, n)
    const int64_t m = G.size(0), K = std::min(n, steps);
    const auto q0 = start_vector(n, G.options());
    const auto [alpha, beta] = allow_fast && G.device().is_cpu() ? lanczos_cpu(G, K, q0) : lanczos_composed(G, K, q0);
    auto T = torch::diag_embed(alpha.to(torch::kCPU));  // (m, K, K)
    if (K > 1) {
      const auto off = torch::diag_embed(beta.to(torch::kCPU), 1);
      T = T + off + off.transpose(1, 2);
    }
    // A non-finite Gram (weights that blew up) gives NaN, as the other statistics; LAPACK would
    // refuse the matrix.
    const auto bad = torch::logical_not(torch::isfinite(T).flatten(1).all(1));  // (m)
    T = torch::where(bad.view({m, 1, 1}), torch::zeros_like(T), T);
    auto sigma = torch::linalg_eigvalsh(T).select(1, K - 1).clamp_min(0).sqrt();
    sigma = torch::where(bad, torch::full_like(sigma, std::nan("")), sigma).to(G.device());  // (m)
    for (size_t i = 0; i < ks.size(); ++i) out[ks[i]] = sigma[static_cast<int64_t>(i)];
  }
  return out;
}

UpdateProbe::WeightStats UpdateProbe::weight_stats(const std::vector<torch::Tensor>& params,
                                                   const std::vector<int64_t>& block, int64_t L) const {
  torch::NoGradGuard ng;
  // Per block, as 0-dim double tensors on the weights' device (read with the other statistics in
  // the step's one transfer): sums over its matrices, and the largest sigma.
  enum { kSumSq, kCount, kSpecMax, kStableRankSum, kMatrices, kDotUpdateBefore, kUpdateSq, kBeforeSq, kN };
  std::vector<std::array<torch::Tensor, kN>> acc(static_cast<size_t>(L));
  std::vector<torch::Tensor> matrices;
  for (size_t k = 0; k < params.size(); ++k) {
    if (block.at(k) >= 0) matrices.push_back(params[k]);
  }
  const std::vector<torch::Tensor> sigmas = spectral_norms(matrices);
  size_t next = 0;
  for (size_t k = 0; k < params.size(); ++k) {
    const int64_t i = block.at(k);
    if (i < 0) continue;
    // Sums of squares and products in the weights' precision, accumulated in double.
    const auto w = params[k].detach(), w0 = before_.at(k), dw = w - w0;
    const auto f2 = w.square().sum(torch::kDouble), s = sigmas[next++];
    const std::array<torch::Tensor, kN> parts = {f2, torch::full_like(f2, static_cast<double>(w.numel())), s,
                                                 f2 / s.pow(2).clamp_min(1e-300), torch::ones_like(f2),
                                                 (dw * w0).sum(torch::kDouble), dw.square().sum(torch::kDouble),
                                                 w0.square().sum(torch::kDouble)};
    for (size_t j = 0; j < kN; ++j) {
      auto& a = acc[static_cast<size_t>(i)][j];
      a = !a.defined() ? parts[j] : j == kSpecMax ? torch::maximum(a, parts[j]) : a + parts[j];
    }
  }
  const auto dev = torch::TensorOptions().dtype(torch::kDouble).device(params.empty() ? torch::kCPU : params[0].device());
  auto col = [&](size_t j) {  // one quantity over the blocks; a block without matrices reads 0
    std::vector<torch::Tensor> v;
    for (const auto& a : acc) v.push_back(a[j].defined() ? a[j] : torch::zeros({}, dev));
    return torch::stack(v);
  };
  WeightStats out;
  out.rms = (col(kSumSq) / col(kCount).clamp_min(1)).sqrt();
  out.spec_max = col(kSpecMax);
  out.stable_rank = col(kStableRankSum) / col(kMatrices).clamp_min(1);
  out.update_cos = col(kDotUpdateBefore) / (col(kUpdateSq).sqrt() * col(kBeforeSq).sqrt()).clamp_min(1e-300);
  return out;
}

size_t Flat::add(const torch::Tensor& t) {
  auto f = t.detach().reshape({-1}).to(torch::kDouble);
  parts_.push_back(f);
  spans_.emplace_back(size_, static_cast<size_t>(f.numel()));
  size_ += static_cast<size_t>(f.numel());
  return spans_.size() - 1;
}

size_t Flat::add(const std::vector<torch::Tensor>& scalars) {
  if (scalars.empty()) return add(torch::zeros({0}, torch::kDouble));
  return add(torch::stack(scalars));
}

void Flat::fetch() {
  if (parts_.empty()) return;
  auto all = torch::cat(parts_).to(torch::kCPU).contiguous();
  host_.assign(all.data_ptr<double>(), all.data_ptr<double>() + all.numel());
}

std::vector<double> Flat::get(size_t slot) const {
  const auto [begin, n] = spans_.at(slot);
  return std::vector<double>(host_.begin() + begin, host_.begin() + begin + n);
}

}  // namespace normlab
