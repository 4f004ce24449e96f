// The fused causal attention (attention_kernels.h) against the composed-op reference: forward,
// gradients of q, k, v, the diagnostics it records, strided inputs, every sequence length class
// (shorter than, equal to, and not a multiple of the vector width) and thread counts.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "model/attention.h"
#include "model/attention_kernels.h"
#include "core/torch_compat.h"

namespace normlab {
namespace {

struct AttentionCase {
  int64_t B, T, H, dh;
};

// Largest difference relative to the largest reference magnitude; `floor` keeps gradients that
// are exactly 0 in the reference (q and k of a one-token sequence) from dividing by 0.
double rel_err(const torch::Tensor& a, const torch::Tensor& b, double floor = 1e-30) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(floor)).item<double>();
}

// q, k, v as (B, T, H, dh) views of one fused (B, T, 3 * H * dh) projection, like a real model
// with a fused QKV matmul: strided, head dimension contiguous.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> qkv_views(const AttentionCase& c, double scale) {
  auto qkv = (torch::randn({c.B, c.T, 3 * c.H * c.dh}) * scale).requires_grad_(true);
  auto parts = qkv.split(c.H * c.dh, -1);
  auto view = [&](const torch::Tensor& t) { return t.view({c.B, c.T, c.H, c.dh}); };
  return {view(parts[0]), view(parts[1]), view(parts[2])};
}

class FusedAttentionTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(FusedAttentionTest, ForwardAndGradientsMatchComposedReference) {
  const AttentionCase c = GetParam();
  torch::manual_seed(c.T * 31 + c.dh);
  // Scores of a few units: a peaked softmax, where exp and the causal edge both matter.
  auto [q, k, v] = qkv_views(c, 1.5);
  ASSERT_TRUE(causal_attention_fast_path_applies(q, 0));
  auto g = torch::randn({c.B, c.T, c.H, c.dh});

  auto fast = causal_attention_fast(q, k, v, nullptr);
  auto fast_grads = torch::autograd::grad({fast}, {q, k, v}, {g});
  auto ref = causal_attention_reference(q, k, v, 0, nullptr);
  auto ref_grads = torch::autograd::grad({ref}, {q, k, v}, {g});

  EXPECT_LT(rel_err(fast, ref), 2e-6);
  const char* names[] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; ++i) {
    // inputs and upstream gradients are O(1), so an absolute 1e-5 is float rounding
    EXPECT_LT(rel_err(fast_grads[i], ref_grads[i], 1.0), 1e-5) << names[i];
  }
}

