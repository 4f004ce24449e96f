#include "metrics/probe.h"

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
