#include "model/attention.h"

#include <cmath>
#include <limits>
#include <tuple>

#include "core/torch_compat.h"
#include "model/attention_kernels.h"
#include "model/roles.h"

namespace normlab {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

AttentionImpl::AttentionImpl(const AttentionOptions& o) : o_(o), dh_(o.d_model / o.n_heads) {
  q_proj = register_module("q_proj", make_linear(o.d_model, o.d_model, o.bias));
  k_proj = register_module("k_proj", make_linear(o.d_model, o.d_model, o.bias));
  v_proj = register_module("v_proj", make_linear(o.d_model, o.d_model, o.bias));
  out_proj = register_module("out_proj", make_linear(o.d_model, o.d_model, o.bias));
  if (o.qk_norm || o.force_qkv_norm) {
    q_norm = register_module("q_norm", make_norm(o.qk_norm_type, o.qk_norm_options));
    k_norm = register_module("k_norm", make_norm(o.qk_norm_type, o.qk_norm_options));
  }
  if (o.v_norm || o.force_qkv_norm)
    v_norm = register_module("v_norm", make_norm(o.qk_norm_type, o.qk_norm_options));
  if (o.gate != AttnGate::kNone) {
    const int64_t rows = o.gate == AttnGate::kHead ? o.n_heads : o.d_model;
    // No gate bias (src/model/README.md, Tensor names).
    gate = register_module("gate", make_linear(o.d_model, rows, false));
  }
  if (o.head_scale) head_scale = register_parameter("head_scale", with_role(torch::ones({o.n_heads}), Role::kGain));
  if (o.qk) qk_map_ = o.qk(*this);
  if (o.value_role != ValueRole::kNone)
    TORCH_CHECK(o.value_residual && o.value_residual->make && o.value_source, "value residual: a block with a part "
                "in it needs the mode's entry and the shared source");
  if (o.value_role == ValueRole::kMix || o.value_role == ValueRole::kMixLast)
    value_mix_ = o.value_residual->make(*this, ValueMixShape{o.d_model, o.n_heads});
  if (o.inner_norm_type) {
    NormOptions no = o.inner_norm;
    no.size = o.d_model;
    inner_norm = register_module("inner_norm", make_norm(*o.inner_norm_type, no));
  }
}

namespace {

// Causal mask, true above the diagonal (the future), cached per size and device.
torch::Tensor causal_mask(int64_t T, const torch::Device& device) {
  thread_local torch::Tensor mask;
  if (!mask.defined() || mask.size(0) != T || mask.device() != device) {
    mask = torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(device)).triu(1);
  }
  return mask;
}

attention_kernels::Strides strides_of(const torch::Tensor& t) {  // t: (B, T, H, dh)
  return {t.stride(0), t.stride(1), t.stride(2)};
}

// The raw bits of a bf16 tensor, as the bf16 kernels take them.
const uint16_t* bits(const torch::Tensor& t) { return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>()); }
uint16_t* bits(torch::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); }

