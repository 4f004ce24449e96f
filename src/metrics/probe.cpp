#include "metrics/probe.h"

#include <array>

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

UpdateProbe::WeightStats UpdateProbe::weight_stats(const std::vector<torch::Tensor>& params,
                                                   const std::vector<int64_t>& block, int64_t L) const {
  torch::NoGradGuard ng;
  // Per block, as 0-dim double tensors on the weights' device (read with the other statistics in
  // the step's one transfer): sums over its matrices, and the largest sigma.
  enum { kSumSq, kCount, kSpecMax, kStableRankSum, kMatrices, kDotUpdateBefore, kUpdateSq, kBeforeSq, kN };
  std::vector<std::array<torch::Tensor, kN>> acc(static_cast<size_t>(L));
  for (size_t k = 0; k < params.size(); ++k) {
    const int64_t i = block.at(k);
    if (i < 0) continue;
    const auto w = params[k].detach().to(torch::kDouble), w0 = before_.at(k).to(torch::kDouble), dw = w - w0;
    const auto f2 = w.pow(2).sum(), s = spectral_norm(w);
    const std::array<torch::Tensor, kN> parts = {f2, torch::full_like(f2, static_cast<double>(w.numel())), s,
                                                 f2 / s.pow(2).clamp_min(1e-300), torch::ones_like(f2),
                                                 (dw * w0).sum(), dw.pow(2).sum(), w0.pow(2).sum()};
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
