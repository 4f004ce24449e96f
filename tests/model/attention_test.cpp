#include "model/attention.h"
#include "model/attention_kernels.h"

#include <gtest/gtest.h>

#include "core/torch_compat.h"
#include "model/transformer.h"

namespace normlab {
namespace {

AttentionOptions opts(int64_t d = 32, int64_t H = 4) {
  AttentionOptions o;
  o.d_model = d;
  o.n_heads = H;
  o.ctx = 16;
  return o;
}

// Attention written out per head with loops, from the contract (no shared code with the module).
torch::Tensor reference_attention(Attention& a, const torch::Tensor& x, int64_t H) {
  const int64_t B = x.size(0), T = x.size(1), d = x.size(2), dh = d / H;
  auto p = a->named_parameters();
  auto q = torch::matmul(x, p["q_proj.weight"].t()), k = torch::matmul(x, p["k_proj.weight"].t()),
       v = torch::matmul(x, p["v_proj.weight"].t());
  auto out = torch::zeros_like(x);
  for (int64_t h = 0; h < H; ++h) {
    auto qh = q.narrow(2, h * dh, dh), kh = k.narrow(2, h * dh, dh), vh = v.narrow(2, h * dh, dh);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        auto s = torch::mv(kh[b].narrow(0, 0, t + 1), qh[b][t]) / std::sqrt(static_cast<double>(dh));
        auto w = torch::softmax(s, 0);
        auto o = torch::mv(vh[b].narrow(0, 0, t + 1).t(), w);
        if (p.contains("gate.weight")) {  // o_h * sigmoid(x_in Wg^T): one row per head or channel
          auto g = torch::sigmoid(torch::mv(p["gate.weight"], x[b][t]));
          o = o * (g.size(0) == H ? g[h] : g.narrow(0, h * dh, dh));
        }
        if (p.contains("head_scale")) o = o * p["head_scale"][h];
        out[b][t].narrow(0, h * dh, dh).copy_(o);
      }
    }
  }
  if (a->inner_norm) out = a->inner_norm->forward(out);
  return torch::matmul(out, p["out_proj.weight"].t());
}

TEST(AttentionTest, MatchesPerHeadLoopReference) {
  torch::manual_seed(0);
  auto o = opts();
  o.head_scale = true;
  Attention a(o);
  a->to(torch::kDouble);
  {
    torch::NoGradGuard ng;
    a->head_scale.copy_(torch::tensor({0.5, 1.0, 2.0, -1.0}));
  }
  auto x = torch::randn({2, 7, 32}, torch::kDouble);
  EXPECT_TRUE(torch::allclose(a->forward(x), reference_attention(a, x, 4), 1e-10, 1e-12));
}

TEST(AttentionTest, StatsEntropyIsLogTPlusOneForUniformAttentionAndMaxLogitMatches) {
  auto o = opts(8, 2);
  Attention a(o);
  {
    torch::NoGradGuard ng;
    a->q_proj->weight.zero_();  // all scores 0 -> uniform over the t+1 visible keys
  }
  a->set_capture(true);
  const int64_t T = 6;
  a->forward(torch::randn({3, T, 8}));
  double mean_ln = 0;
  for (int64_t t = 0; t < T; ++t) mean_ln += std::log(t + 1.0) / T;
  EXPECT_NEAR(a->stats().entropy.item<double>(), mean_ln, 1e-6);
  EXPECT_NEAR(a->stats().logit_max.item<double>(), 0.0, 1e-7);
  ASSERT_EQ(a->stats().head_entropy.numel(), 2);  // uniform in every head
  for (int h = 0; h < 2; ++h) EXPECT_NEAR(a->stats().head_entropy[h].item<double>(), mean_ln, 1e-6);

  // Hand-made scores: q = k = x with identity projections, so s[t][u] = x_t.x_u / sqrt(dh).
  Attention b(opts(4, 1));
  {
    torch::NoGradGuard ng;
    b->q_proj->weight.copy_(torch::eye(4));
    b->k_proj->weight.copy_(torch::eye(4));
  }
  b->set_capture(true);
  auto x = torch::tensor({{{1.0f, 0.0f, 0.0f, 0.0f}, {3.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.5f}}});
  b->forward(x);
  // Unmasked pairs only: max is x1.x1 = 9 / 2 (the masked pair x0.x1 = 3 must not count either way).
  EXPECT_NEAR(b->stats().logit_max.item<double>(), 4.5, 1e-6);
  EXPECT_GE(b->stats().entropy.item<double>(), 0.0);
  EXPECT_LE(b->stats().entropy.item<double>(), std::log(3.0));
}