TEST_P(FusedAttentionTest, DiagnosticsMatchComposedReference) {
  const AttentionCase c = GetParam();
  torch::manual_seed(7);
  auto [q, k, v] = qkv_views(c, 1.0);
  AttentionStats fast_stats, ref_stats;
  torch::NoGradGuard ng;
  causal_attention_fast(q, k, v, &fast_stats);
  causal_attention_reference(q, k, v, 0, &ref_stats);
  EXPECT_NEAR(fast_stats.entropy.item<double>(), ref_stats.entropy.item<double>(), 1e-5);
  EXPECT_NEAR(fast_stats.logit_max.item<double>(), ref_stats.logit_max.item<double>(), 1e-5);
  EXPECT_NEAR(fast_stats.sink.item<double>(), ref_stats.sink.item<double>(), 1e-5);
  if (q.size(1) > 1) {
    EXPECT_GT(ref_stats.sink.item<double>(), 0.0);
  }
  ASSERT_EQ(fast_stats.head_max.sizes(), ref_stats.head_max.sizes());
  EXPECT_TRUE(torch::allclose(fast_stats.head_max, ref_stats.head_max, 1e-5, 1e-5));
  // Per head: the same on both paths, and their mean is the overall entropy (equal counts per head).
  ASSERT_EQ(fast_stats.head_entropy.sizes(), ref_stats.head_entropy.sizes());
  EXPECT_TRUE(torch::allclose(fast_stats.head_entropy, ref_stats.head_entropy, 1e-5, 1e-5));
  EXPECT_NEAR(ref_stats.head_entropy.mean().item<double>(), ref_stats.entropy.item<double>(), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Shapes, FusedAttentionTest,
                         ::testing::Values(AttentionCase{2, 1, 2, 8}, AttentionCase{2, 5, 3, 8}, AttentionCase{2, 8, 2, 16},
                                           AttentionCase{1, 37, 2, 32}, AttentionCase{2, 64, 4, 32},
                                           AttentionCase{1, 70, 2, 64}, AttentionCase{1, 33, 1, 24},
                                           // the backward's key blocks (128 keys): exactly two,
                                           // a last block of one key, three with a partial one
                                           AttentionCase{1, 256, 1, 8}, AttentionCase{1, 257, 1, 16},
                                           AttentionCase{1, 301, 2, 32}),
                         [](const ::testing::TestParamInfo<AttentionCase>& info) {
                           const AttentionCase& c = info.param;
                           return "B" + std::to_string(c.B) + "T" + std::to_string(c.T) + "H" +
                                  std::to_string(c.H) + "dh" + std::to_string(c.dh);
                         });

TEST(FusedAttention, ContiguousInputsAndAnyThreadCountGiveTheSameBits) {
  torch::manual_seed(3);
  const int64_t B = 2, T = 40, H = 3, dh = 16;
  auto q = torch::randn({B, T, H, dh}, torch::requires_grad());
  auto k = torch::randn({B, T, H, dh}, torch::requires_grad());
  auto v = torch::randn({B, T, H, dh}, torch::requires_grad());
  auto g = torch::randn({B, T, H, dh});
  const int threads = torch::get_num_threads();
  std::vector<torch::Tensor> runs;
  for (int n : {1, 2, 3}) {
    torch::set_num_threads(n);
    auto o = causal_attention_fast(q, k, v, nullptr);
    auto grads = torch::autograd::grad({o}, {q, k, v}, {g});
    runs.push_back(
        torch::cat({o.flatten(), grads[0].flatten(), grads[1].flatten(), grads[2].flatten()}));
  }
  torch::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(runs[0], runs[1]));
  EXPECT_TRUE(torch::equal(runs[0], runs[2]));
  auto ref = causal_attention_reference(q, k, v, 0, nullptr);
  EXPECT_LT(rel_err(causal_attention_fast(q, k, v, nullptr), ref), 2e-6);
}

TEST(FusedAttention, IsCausalLaterTokensDoNotChangeEarlierOutputs) {
  torch::manual_seed(5);
  const int64_t T = 24;
  auto q = torch::randn({1, T, 2, 8}), k = torch::randn({1, T, 2, 8}),
       v = torch::randn({1, T, 2, 8});
  auto o1 = causal_attention_fast(q, k, v, nullptr);
  auto k2 = k.clone(), v2 = v.clone();
  k2.narrow(1, 10, T - 10).normal_();
  v2.narrow(1, 10, T - 10).normal_();
  auto o2 = causal_attention_fast(q, k2, v2, nullptr);
  EXPECT_TRUE(torch::equal(o1.narrow(1, 0, 10), o2.narrow(1, 0, 10)));
  EXPECT_FALSE(torch::equal(o1.narrow(1, 10, 1), o2.narrow(1, 10, 1)));
}

// bf16 on a CPU without AVX512-BF16 goes through the fp32 kernel (upcast, fp32 inside, output
// cast to bf16; the route is tested here on any CPU): the
// module's output and its input gradients against the composed reference computed in fp32 on the
// same bf16-rounded inputs. Tolerance: bf16 rounding of the output (2^-8 relative, 4e-3) with
// margin, 1e-2 relative; the gradients pass through bf16 casts the same way.
TEST(FusedAttention, Bf16InputsUseTheFp32KernelAndMatchTheFp32Reference) {
  torch::manual_seed(17);
  auto q32 = torch::randn({2, 24, 2, 16}), k32 = torch::randn({2, 24, 2, 16}), v32 = torch::randn({2, 24, 2, 16});
  auto qb = q32.to(torch::kBFloat16).requires_grad_(true), kb = k32.to(torch::kBFloat16).requires_grad_(true),
       vb = v32.to(torch::kBFloat16).requires_grad_(true);
  ASSERT_EQ(choose_attention_path(qb, 0, false, true), attention_kernels::bf16_kernel_available()
                                                          ? AttentionPath::cpu_kernel_bf16_native
                                                          : AttentionPath::cpu_kernel_bf16);
  auto o = causal_attention_fast(qb.to(torch::kFloat), kb.to(torch::kFloat), vb.to(torch::kFloat), nullptr)
               .to(torch::kBFloat16);
  EXPECT_EQ(o.scalar_type(), torch::kBFloat16);
  auto g = torch::randn({2, 24, 2, 16}).to(torch::kBFloat16);
  auto grads = torch::autograd::grad({o}, {qb, kb, vb}, {g});
  // The reference in fp32 on the same (bf16-rounded) inputs.
  auto qr = qb.detach().to(torch::kFloat).requires_grad_(true), kr = kb.detach().to(torch::kFloat).requires_grad_(true),
       vr = vb.detach().to(torch::kFloat).requires_grad_(true);
  auto ref = causal_attention_reference(qr, kr, vr, 0, nullptr);
  auto ref_grads = torch::autograd::grad({ref}, {qr, kr, vr}, {g.to(torch::kFloat)});
  EXPECT_LT(rel_err(o.to(torch::kFloat), ref, 1.0), 1e-2);
  for (int i = 0; i < 3; ++i) EXPECT_LT(rel_err(grads[i].to(torch::kFloat), ref_grads[i], 1.0), 1e-2) << i;
}

