// RMSNorm and rmsnorm_1p; formulas and papers in rmsnorm.h.
#include "model/norms/rmsnorm.h"

#include <torch/version.h>

#include <cmath>

#include "model/norms/cpu_kernels.h"

// at::rms_norm exists from LibTorch 2.4 on (fused kernels on CPU and CUDA in later releases).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define NORMLAB_NATIVE_RMS_NORM 1
#else
#define NORMLAB_NATIVE_RMS_NORM 0
#endif

namespace normlab {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

torch::Tensor effective_weight(const torch::Tensor& weight, bool one_plus) {
  return one_plus ? weight + 1 : weight;
}

// Custom autograd function around the row kernels: forward saves x and the per-row 1/rms, the
// backward is one pass per row (see cpu_kernels.h for the gradient).
struct RMSNormFunction : public torch::autograd::Function<RMSNormFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, double eps, bool one_plus) {
    const int64_t n = x.size(-1), rows = x.numel() / n;
    TORCH_CHECK(weight.dim() == 1 && weight.size(0) == n, "rmsnorm: weight of shape ",
                weight.sizes(), " for input of shape ", x.sizes());
    auto w = effective_weight(weight, one_plus).to(torch::kFloat).contiguous();
    auto y = torch::empty_like(x);
    auto rstd = torch::empty({rows}, x.options());
    cpu_kernels::rms_norm_forward(x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>(),
                                  rstd.data_ptr<float>(), rows, n, eps);
    ctx->save_for_backward({x, weight, rstd});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["one_plus"] = one_plus;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& weight = saved[1];
    const bool one_plus = ctx->saved_data["one_plus"].toBool();
    const int64_t n = x.size(-1), rows = x.numel() / n;
    const auto g = grads[0].contiguous();
    if (torch::GradMode::is_enabled()) {
      // create_graph=true: the kernel's result would carry no history, so compute the same
      // gradient with differentiable ops (rare; only higher-order gradients come here).
      const double eps = ctx->saved_data["eps"].toDouble();
      auto w = effective_weight(weight, one_plus).to(x.scalar_type());
      auto r = torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps);
      auto dx = r * w * g - x * r.pow(3) * (w * g * x).mean(-1, /*keepdim=*/true);
      auto dw = (g * x * r).reshape({-1, n}).sum(0).to(weight.scalar_type());
      return {dx, dw, torch::Tensor(), torch::Tensor()};
    }
    auto w = effective_weight(weight, one_plus).to(torch::kFloat).contiguous();
    auto dx = torch::empty_like(x);
    auto dw = torch::empty({n}, x.options());
    cpu_kernels::rms_norm_backward(g.data_ptr<float>(), x.data_ptr<float>(), w.data_ptr<float>(),
                                   saved[2].data_ptr<float>(), dx.data_ptr<float>(),
                                   dw.data_ptr<float>(), rows, n);
    return {dx, dw.to(weight.scalar_type()), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

RMSNormImpl::RMSNormImpl(const NormOptions& o, bool one_plus) : eps_(o.eps), one_plus_(one_plus) {
  weight_ = register_parameter("weight", one_plus ? torch::zeros({o.size}) : torch::ones({o.size}));
}

torch::Tensor RMSNormImpl::reference_forward(const torch::Tensor& x, const torch::Tensor& weight,
                                             double eps, bool one_plus) {
  auto xf = compute_dtype(x);
  auto w = effective_weight(weight.to(xf.scalar_type()), one_plus);
  auto y = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps) * w;
  return y.to(x.scalar_type());
}

torch::Tensor RMSNormImpl::fast_forward(const torch::Tensor& x, const torch::Tensor& weight,
                                        double eps, bool one_plus) {
  TORCH_CHECK(cpu_fast_path_applies(x), "rmsnorm fast path needs contiguous float32 CPU input");
  return RMSNormFunction::apply(x, weight, eps, one_plus);
}

bool RMSNormImpl::native_fused_available() { return NORMLAB_NATIVE_RMS_NORM; }

torch::Tensor RMSNormImpl::native_forward(const torch::Tensor& x, const torch::Tensor& weight,
                                          double eps, bool one_plus) {
#if NORMLAB_NATIVE_RMS_NORM
  auto xf = compute_dtype(x);
  auto w = effective_weight(weight.to(xf.scalar_type()), one_plus);
  return at::rms_norm(xf, {xf.size(-1)}, w, eps).to(x.scalar_type());
#else
  return reference_forward(x, weight, eps, one_plus);
#endif
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  auto xf = compute_dtype(x);
  last_forward_was_fast_ = cpu_fast_path_applies(xf) && weight_.device().is_cpu();
  auto y = last_forward_was_fast_ ? fast_forward(xf, weight_, eps_, one_plus_)
                                  : native_forward(xf, weight_, eps_, one_plus_);
  return y.to(x.scalar_type());
}

namespace {
// The reference of both entries: y = x / sqrt(mean(x^2) + eps) * (offset + weight).
NormReference rms_reference(double offset) {
  return [offset](const double* x, double* y, int64_t rows, int64_t n, const NormTensors& p, double eps) {
    for (int64_t i = 0; i < rows; ++i) {
      const double* r = x + i * n;
      double ms = 0;
      for (int64_t j = 0; j < n; ++j) ms += r[j] * r[j] / n;
      for (int64_t j = 0; j < n; ++j) y[i * n + j] = r[j] / std::sqrt(ms + eps) * (offset + element(p, "weight", j));
    }
  };
}
}  // namespace

NormType rmsnorm_norm() {
  NormType t{"rmsnorm", 1e-6, "x/sqrt(mean(x^2) + eps)*weight",
             [](const NormOptions& o) { return std::make_shared<RMSNormImpl>(o, false); }};
  t.reference = rms_reference(0.0);
  t.tensors = {{"weight", true, 1}};
  return t;
}

NormType rmsnorm_1p_norm() {
  NormType t{"rmsnorm_1p", 1e-6, "x/sqrt(mean(x^2) + eps)*(1 + weight)",
             [](const NormOptions& o) { return std::make_shared<RMSNormImpl>(o, true); }};
  t.reference = rms_reference(1.0);
  t.tensors = {{"weight", true, 0}};
  return t;
}

}  // namespace normlab