TEST(AttentionTest, QkNormBoundsLogitsBySqrtDhTimesGains) {
  torch::manual_seed(0);
  for (const char* type : {"rmsnorm", "rmsnorm_1p"}) {
    auto o = opts(32, 4);
    o.qk_norm = true;
    o.qk_norm_type = type;
    o.qk_norm_options.size = 8;
    o.qk_norm_options.eps = 1e-6;
    Attention a(o);
    {
      torch::NoGradGuard ng;
      a->q_proj->weight.mul_(200);  // huge raw logits without the norm
      a->q_norm->named_parameters()["weight"].fill_(std::string(type) == "rmsnorm" ? 1.5 : 0.5);
      a->k_norm->named_parameters()["weight"].fill_(std::string(type) == "rmsnorm" ? 0.8 : -0.2);
    }
    a->set_capture(true);
    a->forward(torch::randn({2, 16, 32}) * 10);
    const double gain = std::string(type) == "rmsnorm" ? 1.5 * 0.8 : 1.5 * 0.8;
    EXPECT_LE(a->stats().logit_max.item<double>(), std::sqrt(8.0) * gain + 1e-4) << type;
    EXPECT_GT(a->stats().logit_max.item<double>(), 0.3 * std::sqrt(8.0) * gain) << type;  // bound is tight-ish
  }
}

TEST(AttentionTest, SoftcapBoundsScoresAndLogits) {
  torch::manual_seed(0);
  auto o = opts();
  o.softcap = 5.0;
  Attention a(o);
  {
    torch::NoGradGuard ng;
    a->q_proj->weight.mul_(100);
  }
  a->set_capture(true);
  a->forward(torch::randn({2, 16, 32}) * 5);
  EXPECT_LE(a->stats().logit_max.item<double>(), 5.0);
  EXPECT_GT(a->stats().logit_max.item<double>(), 4.0);

  ModelConfig m;
  m.ctx = 8;
  m.d_model = 16;
  m.n_heads = 2;
  m.d_ff = 32;
  m.n_layers = 1;
  m.logit_softcap = 3.0;
  resolve_model_config(m);
  Transformer t(m);
  {
    torch::NoGradGuard ng;
    t->tok_emb->weight.normal_(0, 10);
  }
  auto logits = t->forward(torch::randint(0, 256, {2, 8}, torch::kLong));
  EXPECT_LE(logits.abs().max().item<double>(), 3.0);
  EXPECT_GT(logits.abs().max().item<double>(), 2.5);
}

TEST(AttentionTest, RopeRotatesHalfPairsByTheContractAngle) {
  // One head, dh = 4, identity projections on q and k: q_t after RoPE is x_t rotated, so the
  // score between positions t and u depends on (t - u) only and equals the hand-rotated dot.
  auto o = opts(4, 1);
  o.rope = true;
  Attention a(o);
  {
    torch::NoGradGuard ng;
    a->q_proj->weight.copy_(torch::eye(4));
    a->k_proj->weight.copy_(torch::eye(4));
    a->v_proj->weight.copy_(torch::eye(4));
    a->out_proj->weight.copy_(torch::eye(4));
  }
  a->set_capture(true);
  auto rot = [](const torch::Tensor& x, int64_t t) {  // dims (0,2) by t*1, (1,3) by t*10000^(-1/2)
    auto y = x.clone();
    for (int64_t j = 0; j < 2; ++j) {
      const double ang = t * std::pow(10000.0, -2.0 * j / 4.0);
      y[j] = x[j] * std::cos(ang) - x[j + 2] * std::sin(ang);
      y[j + 2] = x[j + 2] * std::cos(ang) + x[j] * std::sin(ang);
    }
    return y;
  };
  auto x0 = torch::tensor({1.0f, 0.5f, -0.3f, 0.2f}), x1 = torch::tensor({0.2f, -1.0f, 0.4f, 0.9f});
  auto x = torch::stack({x0, x1}).unsqueeze(0);
  a->forward(x);
  // Max over unmasked scores {q0.k0, q1.k0, q1.k1}: compute by hand.
  auto q0 = rot(x0, 0), q1 = rot(x1, 1), k0 = rot(x0, 0), k1 = rot(x1, 1);
  const double s = std::max({q0.dot(k0).item<double>(), q1.dot(k0).item<double>(), q1.dot(k1).item<double>()}) / 2.0;
  EXPECT_NEAR(a->stats().logit_max.item<double>(), s, 1e-5);
}

