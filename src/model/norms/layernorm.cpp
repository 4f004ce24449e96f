// LayerNorm; formula and paper in layernorm.h.
#include "model/norms/layernorm.h"

#include <cmath>

#include "model/norms/cpu_kernels.h"

namespace normlab {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Custom autograd function around the row kernels: forward saves x with the per-row mean and
// 1/std, the backward is one pass per row (see cpu_kernels.h for the gradient).
struct LayerNormFunction : public torch::autograd::Function<LayerNormFunction> {
  // bias: (n), or (0) for no bias (autograd functions cannot take undefined tensors).
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias, double eps) {
    const int64_t n = x.size(-1), rows = x.numel() / n;
    TORCH_CHECK(weight.dim() == 1 && weight.size(0) == n, "layernorm: weight of shape ",
                weight.sizes(), " for input of shape ", x.sizes());
    const bool has_bias = bias.numel() > 0;
    TORCH_CHECK(!has_bias || (bias.dim() == 1 && bias.size(0) == n), "layernorm: bias of shape ",
                bias.sizes(), " for input of shape ", x.sizes());
    auto w = weight.to(torch::kFloat).contiguous();
    auto b = has_bias ? bias.to(torch::kFloat).contiguous() : torch::Tensor();
    auto y = torch::empty_like(x);
    auto mean = torch::empty({rows}, x.options());
    auto rstd = torch::empty({rows}, x.options());
    cpu_kernels::layer_norm_forward(
        x.data_ptr<float>(), w.data_ptr<float>(), b.defined() ? b.data_ptr<float>() : nullptr,
        y.data_ptr<float>(), mean.data_ptr<float>(), rstd.data_ptr<float>(), rows, n, eps);
    ctx->save_for_backward({x, weight, mean, rstd});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["has_bias"] = has_bias;
    ctx->saved_data["bias_dtype"] = static_cast<int64_t>(bias.scalar_type());
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& weight = saved[1];
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const auto bias_dtype = static_cast<c10::ScalarType>(ctx->saved_data["bias_dtype"].toInt());
    const int64_t n = x.size(-1), rows = x.numel() / n;
    const auto g = grads[0].contiguous();
    if (torch::GradMode::is_enabled()) {
      // create_graph=true: the kernel's result would carry no history, so compute the same
      // gradient with differentiable ops (rare; only higher-order gradients come here).
      const double eps = ctx->saved_data["eps"].toDouble();
      auto mu = x.mean(-1, /*keepdim=*/true);
      auto r = torch::rsqrt((x - mu).pow(2).mean(-1, /*keepdim=*/true) + eps);
      auto xhat = (x - mu) * r;
      auto h = g * weight.to(x.scalar_type());
      auto dx =
          r * (h - h.mean(-1, /*keepdim=*/true) - xhat * (h * xhat).mean(-1, /*keepdim=*/true));
      auto dw = (g * xhat).reshape({-1, n}).sum(0).to(weight.scalar_type());
      auto db = has_bias ? g.reshape({-1, n}).sum(0).to(bias_dtype) : torch::Tensor();
      return {dx, dw, db, torch::Tensor()};
    }
    auto w = weight.to(torch::kFloat).contiguous();
    auto dx = torch::empty_like(x);
    auto dw = torch::empty({n}, x.options());
    auto db = has_bias ? torch::empty({n}, x.options()) : torch::Tensor();
    cpu_kernels::layer_norm_backward(g.data_ptr<float>(), x.data_ptr<float>(), w.data_ptr<float>(),
                                     saved[2].data_ptr<float>(), saved[3].data_ptr<float>(),
                                     dx.data_ptr<float>(), dw.data_ptr<float>(),
                                     has_bias ? db.data_ptr<float>() : nullptr, rows, n);
    return {dx, dw.to(weight.scalar_type()), has_bias ? db.to(bias_dtype) : torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

LayerNormImpl::LayerNormImpl(const NormOptions& o) : size_(o.size), eps_(o.eps) {
  weight_ = register_parameter("weight", torch::ones({o.size}));
  if (o.keys.boolean("norm.bias")) bias_ = register_parameter("bias", torch::zeros({o.size}));
}

torch::Tensor LayerNormImpl::reference_forward(const torch::Tensor& x, const torch::Tensor& weight,
                                               const torch::Tensor& bias, double eps) {
  auto xf = compute_dtype(x);
  const auto dt = xf.scalar_type();
  auto centered = xf - xf.mean(-1, /*keepdim=*/true);
  auto y =
      centered * torch::rsqrt(centered.pow(2).mean(-1, /*keepdim=*/true) + eps) * weight.to(dt);
  if (bias.defined()) y = y + bias.to(dt);
  return y.to(x.scalar_type());
}

torch::Tensor LayerNormImpl::fast_forward(const torch::Tensor& x, const torch::Tensor& weight,
                                          const torch::Tensor& bias, double eps) {
  TORCH_CHECK(cpu_fast_path_applies(x), "layernorm fast path needs contiguous float32 CPU input");
  return LayerNormFunction::apply(x, weight,
                                  bias.defined() ? bias : torch::empty({0}, weight.options()), eps);
}

torch::Tensor LayerNormImpl::forward(const torch::Tensor& x) {
  auto xf = compute_dtype(x);
  last_forward_was_fast_ = cpu_fast_path_applies(xf) && weight_.device().is_cpu();
  if (last_forward_was_fast_) return fast_forward(xf, weight_, bias_, eps_).to(x.scalar_type());
  return native_forward(xf, weight_, bias_, eps_).to(x.scalar_type());
}

torch::Tensor LayerNormImpl::native_forward(const torch::Tensor& x, const torch::Tensor& weight,
                                            const torch::Tensor& bias, double eps) {
  auto xf = compute_dtype(x);
  const auto dt = xf.scalar_type();
  auto y = torch::layer_norm(xf, {xf.size(-1)}, weight.to(dt),
                             bias.defined() ? bias.to(dt) : torch::Tensor(), eps);
  return y.to(x.scalar_type());
}

NormType layernorm_norm() {
  NormType t{"layernorm", 1e-5, "(x - mean)/sqrt(var + eps)*weight + bias",
             [](const NormOptions& o) { return std::make_shared<LayerNormImpl>(o); }};
  t.reference = [](const double* x, double* y, int64_t rows, int64_t n, const NormTensors& p, double eps) {
    for (int64_t i = 0; i < rows; ++i) {
      const double* r = x + i * n;
      double mean = 0, var = 0;
      for (int64_t j = 0; j < n; ++j) mean += r[j] / n;
      for (int64_t j = 0; j < n; ++j) var += (r[j] - mean) * (r[j] - mean) / n;
      for (int64_t j = 0; j < n; ++j) {
        y[i * n + j] = (r[j] - mean) / std::sqrt(var + eps) * element(p, "weight", j) +
                       (p.count("bias") ? element(p, "bias", j) : 0.0);
      }
    }
  };
  t.tensors = {{"weight", true, 1}, {"bias", true, 0}};
  t.keys = {{"bias", KeyKind::kBoolean, true, "layernorm has a bias"}};
  return t;
}

}  // namespace normlab
