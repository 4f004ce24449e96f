// LayerNorm (Ba et al. 2016): y = (x - mean) / sqrt(var + eps) * weight + bias, var biased.
// weight[n]=1, bias[n]=0 (absent with model.norm.bias: false). Default eps 1e-5.
#include "model/norms/layernorm.h"

namespace normlab {

LayerNormImpl::LayerNormImpl(const NormOptions& o) : size_(o.size), eps_(o.eps) {
  weight_ = register_parameter("weight", torch::ones({o.size}));
  if (o.bias) bias_ = register_parameter("bias", torch::zeros({o.size}));
}

torch::Tensor LayerNormImpl::forward(const torch::Tensor& x) {
  auto xf = compute_dtype(x);
  auto y = torch::layer_norm(xf, {size_}, weight_.to(xf.scalar_type()),
                             bias_.defined() ? bias_.to(xf.scalar_type()) : torch::Tensor(), eps_);
  return y.to(x.scalar_type());
}

}  // namespace normlab