TEST(FusedAttention, ExtremeScoresStayFiniteAndMatchReference) {
  // Scores in the hundreds: the row maximum must be subtracted before exp.
  torch::manual_seed(11);
  auto q = torch::randn({1, 16, 1, 8}) * 30, k = torch::randn({1, 16, 1, 8}) * 30;
  auto v = torch::randn({1, 16, 1, 8});
  auto fast = causal_attention_fast(q, k, v, nullptr);
  EXPECT_TRUE(torch::isfinite(fast).all().item<bool>());
  EXPECT_LT(rel_err(fast, causal_attention_reference(q, k, v, 0, nullptr)), 2e-6);
}

TEST(FusedAttention, SecondOrderGradientsMatchReference) {
  torch::manual_seed(13);
  auto q = torch::randn({1, 9, 2, 8}, torch::requires_grad());
  auto k = torch::randn({1, 9, 2, 8}, torch::requires_grad());
  auto v = torch::randn({1, 9, 2, 8}, torch::requires_grad());
  auto second = [&](bool fast) {
    auto o = fast ? causal_attention_fast(q, k, v, nullptr)
                  : causal_attention_reference(q, k, v, 0, nullptr);
    auto gq = torch::autograd::grad({o.pow(2).sum()}, {q}, {}, /*retain_graph=*/true,
                                    /*create_graph=*/true)[0];
    return torch::autograd::grad({gq.sum()}, {k})[0];
  };
  EXPECT_LT(rel_err(second(true), second(false)), 1e-4);
}

TEST(FusedAttention, FastPathCoversOnlyWhatTheKernelImplements) {
  auto q = torch::randn({1, 4, 2, 8});
  EXPECT_TRUE(causal_attention_fast_path_applies(q, 0));
  EXPECT_FALSE(causal_attention_fast_path_applies(q, 30.0));                         // softcap
  EXPECT_FALSE(causal_attention_fast_path_applies(q.to(torch::kDouble), 0));         // double
  EXPECT_FALSE(causal_attention_fast_path_applies(torch::randn({1, 4, 2, 12}), 0));  // dh % 8
}

TEST(FusedAttention, ModuleGivesTheSameLossAndGradientsWithEitherPath) {
  torch::manual_seed(17);
  AttentionOptions o;
  o.d_model = 64;
  o.n_heads = 4;
  o.ctx = 48;
  o.head_scale = true;
  o.rope = true;
  Attention a(o);
  auto x = torch::randn({3, 48, 64});
  auto run = [&](bool fast) {
    a->set_fast_path(fast);
    a->zero_grad();
    auto y = a->forward(x);
    y.pow(2).mean().backward();
    std::vector<torch::Tensor> out{y.detach().flatten()};
    for (auto& p : a->parameters()) out.push_back(p.grad().flatten().clone());
    return torch::cat(out);
  };
  EXPECT_LT(rel_err(run(true), run(false)), 1e-5);
}