// The dispatch point: the fused CPU kernel for float32 CPU; for bf16 CPU the bf16 kernel (AVX512-BF16,
// any dh it serves) or else the fp32 kernel (upcast, computed in fp32, cast back) up to dh 32; SDPA
// (LibTorch 2.x) for anything else when neither statistics nor a softcap are asked for, the
// reference otherwise.
TEST(AttentionDispatch, ChoosesThePathTheContractAllows) {
  auto f32 = torch::randn({2, 8, 2, 16});
  auto bf = f32.to(torch::kBFloat16), f64 = f32.to(torch::kDouble);
  const auto fused = have_sdpa() ? AttentionPath::sdpa : AttentionPath::reference;
  EXPECT_EQ(choose_attention_path(f32, 0, false, true), AttentionPath::cpu_kernel);
  EXPECT_EQ(choose_attention_path(f32, 0, true, true), AttentionPath::cpu_kernel);  // fills the stats itself
  EXPECT_EQ(choose_attention_path(f32, 0, false, false), AttentionPath::reference);
  // bf16: the bf16 kernel where the CPU has AVX512-BF16 (dh a multiple of 16), else the fp32 one
  const auto bf_kernel = attention_kernels::bf16_kernel_available() ? AttentionPath::cpu_kernel_bf16_native
                                                                    : AttentionPath::cpu_kernel_bf16;
  EXPECT_EQ(choose_attention_path(bf, 0, false, true), bf_kernel);
  EXPECT_EQ(choose_attention_path(bf, 0, true, true), bf_kernel) << "fills the stats itself";
  EXPECT_EQ(choose_attention_path(f64, 0, false, true), fused);
  EXPECT_EQ(choose_attention_path(f64, 0, true, true), AttentionPath::reference) << "statistics: explicit";
  EXPECT_EQ(choose_attention_path(bf, 30.0, false, true), AttentionPath::reference) << "softcap: neither kernel";
  EXPECT_EQ(choose_attention_path(torch::randn({2, 8, 2, 12}).to(torch::kBFloat16), 0, false, true), fused) << "dh % 8";
  // bf16 heads wider than 32: the bf16 kernel where the CPU has AVX512-BF16 (faster than SDPA), else
  // SDPA where it can serve, else the fp32 kernel on upcast inputs.
  const auto wide = torch::randn({2, 8, 2, 64}).to(torch::kBFloat16);
  EXPECT_EQ(choose_attention_path(wide, 0, false, true),
            attention_kernels::bf16_kernel_available() ? AttentionPath::cpu_kernel_bf16_native
            : have_sdpa()                              ? AttentionPath::sdpa
                                                       : AttentionPath::cpu_kernel_bf16);
  EXPECT_EQ(choose_attention_path(wide, 0, true, true), bf_kernel) << "statistics";
  EXPECT_EQ(choose_attention_path(torch::randn({2, 8, 2, 64}), 0, false, true), AttentionPath::cpu_kernel) << "fp32: any dh";
}

// SDPA against the composed reference, forward and every input gradient, on strided (B, T, H, dh)
// views of one projection as the module makes them (LibTorch 2.x; skipped on 1.x).
TEST(AttentionDispatch, SdpaMatchesTheReferenceForwardAndBackward) {
  if (!have_sdpa()) GTEST_SKIP() << "this LibTorch has no scaled_dot_product_attention";
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    torch::manual_seed(5);
    auto qkv = torch::randn({3, 24, 3 * 32}, torch::TensorOptions().dtype(dtype)).requires_grad_(true);
    auto views = [&](const torch::Tensor& t) {
      auto parts = t.split(32, -1);
      return std::vector<torch::Tensor>{parts[0].view({3, 24, 4, 8}), parts[1].view({3, 24, 4, 8}),
                                        parts[2].view({3, 24, 4, 8})};
    };
    auto a = views(qkv);
    auto ref = causal_attention_reference(a[0], a[1], a[2], 0, nullptr);
    auto g = torch::randn_like(ref);
    auto dref = torch::autograd::grad({ref}, {qkv}, {g})[0];
    auto b = views(qkv);
    auto out = causal_sdpa(b[0], b[1], b[2]);
    auto dout = torch::autograd::grad({out}, {qkv}, {g})[0];
    const double tol = dtype == torch::kDouble ? 1e-10 : 1e-5;
    EXPECT_TRUE(torch::allclose(out, ref, tol, tol)) << dtype;
    EXPECT_TRUE(torch::allclose(dout, dref, tol, tol)) << dtype;
  }
}

