// The residual-stream registry: one line per method. Validation, `normlab keys` and the
// parameterised tests iterate this table.
#include "model/residual/residual.h"

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

const ResidualType* find_residual(const std::string& name) {
  for (const auto& t : residual_registry()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string residual_names() {
  std::string out;
  for (const auto& t : residual_registry()) out += (out.empty() ? "" : ", ") + t.name;
  return out;
}

void ResidualStream::block(int64_t i, BlockImpl& b) {
  sublayer(2 * i, [&](const torch::Tensor& z) { return b.term(1, z); });
  sublayer(2 * i + 1, [&](const torch::Tensor& z) { return b.term(2, z); });
}

namespace {
// w[..., k] of a per-position (B, T, k) or shared (k) weight, shaped to multiply a (B, T, d) stream.
std::vector<torch::Tensor> factors(const torch::Tensor& w) {
  auto parts = w.unbind(-1);  // unbind's backward is one stack, not a zero-filled tensor per part
  if (w.dim() > 1) {
    for (auto& p : parts) p = p.unsqueeze(-1);
  }
  return parts;
}
}  // namespace

Streams mix_streams(const torch::Tensor& W, const Streams& X) {
  const size_t n = X.size();
  std::vector<std::vector<torch::Tensor>> w;  // w[j][c]
  for (const auto& row : W.unbind(-2)) w.push_back(factors(row));
  const size_t m = w.at(0).size();
  Streams Y(m);
  for (size_t c = 0; c < m; ++c) {
    Y[c] = X[0] * w[0][c];
    for (size_t j = 1; j < n; ++j) Y[c] = Y[c].addcmul(X[j], w[j][c]);
  }
  return Y;
}

torch::Tensor weighted_sum(const torch::Tensor& w, const Streams& X) {
  const auto f = factors(w);
  auto y = X[0] * f[0];
  for (size_t j = 1; j < X.size(); ++j) y = y.addcmul(X[j], f[j]);
  return y;
}

torch::Tensor concat_streams(const Streams& X) { return torch::cat(X, -1); }

void add_residual_gain(LayerSeries& stats, const torch::Tensor& P) {
  torch::NoGradGuard ng;
  auto a = P.detach().to(torch::kFloat).abs();           // (B, T, n, n)
  stats.add("res_gain_fwd", a.sum(-1).amax(-1).mean());  // max row sum
  stats.add("res_gain_bwd", a.sum(-2).amax(-1).mean());  // max column sum
}

}  // namespace normlab