// The fused kernels behind an autograd function: forward keeps q, k, v, o and the per-row
// log-sum-exp; backward recomputes the probabilities (see attention_kernels.h).
struct CausalAttentionFunction : public torch::autograd::Function<CausalAttentionFunction> {
  // q, k, v: (B, T, H, dh), head dimension contiguous, all float32 (the fp32 kernel) or all bf16
  // (the AVX512-BF16 kernel; o and the gradients bf16, lse fp32); stats: empty, or (B*H, 3) double.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& stats) {
    const int64_t B = q.size(0), T = q.size(1), H = q.size(2), dh = q.size(3);
    const attention_kernels::Shape shape{B, T, H, dh, 1.0 / std::sqrt(static_cast<double>(dh))};
    auto o = torch::empty({B, T, H, dh}, q.options());
    auto lse = torch::empty({B, H, T}, q.options().dtype(torch::kFloat));
    double* st = stats.numel() ? stats.data_ptr<double>() : nullptr;
    if (q.scalar_type() == torch::kBFloat16) {
      attention_kernels::causal_attention_forward_bf16(shape, bits(q), strides_of(q), bits(k), strides_of(k), bits(v),
                                                       strides_of(v), bits(o), lse.data_ptr<float>(), st);
    } else {
      attention_kernels::causal_attention_forward(shape, q.data_ptr<float>(), strides_of(q), k.data_ptr<float>(),
                                                  strides_of(k), v.data_ptr<float>(), strides_of(v),
                                                  o.data_ptr<float>(), lse.data_ptr<float>(), st);
    }
    ctx->save_for_backward({q, k, v, o, lse});
    return o;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &o = saved[3], &lse = saved[4];
    const int64_t B = q.size(0), T = q.size(1), H = q.size(2), dh = q.size(3);
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
    auto d_o = grads[0].contiguous();
    if (torch::GradMode::is_enabled()) {
      // create_graph=true (higher-order gradients): the same formulas with differentiable ops
      // (in fp32 for bf16 inputs, the gradients cast back).
      auto t = [](const torch::Tensor& x) { return x.transpose(1, 2).to(torch::kFloat); };  // <-> (B, H, T, dh)
      auto s = torch::matmul(t(q), t(k).transpose(-2, -1)) * scale;
      auto p = torch::softmax(s.masked_fill(causal_mask(T, q.device()), -INFINITY), -1);
      auto g = t(d_o);
      auto dp = torch::matmul(g, t(v).transpose(-2, -1));
      auto ds = p * (dp - (dp * p).sum(-1, /*keepdim=*/true));
      auto back = [&](const torch::Tensor& x) { return x.transpose(1, 2).to(q.scalar_type()); };
      return {back(torch::matmul(ds, t(k)) * scale), back(torch::matmul(ds.transpose(-2, -1), t(q)) * scale),
              back(torch::matmul(p.transpose(-2, -1), g)), torch::Tensor()};
    }
    const attention_kernels::Shape shape{B, T, H, dh, scale};
    auto dq = torch::empty({B, T, H, dh}, q.options());
    auto dk = torch::empty_like(dq), dv = torch::empty_like(dq);
    if (q.scalar_type() == torch::kBFloat16) {
      d_o = d_o.to(torch::kBFloat16);
      attention_kernels::causal_attention_backward_bf16(shape, bits(q), strides_of(q), bits(k), strides_of(k), bits(v),
                                                        strides_of(v), bits(o), lse.data_ptr<float>(), bits(d_o),
                                                        bits(dq), bits(dk), bits(dv));
      return {dq, dk, dv, torch::Tensor()};
    }
    attention_kernels::causal_attention_backward(
        shape, q.data_ptr<float>(), strides_of(q), k.data_ptr<float>(), strides_of(k),
        v.data_ptr<float>(), strides_of(v), o.data_ptr<float>(), lse.data_ptr<float>(),
        d_o.data_ptr<float>(), dq.data_ptr<float>(), dk.data_ptr<float>(), dv.data_ptr<float>());
    return {dq, dk, dv, torch::Tensor()};
  }
};

// The fp32 kernel's conditions but the dtype: CPU, (B, T, H, dh) with dh a multiple of 8, no softcap.
bool kernel_shape_applies(const torch::Tensor& q, double softcap) {
  return q.device().is_cpu() && q.dim() == 4 && softcap <= 0 && q.size(3) % 8 == 0 && q.size(1) > 0;
}
}  // namespace

// Measured with `normlab bench` in bf16 on a 2-core AVX512-BF16 CPU with LibTorch 2.11
// (scripts/BENCHMARKS.md, "bf16 on the CPU"): at dh = 32 (tiny, small) the fp32 kernel's step is
// 2.0x / 1.2x faster than with SDPA, at dh = 64 (medium) SDPA's is faster.
constexpr int64_t kBf16KernelMaxHeadDim = 32;

