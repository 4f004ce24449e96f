// BatchNorm over the channel (last) dimension (Ioffe & Szegedy 2015), as used in PowerNorm-style
// Transformer ablations. Training: per-channel mean and biased variance over all B*T positions;
// eval: running statistics. running_mean/var are updated with momentum 0.1 using the unbiased
// variance (PyTorch's convention). y = (x - mu) / sqrt(var + eps) * weight + bias.
// In a causal LM the training statistics see later tokens of the batch: a real leak that users
// study, announced once at start-up by the trainer (see README).
#include <cmath>

#include "model/norms/norm.h"

namespace normlab {
namespace {
constexpr double kMomentum = 0.1;

class BatchNormImpl : public NormImpl {
 public:
  explicit BatchNormImpl(const NormOptions& o) : eps_(o.eps) {
    weight_ = register_parameter("weight", torch::ones({o.size}));
    bias_ = register_parameter("bias", torch::zeros({o.size}));
    running_mean_ = register_buffer("running_mean", torch::zeros({o.size}));
    running_var_ = register_buffer("running_var", torch::ones({o.size}));
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    auto xf = compute_dtype(x);
    const auto dt = xf.scalar_type();
    torch::Tensor mean, var;
    if (is_training()) {
      auto flat = xf.reshape({-1, xf.size(-1)});
      mean = flat.mean(0);
      var = flat.var(0, /*unbiased=*/false);
      const int64_t count = flat.size(0);
      torch::NoGradGuard no_grad;
      const double correction = count > 1 ? static_cast<double>(count) / (count - 1) : 1.0;
      running_mean_.mul_(1 - kMomentum).add_(mean.detach().to(running_mean_.scalar_type()), kMomentum);
      running_var_.mul_(1 - kMomentum)
          .add_(var.detach().to(running_var_.scalar_type()) * correction, kMomentum);
    } else {
      mean = running_mean_.to(dt);
      var = running_var_.to(dt);
    }
    auto y = (xf - mean) * torch::rsqrt(var + eps_) * weight_.to(dt) + bias_.to(dt);
    return y.to(x.scalar_type());
  }

 private:
  double eps_;
  torch::Tensor weight_, bias_, running_mean_, running_var_;
};
}  // namespace

NormType batchnorm_norm() {
  NormType t{"batchnorm", 1e-5, "(x - mu_batch)/sqrt(var_batch + eps)*weight + bias",
             [](const NormOptions& o) { return std::make_shared<BatchNormImpl>(o); }};
  t.reference = [](const double* x, double* y, int64_t rows, int64_t n, const NormTensors& p, double eps) {
    for (int64_t j = 0; j < n; ++j) {  // statistics of channel j over every row (batch statistics)
      double mean = 0, var = 0;
      for (int64_t i = 0; i < rows; ++i) mean += x[i * n + j] / rows;
      for (int64_t i = 0; i < rows; ++i) var += (x[i * n + j] - mean) * (x[i * n + j] - mean) / rows;
      for (int64_t i = 0; i < rows; ++i) {
        y[i * n + j] = (x[i * n + j] - mean) / std::sqrt(var + eps) * element(p, "weight", j) + element(p, "bias", j);
      }
    }
  };
  t.tensors = {{"weight", true, 1},
               {"bias", true, 0},
               {"running_mean", true, 0, {}, /*buffer=*/true},
               {"running_var", true, 1, {}, /*buffer=*/true}};
  t.batch_statistics = true;
  return t;
}
}  // namespace normlab