// A module in bf16 on the CPU takes the bf16 kernel (AVX512-BF16, dh a multiple of 16) or the fp32
// kernel (upcast), on diagnostics forwards too (either fills the statistics); the output agrees
// with the module's composed reference path to bf16 precision. dh 8 and dh 32.
TEST(AttentionDispatch, ModuleInBf16OnTheCpuUsesAKernelWithAndWithoutStatistics) {
  for (int64_t d : {32, 64}) {
    torch::manual_seed(2);
    Attention a(opts(d, d == 32 ? 4 : 2));
    a->to(torch::kBFloat16);
    auto x = torch::randn({2, 16, d}).to(torch::kBFloat16);
    auto y = a->forward(x);
    const auto bf_kernel = attention_kernels::bf16_kernel_available() && d == 64 ? AttentionPath::cpu_kernel_bf16_native
                                                                                 : AttentionPath::cpu_kernel_bf16;
    EXPECT_EQ(a->last_path(), bf_kernel) << "d " << d;
    EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
    a->set_capture(true);
    auto y2 = a->forward(x);
    EXPECT_EQ(a->last_path(), bf_kernel);
    EXPECT_TRUE(a->stats().entropy.defined());
    a->set_capture(false);
    a->set_fast_path(false);
    auto ref = a->forward(x);
    EXPECT_EQ(a->last_path(), AttentionPath::reference);
    EXPECT_TRUE(torch::allclose(y.to(torch::kFloat), ref.to(torch::kFloat), 2e-2, 2e-2)) << "d " << d;
    EXPECT_TRUE(torch::equal(y, y2));
  }
}

// ---- Issue 15's attention options.

TEST(AttentionOptionsTest, GatesAndSubLnInnerNormMatchTheLoopReference) {
  for (auto gate : {AttnGate::kHead, AttnGate::kElementwise}) {
    for (bool inner : {false, true}) {
      torch::manual_seed(21);
      auto o = opts(32, 4);
      o.gate = gate;
      if (inner) o.inner_norm_type = "layernorm";
      Attention a(o);
      a->to(torch::kDouble);
      {
        torch::NoGradGuard ng;
        a->gate->weight.normal_(0, 0.5);
        if (inner) {
          for (auto& t : a->inner_norm->parameters()) t.normal_(1, 0.3);
        }
      }
      auto x = torch::randn({2, 7, 32}, torch::kDouble);
      EXPECT_EQ(a->gate->weight.size(0), gate == AttnGate::kHead ? 4 : 32);
      EXPECT_FALSE(a->gate->bias.defined());
      EXPECT_TRUE(torch::allclose(a->forward(x), reference_attention(a, x, 4), 1e-10, 1e-10))
          << static_cast<int>(gate) << " inner " << inner;
    }
  }
}

TEST(AttentionOptionsTest, ZeroGateHalvesTheOutput) {
  torch::manual_seed(22);
  auto o = opts(32, 4);
  Attention plain(o);
  o.gate = AttnGate::kElementwise;
  Attention gated(o);
  {
    torch::NoGradGuard ng;
    for (const char* n : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      gated->named_parameters()[std::string(n) + ".weight"].copy_(plain->named_parameters()[std::string(n) + ".weight"]);
    }
    gated->gate->weight.zero_();
  }
  auto x = torch::randn({2, 9, 32});
  EXPECT_TRUE(torch::allclose(gated->forward(x), 0.5 * plain->forward(x), 1e-5, 1e-6));
}

// rmsnorm_free is invariant to scaling its input: per head (axis head) it forgives scaling one
// head's rows of q_proj; over all heads (axis all) it does not, but forgives scaling all rows.
TEST(AttentionOptionsTest, QkNormAxisDecidesWhichRescalingsAreInvisible) {
  for (bool all : {false, true}) {
    torch::manual_seed(23);
    auto o = opts(32, 4);
    o.qk_norm = true;
    o.qk_norm_type = "rmsnorm_free";
    o.qk_norm_all = all;
    o.qk_norm_options.size = all ? 32 : 8;
    o.qk_norm_options.eps = 1e-12;
    Attention a(o);
    a->to(torch::kDouble);
    auto x = torch::randn({2, 6, 32}, torch::kDouble);
    auto y = a->forward(x);
    torch::NoGradGuard ng;
    a->q_proj->weight.narrow(0, 8, 8).mul_(3.0);  // head 1's rows only
    const double one_head = (a->forward(x) - y).abs().max().item<double>();
    a->q_proj->weight.narrow(0, 8, 8).div_(3.0);
    a->q_proj->weight.mul_(3.0);
    const double every_head = (a->forward(x) - y).abs().max().item<double>();
    if (all) {
      EXPECT_GT(one_head, 1e-4);
    } else {
      EXPECT_LT(one_head, 1e-10);
    }
    EXPECT_LT(every_head, 1e-10) << all;
  }
}

