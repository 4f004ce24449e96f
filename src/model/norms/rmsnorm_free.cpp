// RMSNorm without a gain: y = x / sqrt(mean(x^2) + eps), default eps 1e-6, no parameters.
// Llama 4 normalises queries and keys this way, and modded-nanogpt uses it for every norm (QK-norm
// included): with no gain, the norm cannot learn to re-inflate what it normalised.
// Composed LibTorch ops on every device (no hand-written kernel: nothing to fuse with a weight).
#include <cmath>

#include "model/norms/norm.h"

namespace normlab {
namespace {
class RMSNormFreeImpl : public NormImpl {
 public:
  explicit RMSNormFreeImpl(const NormOptions& o) : eps_(o.eps) {}
  torch::Tensor forward(const torch::Tensor& x) override {
    auto xf = compute_dtype(x);
    auto y = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps_);
    return y.to(x.scalar_type());
  }

 private:
  double eps_;
};
}  // namespace

NormType rmsnorm_free_norm() {
  NormType t{"rmsnorm_free", 1e-6, "x/sqrt(mean(x^2) + eps)",
             [](const NormOptions& o) { return std::make_shared<RMSNormFreeImpl>(o); }};
  t.reference = [](const double* x, double* y, int64_t rows, int64_t n, const NormTensors&, double eps) {
    for (int64_t i = 0; i < rows; ++i) {
      const double* r = x + i * n;
      double ms = 0;
      for (int64_t j = 0; j < n; ++j) ms += r[j] * r[j] / n;
      for (int64_t j = 0; j < n; ++j) y[i * n + j] = r[j] / std::sqrt(ms + eps);
    }
  };
  return t;  // no tensors
}
}  // namespace normlab
