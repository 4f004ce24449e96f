// ScaleNorm (Nguyen & Salazar 2019): y = weight * x / max(||x||_2, eps), one scalar weight[1]
// initialised to sqrt(n) so that the output starts with unit RMS. Default eps 1e-5.
#include <algorithm>
#include <cmath>

#include "model/norms/norm.h"

namespace normlab {
namespace {
class ScaleNormImpl : public NormImpl {
 public:
  explicit ScaleNormImpl(const NormOptions& o) : eps_(o.eps) {
    weight_ = register_parameter("weight", torch::full({1}, std::sqrt(static_cast<double>(o.size))));
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    auto xf = compute_dtype(x);
    auto y = xf / xf.norm(2, {-1}, /*keepdim=*/true).clamp_min(eps_) * weight_.to(xf.scalar_type());
    return y.to(x.scalar_type());
  }

 private:
  double eps_;
  torch::Tensor weight_;
};
}  // namespace

NormType scalenorm_norm() {
  NormType t{"scalenorm", 1e-5, "weight*x/max(||x||, eps)",
             [](const NormOptions& o) { return std::make_shared<ScaleNormImpl>(o); }};
  t.reference = [](const double* x, double* y, int64_t rows, int64_t n, const NormTensors& p, double eps) {
    for (int64_t i = 0; i < rows; ++i) {
      const double* r = x + i * n;
      double sq = 0;
      for (int64_t j = 0; j < n; ++j) sq += r[j] * r[j];
      for (int64_t j = 0; j < n; ++j) y[i * n + j] = element(p, "weight", 0) * r[j] / std::max(std::sqrt(sq), eps);
    }
  };
  t.tensors = {{"weight", false, 0, [](const NormOptions& o) { return std::sqrt(static_cast<double>(o.size)); }}};
  return t;
}
}  // namespace normlab