bool causal_attention_fast_path_applies(const torch::Tensor& q, double softcap) {
  return kernel_shape_applies(q, softcap) && q.scalar_type() == torch::kFloat && q.stride(3) == 1;
}

bool causal_attention_bf16_kernel_applies(const torch::Tensor& q, double softcap) {
  return kernel_shape_applies(q, softcap) && q.scalar_type() == torch::kBFloat16 && q.stride(3) == 1 &&
         q.size(3) % 16 == 0 && q.size(3) <= attention_kernels::kBf16MaxHeadDim &&
         attention_kernels::bf16_kernel_available();
}

AttentionPath choose_attention_path(const torch::Tensor& q, double softcap, bool want_stats, bool allow_fast) {
  if (!allow_fast) return AttentionPath::reference;
  if (causal_attention_fast_path_applies(q, softcap)) return AttentionPath::cpu_kernel;
  // bf16 on the CPU (autocast): the bf16 kernel wherever it applies (a CPU with AVX512-BF16, dh a
  // multiple of 16 up to its maximum): 1.8x / 2.3x the upcast fp32 kernel's forward + backward at
  // tiny / small, and 2.8x / 1.7x LibTorch 2.11's bf16 SDPA at dh 64 (scripts/BENCHMARKS.md).
  // Without it: the fp32 kernel on upcast inputs up to kBf16KernelMaxHeadDim; wider heads go to
  // SDPA when it can serve (its bf16 matmuls won against the upcast fp32 kernel there).
  if (causal_attention_bf16_kernel_applies(q, softcap)) return AttentionPath::cpu_kernel_bf16_native;
  if (q.scalar_type() == torch::kBFloat16 && kernel_shape_applies(q, softcap) &&
      (q.size(3) <= kBf16KernelMaxHeadDim || !have_sdpa() || want_stats))
    return AttentionPath::cpu_kernel_bf16;
  if (have_sdpa() && softcap <= 0 && !want_stats) return AttentionPath::sdpa;
  return AttentionPath::reference;
}

torch::Tensor mean_abs(const torch::Tensor& x) {
  torch::NoGradGuard ng;
  return x.detach().to(torch::kFloat).abs().mean();
}

torch::Tensor score_mean_abs(const torch::Tensor& q, const torch::Tensor& k) {
  torch::NoGradGuard ng;
  const double dh = static_cast<double>(q.size(3));
  auto qf = q.detach().to(torch::kFloat).transpose(1, 2), kf = k.detach().to(torch::kFloat).transpose(1, 2);
  const auto s = (torch::matmul(qf, kf.transpose(-2, -1)) * (1.0 / std::sqrt(dh))).abs();  // (B, H, T, T)
  const int64_t T = s.size(-1);
  const auto causal = torch::ones({T, T}, s.options()).tril();
  const double n_causal = static_cast<double>(s.numel() / (T * T)) * static_cast<double>(T * (T + 1) / 2);
  return torch::stack({s.mean(), (s * causal).sum() / n_causal});
}

torch::Tensor causal_attention_reference(const torch::Tensor& q, const torch::Tensor& k,
                                         const torch::Tensor& v, double softcap,
                                         AttentionStats* stats) {
  const int64_t T = q.size(1), dh = q.size(3);
  auto t = [](const torch::Tensor& x) {
    return x.transpose(1, 2);
  };  // (B, T, H, dh) <-> (B, H, T, dh)
  auto s = torch::matmul(t(q), t(k).transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(dh)));
  const auto mask = causal_mask(T, q.device());
  const float kInf = std::numeric_limits<float>::infinity();
  if (stats) {  // per head, before any softcap (QK-Clip's S)
    torch::NoGradGuard ng;
    stats->head_max = s.detach().masked_fill(mask, -kInf).to(torch::kFloat).amax({0, 2, 3});
  }
  if (softcap > 0) s = torch::tanh(s / softcap) * softcap;
  s = s.masked_fill(mask, -kInf);
  auto p = torch::softmax(compute_dtype(s), -1);  // (B, H, T, T), at least fp32
  if (stats) {
    torch::NoGradGuard ng;
    auto pd = p.detach();
    const auto h = -(pd * pd.clamp_min(1e-30).log()).sum(-1);  // (B, H, T)
    stats->entropy = h.mean();
    stats->head_entropy = h.mean(2).mean(0).to(torch::kFloat);  // (B, H, T) -> [H]
    stats->logit_max = s.detach().max();
    stats->sink = T > 1 ? pd.narrow(2, 1, T - 1).select(3, 0).mean().to(torch::kFloat)
                        : torch::zeros({}, pd.options().dtype(torch::kFloat));
  }
  return t(torch::matmul(p.to(v.scalar_type()), t(v)));  // (B, T, H, dh)
}