// ---- The bf16 kernel (AVX512-BF16; skipped on CPUs without it) ----------------------------
//
// Held to the composed reference computed in fp32 on the same bf16-rounded inputs. Where the bf16
// kernel differs from exact arithmetic on those inputs: the products are exact (bf16 x bf16 fits
// fp32) and summed in fp32; the probabilities and dS are rounded to bf16 (relative 2^-9 each)
// before they multiply v, k and q, D uses the bf16-rounded o, and o, dq, dk, dv are rounded to
// bf16 at the end (2^-9 relative). So the output is within a few 2^-9 of the largest entry: 1e-2
// relative to the largest reference entry; gradients also carry the rounding of dS and D into
// cancelling sums: 2e-2. Largest seen over the shapes below: o 3.2e-3, dq 6.5e-3, dk 8.9e-3, dv
// 3.2e-3. Scores and the statistics come from fp32 sums of exact products: 1e-5.

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor> bf16_qkv(const AttentionCase& c, double scale) {
  auto qkv = (torch::randn({c.B, c.T, 3 * c.H * c.dh}) * scale).to(torch::kBFloat16).requires_grad_(true);
  auto parts = qkv.split(c.H * c.dh, -1);
  auto view = [&](const torch::Tensor& t) { return t.view({c.B, c.T, c.H, c.dh}); };
  return {qkv, view(parts[0]), view(parts[1]), view(parts[2])};
}

class Bf16AttentionTest : public ::testing::TestWithParam<AttentionCase> {};

// Runs `body` once with the AMX tile path allowed (where the CPU has it and dh % 32 == 0) and once
// on the vdpbf16ps loops, naming the path in failures.
template <class F>
void on_both_paths(F body) {
  for (bool amx : {true, false}) {
    attention_kernels::set_amx_allowed(amx);
    SCOPED_TRACE(amx && attention_kernels::amx_available() ? "AMX allowed" : "vdpbf16ps loops");
    body();
  }
  attention_kernels::set_amx_allowed(true);
}

void check_forward_and_gradients(const AttentionCase& c) {
  torch::manual_seed(c.T * 31 + c.dh);
  auto [qkv, q, k, v] = bf16_qkv(c, 1.5);
  ASSERT_TRUE(causal_attention_bf16_kernel_applies(q, 0));
  if (c.dh <= 32 || !have_sdpa()) {
    ASSERT_EQ(choose_attention_path(q, 0, false, true), AttentionPath::cpu_kernel_bf16_native);
  }
  auto g = torch::randn({c.B, c.T, c.H, c.dh}).to(torch::kBFloat16);
  auto fast = causal_attention_fast(q, k, v, nullptr);
  ASSERT_EQ(fast.scalar_type(), torch::kBFloat16);
  auto fast_grads = torch::autograd::grad({fast}, {q, k, v}, {g});

  auto up = [](const torch::Tensor& t) { return t.detach().to(torch::kFloat).requires_grad_(true); };
  auto q32 = up(q), k32 = up(k), v32 = up(v);
  auto ref = causal_attention_reference(q32, k32, v32, 0, nullptr);
  auto ref_grads = torch::autograd::grad({ref}, {q32, k32, v32}, {g.to(torch::kFloat)});
  EXPECT_LT(rel_err(fast.to(torch::kFloat), ref, 1.0), 1e-2);
  const char* names[] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(fast_grads[i].scalar_type(), torch::kBFloat16);
    EXPECT_LT(rel_err(fast_grads[i].to(torch::kFloat), ref_grads[i], 1.0), 2e-2) << names[i];
  }
}

