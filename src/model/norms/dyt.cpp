// Dynamic Tanh (Zhu et al. 2025, "Transformers without Normalization"):
// y = weight * tanh(alpha * x) + bias, alpha a learnable scalar (init model.norm.dyt_alpha = 0.5),
// weight[n]=1, bias[n]=0. Not a normalisation: it saturates instead of rescaling, so it is not
// scale invariant (the norm tests show this).
#include <cmath>
#include <limits>

#include "model/norms/norm.h"

namespace normlab {
namespace {
class DyTImpl : public NormImpl {
 public:
  explicit DyTImpl(const NormOptions& o) {
    alpha_ = register_parameter("alpha", torch::full({1}, o.keys.number("norm.dyt_alpha")));
    weight_ = register_parameter("weight", torch::ones({o.size}));
    bias_ = register_parameter("bias", torch::zeros({o.size}));
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    auto xf = compute_dtype(x);
    const auto dt = xf.scalar_type();
    auto y = torch::tanh(alpha_.to(dt) * xf) * weight_.to(dt) + bias_.to(dt);
    return y.to(x.scalar_type());
  }

 private:
  torch::Tensor alpha_, weight_, bias_;
};
}  // namespace

NormType dyt_norm() {
  NormType t{"dyt", std::numeric_limits<double>::quiet_NaN(), "weight*tanh(alpha*x) + bias",
             [](const NormOptions& o) { return std::make_shared<DyTImpl>(o); }};
  t.reference = [](const double* x, double* y, int64_t rows, int64_t n, const NormTensors& p, double) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        y[i * n + j] = element(p, "weight", j) * std::tanh(element(p, "alpha", 0) * x[i * n + j]) + element(p, "bias", j);
      }
    }
  };
  t.tensors = {{"alpha", false, 0, [](const NormOptions& o) { return o.keys.number("norm.dyt_alpha"); }},
               {"weight", true, 1},
               {"bias", true, 0}};
  t.keys = {{"dyt_alpha", KeyKind::kNumber, 0.5, "initial alpha of dyt", {}, check_positive}};
  return t;
}
}  // namespace normlab
