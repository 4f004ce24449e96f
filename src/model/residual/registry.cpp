// The residual-stream registry: one line per method. Validation, `normlab keys` and the
// parameterised tests iterate this table.
#include "model/residual/residual.h"

#include "core/registry.h"
#include "model/transformer.h"

namespace normlab {

ResidualType add_residual();
ResidualType hc_residual();
ResidualType mhc_residual();
ResidualType attnres_residual();

const std::vector<ResidualType>& residual_registry() {
  static const std::vector<ResidualType> table = {add_residual(), hc_residual(), mhc_residual(), attnres_residual()};
  return table;
}

const ResidualType* find_residual(const std::string& name) { return find_by_name(residual_registry(), name); }

std::string residual_names() { return names_of(residual_registry()); }

void register_per_sublayer(TransformerImpl& model, const std::string& name,
                           const std::function<std::shared_ptr<torch::nn::Module>(int64_t i, int k)>& make) {
  for (int64_t i = 0; i < model.n_blocks(); ++i) {
    for (int k = 1; k <= 2; ++k) model.block(i)->register_module(name + std::to_string(k), make(i, k));
  }
}

void TermStream::block(int64_t i, BlockImpl& b) {
  sublayer(2 * i, [&](const torch::Tensor& z) { return b.term(1, z); });
  sublayer(2 * i + 1, [&](const torch::Tensor& z) { return b.term(2, z); });
}

void add_residual_gain(LayerSeries& stats, const torch::Tensor& P) {
  torch::NoGradGuard ng;
  auto a = P.detach().to(torch::kFloat).abs();           // (B, T, n, n)
  stats.add("res_gain_fwd", a.sum(-1).amax(-1).mean());  // max row sum
  stats.add("res_gain_bwd", a.sum(-2).amax(-1).mean());  // max column sum
}

}  // namespace normlab
