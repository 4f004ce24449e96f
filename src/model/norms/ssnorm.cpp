// Single-Scale RMSNorm (OSP, "Outlier-Safe Pre-training", 2025; torchtitan has it):
//   y = weight * x / sqrt(mean(x^2) + eps),  one scalar weight[1] = 1, default eps 1e-6.
// RMSNorm with its per-channel gain replaced by one scalar: there is no channel-wise gain for
// outlier features to hide in, which is OSP's point. Composed LibTorch ops on every device.
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
  return {"ssnorm", 1e-6, "weight*x/sqrt(mean(x^2) + eps), weight one scalar",
          [](const NormOptions& o) { return std::make_shared<SingleScaleRMSNormImpl>(o); }};
}
}  // namespace normlab
