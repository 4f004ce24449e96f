#include "model/attention.h"

#include <cmath>

namespace normlab {

namespace {
torch::nn::Linear linear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}
}  // namespace

AttentionImpl::AttentionImpl(const AttentionOptions& o) : o_(o), dh_(o.d_model / o.n_heads) {
  q_proj = register_module("q_proj", linear(o.d_model, o.d_model, o.bias));
  k_proj = register_module("k_proj", linear(o.d_model, o.d_model, o.bias));
  v_proj = register_module("v_proj", linear(o.d_model, o.d_model, o.bias));
  out_proj = register_module("out_proj", linear(o.d_model, o.d_model, o.bias));
  if (o.qk_norm_type) {
    q_norm = register_module("q_norm", make_norm(*o.qk_norm_type, o.qk_norm));
    k_norm = register_module("k_norm", make_norm(*o.qk_norm_type, o.qk_norm));
  }
  if (o.head_scale) head_scale = register_parameter("head_scale", torch::ones({o.n_heads}));
}

const torch::Tensor& AttentionImpl::causal_mask(int64_t T, const torch::Device& device) {
  if (!mask_.defined() || mask_.size(0) != T || mask_.device() != device) {
    mask_ = torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(device)).triu(1);
  }
  return mask_;
}

torch::Tensor AttentionImpl::apply_rope(const torch::Tensor& x) {
  const int64_t T = x.size(2), half = dh_ / 2;
  if (!rope_cos_.defined() || rope_cos_.size(0) != T || rope_cos_.device() != x.device()) {
    // angle(t, j) = t * 10000^(-2j/dh), j < dh/2, computed in double for exactness.
    auto opts = torch::TensorOptions().dtype(torch::kDouble).device(x.device());
    auto t = torch::arange(T, opts).unsqueeze(1);
    auto inv = torch::pow(10000.0, -2.0 * torch::arange(half, opts) / static_cast<double>(dh_));
    auto ang = t * inv.unsqueeze(0);  // (T, dh/2)
    rope_cos_ = ang.cos();
    rope_sin_ = ang.sin();
  }
  auto c = rope_cos_.to(x.scalar_type()), s = rope_sin_.to(x.scalar_type());
  auto x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return torch::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), H = o_.n_heads;
  auto heads = [&](const torch::Tensor& t) { return t.view({B, T, H, dh_}).transpose(1, 2); };
  auto q = heads(q_proj(x)), k = heads(k_proj(x)), v = heads(v_proj(x));  // (B, H, T, dh)
  if (q_norm) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  if (o_.rope) {
    q = apply_rope(q);
    k = apply_rope(k);
  }
  auto s = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(dh_)));
  if (o_.softcap > 0) s = torch::tanh(s / o_.softcap) * o_.softcap;
  s = s.masked_fill(causal_mask(T, x.device()), -std::numeric_limits<float>::infinity());
  auto p = torch::softmax(compute_dtype(s), -1);  // (B, H, T, T), at least fp32
  if (capture_) {
    torch::NoGradGuard ng;
    auto pd = p.detach();
    stats_.entropy = -(pd * pd.clamp_min(1e-30).log()).sum(-1).mean();
    stats_.logit_max = s.detach().max();
  }
  auto o = torch::matmul(p.to(v.scalar_type()), v);  // (B, H, T, dh)
  if (head_scale.defined()) o = o * head_scale.view({1, H, 1, 1});
  return out_proj(o.transpose(1, 2).reshape({B, T, o_.d_model}));
}

FfnImpl::FfnImpl(const FfnOptions& o) : o_(o) {
  fc1 = register_module("fc1", linear(o.d_model, o.d_ff, o.bias));
  if (o.swiglu) gate = register_module("gate", linear(o.d_model, o.d_ff, o.bias));
  fc2 = register_module("fc2", linear(o.d_ff, o.d_model, o.bias));
  if (o.mid_norm_type) mid_norm = register_module("mid_norm", make_norm(*o.mid_norm_type, o.mid_norm));
}

torch::Tensor FfnImpl::forward(const torch::Tensor& x) {
  torch::Tensor h;
  if (o_.swiglu) {
    h = torch::silu(gate(x)) * fc1(x);
  } else {
    h = torch::gelu(fc1(x));  // exact erf GELU
  }
  if (mid_norm) h = mid_norm->forward(h);
  return fc2(h);
}

}  // namespace normlab
