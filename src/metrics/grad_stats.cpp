#include "metrics/grad_stats.h"

#include <cmath>

#include "core/torch_compat.h"

namespace normlab {

// Group rows: 0 total, 1..L block, L+1..2L attn, 2L+1..3L ffn, 3L+1..4L norms, 4L+1..5L mixing,
// 5L+1 embed, 5L+2 head.
GradStats::GradStats(const std::vector<ParamPlace>& places, int64_t L) : L_(L) {
  using Part = ParamPlace::Part;
  const int64_t P = static_cast<int64_t>(places.size());
  membership_ = torch::zeros({5 * L + 3, P}, torch::kFloat);
  auto m = membership_.accessor<float, 2>();
  for (int64_t j = 0; j < P; ++j) {
    const ParamPlace& at = places[static_cast<size_t>(j)];
    m[0][j] = 1;
    if (at.block >= 0) {
      TORCH_CHECK(at.block < L, "GradStats: block ", at.block, " of ", L);
      const int64_t i = at.block;
      m[1 + i][j] = 1;
      const int64_t part = at.part == Part::kAttn ? 1 : at.part == Part::kFfn ? 2 : at.part == Part::kMixing ? 4 : 3;
      m[1 + part * L + i][j] = 1;
      has_mixing_ = has_mixing_ || at.part == Part::kMixing;
    } else {
      m[at.part == Part::kEmbed ? 1 + 5 * L : 2 + 5 * L][j] = 1;
    }
  }
}

torch::Tensor GradStats::squared_per_tensor(const std::vector<torch::Tensor>& params) {
  if (!params.empty() && params.front().is_cuda()) {
    // one multi-tensor kernel instead of a reduction launch per tensor (LibTorch 2.x)
    std::vector<torch::Tensor> grads;
    for (const auto& p : params) {
      if (!p.grad().defined()) break;
      grads.push_back(p.grad().detach());
    }
    if (grads.size() == params.size()) {
      auto sq = foreach_squared_norms(grads);
      if (sq.defined()) return sq;
    }
  }
  std::vector<torch::Tensor> sq;
  sq.reserve(params.size());
  for (const auto& p : params) {
    const auto& g = p.grad();
    sq.push_back(g.defined() ? g.detach().to(torch::kFloat).pow(2).sum() : torch::zeros({}, p.options().dtype(torch::kFloat)));
  }
  return torch::stack(sq);
}

torch::Tensor GradStats::groups(const torch::Tensor& v) const {
  if (membership_.device() != v.device()) membership_ = membership_.to(v.device());
  return torch::mv(membership_, v);
}

GradNorms GradStats::unpack(const torch::Tensor& squared) const {
  auto h = squared.to(torch::kCPU, torch::kDouble).contiguous();
  return unpack(std::vector<double>(h.data_ptr<double>(), h.data_ptr<double>() + h.numel()));
}

GradNorms GradStats::unpack(const std::vector<double>& squared) const {
  std::vector<double> n(squared.size());
  for (size_t i = 0; i < n.size(); ++i) n[i] = std::sqrt(squared[i]);
  const double* p = n.data();
  GradNorms g;
  g.total = p[0];
  g.block.assign(p + 1, p + 1 + L_);
  g.attn.assign(p + 1 + L_, p + 1 + 2 * L_);
  g.ffn.assign(p + 1 + 2 * L_, p + 1 + 3 * L_);
  g.norms.assign(p + 1 + 3 * L_, p + 1 + 4 * L_);
  g.mixing.assign(p + 1 + 4 * L_, p + 1 + 5 * L_);
  g.has_mixing = has_mixing_;
  g.embed = p[1 + 5 * L_];
  g.head = p[2 + 5 * L_];
  return g;
}

}  // namespace normlab
