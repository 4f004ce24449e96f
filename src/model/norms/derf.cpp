// Derf (2025, DyT's successor): y = weight * erf(alpha * x + shift) + bias, alpha a learnable
// scalar (init model.norm.derf_alpha = 0.5), shift a learnable scalar (init 0), weight[n]=1,
// bias[n]=0 (always present, as for dyt). Point-wise like DyT: no statistics over the vector, so
// not scale invariant; erf saturates faster than tanh and is steeper at 0 (2/sqrt(pi) vs 1).
#include <cmath>
#include <limits>

#include "model/norms/norm.h"

namespace normlab {
namespace {
class DerfImpl : public NormImpl {
 public:
  explicit DerfImpl(const NormOptions& o) {
    alpha_ = register_parameter("alpha", torch::full({1}, o.keys.number("norm.derf_alpha")));
    shift_ = register_parameter("shift", torch::zeros({1}));
    weight_ = register_parameter("weight", torch::ones({o.size}));
    bias_ = register_parameter("bias", torch::zeros({o.size}));
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    auto xf = compute_dtype(x);
    const auto dt = xf.scalar_type();
    auto y = torch::erf(alpha_.to(dt) * xf + shift_.to(dt)) * weight_.to(dt) + bias_.to(dt);
    return y.to(x.scalar_type());
  }

 private:
  torch::Tensor alpha_, shift_, weight_, bias_;
};
}  // namespace

NormType derf_norm() {
  NormType t{"derf", std::numeric_limits<double>::quiet_NaN(), "weight*erf(alpha*x + shift) + bias",
             [](const NormOptions& o) { return std::make_shared<DerfImpl>(o); }};
  t.reference = [](const double* x, double* y, int64_t rows, int64_t n, const NormTensors& p, double) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        y[i * n + j] = element(p, "weight", j) * std::erf(element(p, "alpha", 0) * x[i * n + j] + element(p, "shift", 0)) +
                       element(p, "bias", j);
      }
    }
  };
  t.tensors = {{"alpha", false, 0, [](const NormOptions& o) { return o.keys.number("norm.derf_alpha"); }},
               {"shift", false, 0},
               {"weight", true, 1},
               {"bias", true, 0}};
  t.keys = {{"derf_alpha", KeyKind::kNumber, 0.5, "initial alpha of derf", {}, check_positive}};
  return t;
}
}  // namespace normlab
