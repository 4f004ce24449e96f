#include "metrics/grad_stats.h"

#include <cmath>

#include "core/torch_compat.h"

namespace normlab {

// Group rows: 0 total, 1..L block, L+1..2L attn, 2L+1..3L ffn, 3L+1..4L norms, 4L+1 embed, 4L+2 head.
GradStats::GradStats(const std::vector<std::string>& names, int64_t L) : L_(L) {
  const int64_t P = static_cast<int64_t>(names.size());
  membership_ = torch::zeros({4 * L + 3, P}, torch::kFloat);
  auto m = membership_.accessor<float, 2>();
  for (int64_t j = 0; j < P; ++j) {
    const std::string& n = names[j];
    m[0][j] = 1;
    if (n.rfind("blocks.", 0) == 0) {
      const size_t dot = n.find('.', 7);
      const int64_t i = std::stoll(n.substr(7, dot - 7));
      const std::string rest = n.substr(dot + 1);
      m[1 + i][j] = 1;
      if (rest.rfind("attn.", 0) == 0) {
        m[1 + L + i][j] = 1;
      } else if (rest.rfind("ffn.", 0) == 0) {
        m[1 + 2 * L + i][j] = 1;
      } else {
        m[1 + 3 * L + i][j] = 1;  // norm slots and residual scales
      }
    } else if (n.rfind("tok_emb.", 0) == 0 || n.rfind("pos_emb.", 0) == 0 || n.rfind("embed_norm.", 0) == 0) {
      m[1 + 4 * L][j] = 1;
    } else {
      m[2 + 4 * L][j] = 1;  // final_norm, lm_head
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
  g.embed = p[1 + 4 * L_];
  g.head = p[2 + 4 * L_];
  return g;
}

}  // namespace normlab