TEST(AttentionOptionsTest, VNormMakesTheOutputInvariantToScalingVProj) {
  torch::manual_seed(24);
  auto o = opts(32, 4);
  o.v_norm = true;
  o.qk_norm_type = "rmsnorm_free";
  o.qk_norm_options.size = 8;
  o.qk_norm_options.eps = 1e-12;
  Attention a(o);
  a->to(torch::kDouble);
  EXPECT_TRUE(a->v_norm && !a->q_norm && !a->k_norm);
  auto x = torch::randn({2, 6, 32}, torch::kDouble);
  auto y = a->forward(x);
  torch::NoGradGuard ng;
  a->v_proj->weight.mul_(5.0);
  EXPECT_LT((a->forward(x) - y).abs().max().item<double>(), 1e-10);
}

// RoPE rotates pairs (j, j + dh/2) inside a head: an RMS norm with a uniform gain commutes with
// it, one with a per-channel gain does not, so before_rope and after_rope differ exactly then.
TEST(AttentionOptionsTest, QkNormPositionMattersOnlyThroughTheGain) {
  auto make = [](bool after) {
    torch::manual_seed(25);
    auto o = opts(32, 4);
    o.rope = true;
    o.qk_norm = true;
    o.qk_norm_type = "rmsnorm";
    o.qk_norm_options.size = 8;
    o.qk_norm_options.eps = 1e-6;
    o.qk_norm_after_rope = after;
    Attention a(o);
    a->to(torch::kDouble);
    return a;
  };
  auto before = make(false), after = make(true);
  auto x = torch::randn({2, 10, 32}, torch::kDouble);
  EXPECT_LT((before->forward(x) - after->forward(x)).abs().max().item<double>(), 1e-12);
  torch::NoGradGuard ng;
  auto w = torch::rand({8}, torch::kDouble) + 0.5;
  for (auto* a : {&before, &after}) {
    (*a)->q_norm->named_parameters()["weight"].copy_(w);
    (*a)->k_norm->named_parameters()["weight"].copy_(w.flip(0));
  }
  EXPECT_GT((before->forward(x) - after->forward(x)).abs().max().item<double>(), 1e-4);
}

TEST(AttentionOptionsTest, HeadMaxIsPerHeadBeforeSoftcapAndAccumulatesOverForwards) {
  torch::manual_seed(26);
  auto o = opts(32, 4);
  o.softcap = 1.0;  // the composed path; the per-head max is taken before the cap
  Attention a(o);
  {
    torch::NoGradGuard ng;
    a->q_proj->weight.mul_(40);
  }
  a->set_track_head_max(true);
  auto x1 = torch::randn({2, 8, 32}), x2 = torch::randn({1, 8, 32}) * 3;
  a->forward(x1);
  auto m1 = a->stats().head_max.clone();
  a->forward(x2);
  auto m2 = a->stats().head_max.clone();
  auto taken = a->take_head_max();
  EXPECT_TRUE(torch::equal(taken, torch::maximum(m1, m2)));
  EXPECT_GT(taken.max().item<double>(), 1.0);  // above the cap: measured before it
  EXPECT_FALSE(a->take_head_max().defined());  // reset
  // Per head: the loop reference's max scaled dot product of head h.
  auto p = a->named_parameters();
  auto q = torch::matmul(x1, p["q_proj.weight"].t()), k = torch::matmul(x1, p["k_proj.weight"].t());
  for (int64_t h = 0; h < 4; ++h) {
    auto s = torch::matmul(q.narrow(2, h * 8, 8), k.narrow(2, h * 8, 8).transpose(1, 2)) / std::sqrt(8.0);
    s = s.masked_fill(torch::ones({8, 8}, torch::kBool).triu(1), -1e30);
    EXPECT_NEAR(m1[h].item<double>(), s.max().item<double>(), 1e-4 * std::abs(s.max().item<double>()));
  }
}

}  // namespace
}  // namespace normlab
