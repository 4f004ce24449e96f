// Single-Scale RMSNorm (OSP, "Outlier-Safe Pre-training", 2025; torchtitan has it):
//   y = weight * x / sqrt(mean(x^2) + eps),  one scalar weight[1] = 1, default eps 1e-6.
// RMSNorm with its per-channel gain replaced by one scalar: there is no channel-wise gain for
// outlier features to hide in, which is OSP's point. Composed LibTorch ops on every device.
#include <cmath>

#include "model/norms/norm.h"

namespace normlab {
namespace {
class SingleScaleRMSNormImpl : public NormImpl {
 public:
  explicit SingleScaleRMSNormImpl(const NormOptions& o) : eps_(o.eps) {
    weight_ = register_parameter("weight", torch::ones({1}));
  }
  // x: (..., n) -> (..., n), same dtype as x.
  torch::Tensor forward(const torch::Tensor& x) override {
    auto xf = compute_dtype(x);
    auto y = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps_) * weight_.to(xf.scalar_type());
    return y.to(x.scalar_type());
  }

 private:
  double eps_;
  torch::Tensor weight_;
};
}  // namespace

NormType ssnorm_norm() {
  NormType t{"ssnorm", 1e-6, "weight*x/sqrt(mean(x^2) + eps), weight one scalar",
             [](const NormOptions& o) { return std::make_shared<SingleScaleRMSNormImpl>(o); }};
  t.reference = [](const double* x, double* y, int64_t rows, int64_t n, const NormTensors& p, double eps) {
    for (int64_t i = 0; i < rows; ++i) {
      const double* r = x + i * n;
      double ms = 0;
      for (int64_t j = 0; j < n; ++j) ms += r[j] * r[j] / n;
      for (int64_t j = 0; j < n; ++j) y[i * n + j] = element(p, "weight", 0) * r[j] / std::sqrt(ms + eps);
    }
  };
  t.tensors = {{"weight", false, 1}};
  return t;
}
}  // namespace normlab