TEST_P(Bf16AttentionTest, ForwardAndGradientsMatchTheFp32ReferenceOnTheSameInputs) {
  if (!attention_kernels::bf16_kernel_available()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  on_both_paths([&] { check_forward_and_gradients(GetParam()); });
}

void check_diagnostics(const AttentionCase& c) {
  torch::manual_seed(7);
  auto [qkv, q, k, v] = bf16_qkv(c, 1.0);
  AttentionStats fast_stats, ref_stats;
  torch::NoGradGuard ng;
  causal_attention_fast(q, k, v, &fast_stats);
  causal_attention_reference(q.to(torch::kFloat), k.to(torch::kFloat), v.to(torch::kFloat), 0, &ref_stats);
  EXPECT_NEAR(fast_stats.entropy.item<double>(), ref_stats.entropy.item<double>(), 1e-5);
  EXPECT_NEAR(fast_stats.logit_max.item<double>(), ref_stats.logit_max.item<double>(), 1e-5);
  EXPECT_NEAR(fast_stats.sink.item<double>(), ref_stats.sink.item<double>(), 1e-5);
  EXPECT_TRUE(torch::allclose(fast_stats.head_max, ref_stats.head_max, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(fast_stats.head_entropy, ref_stats.head_entropy, 1e-5, 1e-5));
}

TEST_P(Bf16AttentionTest, DiagnosticsMatchTheFp32Reference) {
  if (!attention_kernels::bf16_kernel_available()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  on_both_paths([&] { check_diagnostics(GetParam()); });
}

INSTANTIATE_TEST_SUITE_P(Shapes, Bf16AttentionTest,
                         ::testing::Values(AttentionCase{2, 1, 2, 16}, AttentionCase{2, 5, 3, 16}, AttentionCase{2, 16, 2, 32},
                                           AttentionCase{1, 37, 2, 32}, AttentionCase{2, 64, 4, 64}, AttentionCase{1, 70, 2, 48},
                                           AttentionCase{1, 33, 1, 128}, AttentionCase{1, 19, 2, 256},
                                           // key blocks of 128: exactly two, a last block of one
                                           // key, three with a partial one
                                           AttentionCase{1, 256, 1, 16}, AttentionCase{1, 257, 1, 32}, AttentionCase{1, 301, 2, 64}),
                         [](const ::testing::TestParamInfo<AttentionCase>& info) {
                           const AttentionCase& c = info.param;
                           return "B" + std::to_string(c.B) + "T" + std::to_string(c.T) + "H" +
                                  std::to_string(c.H) + "dh" + std::to_string(c.dh);
                         });

TEST(Bf16Attention, AnyThreadCountGivesTheSameBitsAndLaterTokensDoNotReachBack) {
  if (!attention_kernels::bf16_kernel_available()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  on_both_paths([] {
    torch::manual_seed(3);
    const int64_t B = 2, T = 40, H = 3, dh = 32;
    auto mk = [&] { return torch::randn({B, T, H, dh}).to(torch::kBFloat16).requires_grad_(true); };
    auto q = mk(), k = mk(), v = mk();
    auto g = torch::randn({B, T, H, dh}).to(torch::kBFloat16);
    const int threads = torch::get_num_threads();
    std::vector<torch::Tensor> runs;
    for (int n : {1, 2, 3}) {
      torch::set_num_threads(n);
      auto o = causal_attention_fast(q, k, v, nullptr);
      auto grads = torch::autograd::grad({o}, {q, k, v}, {g});
      runs.push_back(torch::cat({o.flatten(), grads[0].flatten(), grads[1].flatten(), grads[2].flatten()}));
    }
    torch::set_num_threads(threads);
    EXPECT_TRUE(torch::equal(runs[0], runs[1]));
    EXPECT_TRUE(torch::equal(runs[0], runs[2]));
    // Causal: changing keys and values from position 10 on leaves outputs 0..9 bit for bit.
    torch::NoGradGuard ng;
    auto o1 = causal_attention_fast(q, k, v, nullptr);
    auto k2 = k.detach().clone(), v2 = v.detach().clone();
    k2.narrow(1, 10, T - 10).normal_();
    v2.narrow(1, 10, T - 10).normal_();
    auto o2 = causal_attention_fast(q, k2, v2, nullptr);
    EXPECT_TRUE(torch::equal(o1.narrow(1, 0, 10), o2.narrow(1, 0, 10)));
    EXPECT_FALSE(torch::equal(o1.narrow(1, 10, 1), o2.narrow(1, 10, 1)));
  });
}

// The two product paths agree to bf16 rounding (they sum the same exact products in another order).
TEST(Bf16Attention, AmxTilesAndDotProductLoopsAgree) {
  if (!attention_kernels::amx_available()) GTEST_SKIP() << "no AMX on this CPU";
  torch::manual_seed(21);
  auto mk = [] { return torch::randn({2, 70, 2, 64}).to(torch::kBFloat16).requires_grad_(true); };
  auto q = mk(), k = mk(), v = mk();
  auto g = torch::randn({2, 70, 2, 64}).to(torch::kBFloat16);
  std::vector<std::vector<torch::Tensor>> out;
  for (bool amx : {true, false}) {
    attention_kernels::set_amx_allowed(amx);
    auto o = causal_attention_fast(q, k, v, nullptr);
    auto grads = torch::autograd::grad({o}, {q, k, v}, {g});
    out.push_back({o, grads[0], grads[1], grads[2]});
  }
  attention_kernels::set_amx_allowed(true);
  for (int i = 0; i < 4; ++i)
    EXPECT_LT(rel_err(out[0][i].to(torch::kFloat), out[1][i].to(torch::kFloat), 1.0), 1e-2) << i;
}

// A view with an odd time stride (one extra column per row) is read through a copy: same results.
TEST(Bf16Attention, OddTimeStridesGiveTheSameResults) {
  if (!attention_kernels::bf16_kernel_available()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  torch::manual_seed(23);
  auto wide = torch::randn({2, 20, 3 * 2 * 32 + 1}).to(torch::kBFloat16);
  auto view = [&](int64_t part) { return wide.narrow(2, part * 64, 64).view({2, 20, 2, 32}); };
  ASSERT_EQ(view(0).stride(1) % 2, 1);
  auto o = causal_attention_fast(view(0), view(1), view(2), nullptr);
  auto ref = causal_attention_fast(view(0).contiguous(), view(1).contiguous(), view(2).contiguous(), nullptr);
  EXPECT_TRUE(torch::equal(o, ref));
}

TEST(Bf16Attention, ExtremeScoresAndSecondOrderGradients) {
  if (!attention_kernels::bf16_kernel_available()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  torch::manual_seed(11);
  // Scores in the hundreds: the row maximum is subtracted before exp.
  auto q = (torch::randn({1, 16, 1, 16}) * 30).to(torch::kBFloat16), k = (torch::randn({1, 16, 1, 16}) * 30).to(torch::kBFloat16);
  auto v = torch::randn({1, 16, 1, 16}).to(torch::kBFloat16);
  auto fast = causal_attention_fast(q, k, v, nullptr);
  EXPECT_TRUE(torch::isfinite(fast).all().item<bool>());
  EXPECT_LT(rel_err(fast.to(torch::kFloat),
                    causal_attention_reference(q.to(torch::kFloat), k.to(torch::kFloat), v.to(torch::kFloat), 0, nullptr), 1.0),
            1e-2);
  // create_graph: the differentiable formulas in fp32, the gradients cast to bf16.
  auto mk = [] { return torch::randn({1, 9, 2, 16}).to(torch::kBFloat16).requires_grad_(true); };
  auto qb = mk(), kb = mk(), vb = mk();
  auto second = [&](bool fast_path) {
    auto qq = fast_path ? qb : qb.to(torch::kFloat), kk = fast_path ? kb : kb.to(torch::kFloat),
         vv = fast_path ? vb : vb.to(torch::kFloat);
    auto o = fast_path ? causal_attention_fast(qq, kk, vv, nullptr) : causal_attention_reference(qq, kk, vv, 0, nullptr);
    auto gq = torch::autograd::grad({o.to(torch::kFloat).pow(2).sum()}, {qb}, {}, true, true)[0];
    return torch::autograd::grad({gq.to(torch::kFloat).sum()}, {kb})[0].to(torch::kFloat);
  };
  EXPECT_LT(rel_err(second(true), second(false)), 3e-2);
}

TEST(Bf16Attention, AppliesOnlyWhereTheKernelDoes) {
  auto q = torch::randn({1, 4, 2, 16}).to(torch::kBFloat16);
  EXPECT_EQ(causal_attention_bf16_kernel_applies(q, 0), attention_kernels::bf16_kernel_available());
  EXPECT_FALSE(causal_attention_bf16_kernel_applies(q, 30.0));                                          // softcap
  EXPECT_FALSE(causal_attention_bf16_kernel_applies(q.to(torch::kFloat), 0));                           // fp32
  EXPECT_FALSE(causal_attention_bf16_kernel_applies(torch::randn({1, 4, 2, 24}).to(torch::kBFloat16), 0));   // dh % 16
  EXPECT_FALSE(causal_attention_bf16_kernel_applies(torch::randn({1, 4, 1, 512}).to(torch::kBFloat16), 0));  // too wide
  // dh 24 (a multiple of 8, not of 16) still takes the fp32 kernel on upcast inputs
  EXPECT_EQ(choose_attention_path(torch::randn({1, 4, 2, 24}).to(torch::kBFloat16), 0, true, true),
            AttentionPath::cpu_kernel_bf16);
}

}  // namespace
}  // namespace normlab