torch::Tensor causal_attention_fast(const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& v, AttentionStats* stats) {
  TORCH_CHECK((causal_attention_fast_path_applies(q, 0) || causal_attention_bf16_kernel_applies(q, 0)) &&
                  k.sizes() == q.sizes() && v.sizes() == q.sizes() && k.scalar_type() == q.scalar_type() &&
                  v.scalar_type() == q.scalar_type() && k.stride(3) == 1 && v.stride(3) == 1,
              "fused attention needs float32 CPU (B, T, H, dh) views with dh a multiple of 8, or bf16 ones with dh a "
              "multiple of 16 on an AVX512-BF16 CPU");
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2);
  torch::Tensor st = stats ? torch::empty({B * H, 3}, q.options().dtype(torch::kDouble))
                           : torch::empty({0}, q.options().dtype(torch::kDouble));
  // The bf16 kernel reads rows as 32-bit pairs (gathers): an odd time stride gets a contiguous copy.
  auto even_rows = [](const torch::Tensor& t) {
    return t.scalar_type() == torch::kBFloat16 && t.stride(1) % 2 != 0 ? t.contiguous() : t;
  };
  auto o = CausalAttentionFunction::apply(even_rows(q), even_rows(k), even_rows(v), st);
  if (stats) {
    stats->entropy = (st.select(1, 0).sum() / static_cast<double>(B * H * T)).to(torch::kFloat);
    stats->logit_max = st.select(1, 1).max().to(torch::kFloat);
    stats->head_max = st.select(1, 1).view({B, H}).amax(0).to(torch::kFloat);
    stats->head_entropy = (st.select(1, 0).view({B, H}).sum(0) / static_cast<double>(B * T)).to(torch::kFloat);
    stats->sink = T > 1 ? (st.select(1, 2).sum() / static_cast<double>(B * H * (T - 1))).to(torch::kFloat)
                        : torch::zeros({}, q.options());
  }
  return o;
}

torch::Tensor AttentionImpl::apply_rope(const torch::Tensor& x) {  // x: (B, T, H, dh)
  const int64_t T = x.size(1), half = dh_ / 2;
  if (!rope_cos_.defined() || rope_cos_.size(0) != T || rope_cos_.device() != x.device()) {
    // angle(t, j) = t * 10000^(-2j/dh), j < dh/2, computed in double for exactness.
    auto opts = torch::TensorOptions().dtype(torch::kDouble).device(x.device());
    auto t = torch::arange(T, opts).unsqueeze(1);
    auto inv = torch::pow(10000.0, -2.0 * torch::arange(half, opts) / static_cast<double>(dh_));
    auto ang = (t * inv.unsqueeze(0)).unsqueeze(1);  // (T, 1, dh/2): broadcast over heads
    rope_cos_ = ang.cos();
    rope_sin_ = ang.sin();
  }
  auto c = rope_cos_.to(x.scalar_type()), s = rope_sin_.to(x.scalar_type());
  auto x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return torch::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
}

