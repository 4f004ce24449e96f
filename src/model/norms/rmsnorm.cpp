// RMSNorm (Zhang & Sennrich 2019): y = x / sqrt(mean(x^2) + eps) * weight. weight[n]=1, eps 1e-6.
// rmsnorm_1p (Gemma 2/3, Qwen3-Next): the same with (1 + weight), weight[n]=0, so weight decay
// pulls the gain towards 1 instead of 0.
#include "model/norms/rmsnorm.h"

namespace normlab {

RMSNormImpl::RMSNormImpl(const NormOptions& o, bool one_plus) : eps_(o.eps), one_plus_(one_plus) {
  weight_ = register_parameter("weight", one_plus ? torch::zeros({o.size}) : torch::ones({o.size}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  auto xf = compute_dtype(x);
  auto w = weight_.to(xf.scalar_type());
  if (one_plus_) w = w + 1;
  auto y = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps_) * w;
  return y.to(x.scalar_type());
}

}  // namespace normlab
