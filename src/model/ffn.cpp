#include "model/ffn.h"

#include <cmath>

#include "model/gelu_kernel.h"
#include "model/roles.h"

namespace normlab {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {
const uint16_t* bf16_ptr(const torch::Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
}
uint16_t* bf16_ptr_mut(torch::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); }

// y = gelu(x) for bf16 x through gelu_kernel.h; the backward recomputes from the saved input.
struct GeluBf16Function : public torch::autograd::Function<GeluBf16Function> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x) {
    auto y = torch::empty_like(x);
    gelu_kernel::forward_bf16(bf16_ptr(x), bf16_ptr_mut(y), x.numel());
    ctx->save_for_backward({x});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto x = ctx->get_saved_variables()[0];
    const auto& g = grads[0];
    if (torch::GradMode::is_enabled()) {  // double backward: the derivative in differentiable ops
      const auto xf = x.to(torch::kFloat);
      const auto cdf = 0.5 * (1.0 + torch::erf(xf * M_SQRT1_2));
      const auto pdf = torch::exp(-0.5 * xf * xf) * (0.5 * M_2_SQRTPI * M_SQRT1_2);
      return {(g.to(torch::kFloat) * (cdf + xf * pdf)).to(x.scalar_type())};
    }
    const auto dy = g.to(torch::kBFloat16).contiguous();
    auto dx = torch::empty_like(x);
    gelu_kernel::backward_bf16(bf16_ptr(x), bf16_ptr(dy), bf16_ptr_mut(dx), x.numel());
    return {dx};
  }
};
}  // namespace

bool gelu_kernel_applies(const torch::Tensor& x) {
  return x.device().is_cpu() && x.scalar_type() == torch::kBFloat16 && x.is_contiguous();
}

torch::Tensor ffn_gelu(const torch::Tensor& x) {
  if (gelu_kernel_applies(x)) return GeluBf16Function::apply(x);
  return torch::gelu(x);  // exact erf GELU
}

FfnImpl::FfnImpl(const FfnOptions& o) : o_(o) {
  fc1 = register_module("fc1", make_linear(o.d_model, o.d_ff, o.bias));
  TORCH_CHECK(o.type != nullptr, "FfnOptions: no FFN type");
  if (o.type->gated) gate = register_module("gate", make_linear(o.d_model, o.d_ff, o.bias));
  fc2 = register_module("fc2", make_linear(o.d_ff, o.d_model, o.bias));
  if (o.mid_norm_type)
    mid_norm = register_module("mid_norm", make_norm(*o.mid_norm_type, o.mid_norm));
  if (o.hidden) hidden_ = o.hidden(*this);
}

torch::Tensor FfnImpl::forward(const torch::Tensor& x) {
  torch::Tensor h;
  if (hidden_) {
    h = hidden_(x);
  } else if (o_.type->gated) {
    h = o_.type->act(gate(x)) * fc1(x);
  } else {
    h = o_.type->act(fc1(x));
  }
  if (mid_norm) h = mid_norm->forward(h);
  return fc2(h);
}

}  // namespace normlab