torch::Tensor AttentionImpl::take_head_max() {
  auto out = head_max_accum_;
  head_max_accum_ = torch::Tensor();
  return out;
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), H = o_.n_heads;
  // One GEMM for the three projections (the parameters stay separate, as the contract names
  // them; concatenating three d x d weights costs nothing next to the matmul it saves). Heads
  // stay where the projection put them: (B, T, H, dh) views of (B, T, 3d), no transposes.
  const int64_t d = o_.d_model;
  auto w = torch::cat({q_proj->weight, k_proj->weight, v_proj->weight});
  auto b = o_.bias ? torch::cat({q_proj->bias, k_proj->bias, v_proj->bias}) : torch::Tensor();
  auto qkv = torch::linear(x, w, b).split(d, -1);  // (B, T, d) x 3
  auto q = qkv[0], k = qkv[1], v = qkv[2];
  AttentionStats* st = capture_ || track_head_max_ ? &stats_ : nullptr;
  if (o_.value_role == ValueRole::kSource) {
    o_.value_source->put(v);
    if (capture_) stats_.vres_lambda = torch::ones({});
  } else if (value_mix_) {
    v = value_mix_->mix(x, v, o_.value_source->get(), capture_ ? &stats_.vres_lambda : nullptr);
    if (o_.value_role == ValueRole::kMixLast) o_.value_source->release();
  }
  // A q/k/v norm over each head (size dh, on (B, T, H, dh)) or over all heads (size d, on
  // (B, T, d)); contiguous: the norms' fast path.
  auto heads = [&](const torch::Tensor& t) { return t.view({B, T, H, dh_}); };
  auto normed = [&](NormPtr& n, const torch::Tensor& t) {  // t: (B, T, H, dh) or (B, T, d)
    if (o_.qk_norm_all) return heads(n->forward(t.reshape({B, T, d}).contiguous()));
    return n->forward(heads(t).contiguous());
  };
  if (v_norm) v = normed(v_norm, v);
  if (q_norm && !o_.qk_norm_after_rope) {
    q = normed(q_norm, q);
    k = normed(k_norm, k);
  }
  q = heads(q);
  k = heads(k);
  v = heads(v);
  if (o_.rope) {
    q = apply_rope(q);
    k = apply_rope(k);
  }
  if (q_norm && o_.qk_norm_after_rope) {
    q = normed(q_norm, q);
    k = normed(k_norm, k);
  }
  if (qk_map_) std::tie(q, k) = qk_map_(q, k, v.scalar_type());
  if (o_.score_q_mult != 1.0) q = q * o_.score_q_mult;
  if (coord_) coord_score_ = score_mean_abs(q, k);
  last_path_ = choose_attention_path(q, o_.softcap, st != nullptr, fast_path_);
  auto o = last_path_ == AttentionPath::cpu_kernel || last_path_ == AttentionPath::cpu_kernel_bf16_native
               ? causal_attention_fast(q, k, v.to(q.scalar_type()), st)
           : last_path_ == AttentionPath::cpu_kernel_bf16
               ? causal_attention_fast(q.to(torch::kFloat), k.to(torch::kFloat), v.to(torch::kFloat), st).to(q.scalar_type())
           : last_path_ == AttentionPath::sdpa     ? causal_sdpa(q, k, v)
                                                   : causal_attention_reference(q, k, v, o_.softcap, st);  // (B, T, H, dh)
  if (track_head_max_ && st) {
    head_max_accum_ = head_max_accum_.defined() ? torch::maximum(head_max_accum_, st->head_max) : st->head_max;
  }
  if (gate) {  // o_h * sigmoid(g_h), g = x_in Wg^T: one scalar per head, or one per channel
    auto g = torch::sigmoid(gate(x));
    g = o_.gate == AttnGate::kHead ? g.unsqueeze(-1) : heads(g);
    o = o * g.to(o.scalar_type());
  }
  if (head_scale.defined()) o = o * head_scale.view({1, 1, H, 1});
  auto merged = o.reshape({B, T, d});
  if (inner_norm) merged = inner_norm->forward(merged.contiguous());
  return out_proj(merged);
}

}  // namespace normlab
