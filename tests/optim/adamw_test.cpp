#include "optim/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "core/torch_compat.h"

namespace normlab {
namespace {

// Decay (optim.weight_decay) on tensors of 2 or more dimensions, rate multiplier 1 (what the roles
// give these tests' matrices and vectors).
std::vector<RatedParam> by_dim(const NamedTensors& named, const OptimConfig& o = {}) {
  std::vector<RatedParam> out;
  for (const auto& [n, t] : named)
    out.push_back({n, t, t.dim() >= 2 ? Role::kMatrix : Role::kGain, 1.0, t.dim() >= 2 ? o.weight_decay : 0.0});
  return out;
}

// Two steps of AdamW against the update written out by hand (torch.optim.AdamW's form).
TEST(AdamWTest, MatchesHandWrittenUpdateAndDecaysOnlyMatrices) {
  OptimConfig o;
  o.betas = {0.9, 0.95};
  o.eps = 1e-8;
  o.weight_decay = 0.1;
  auto w = torch::tensor({{1.0, -2.0}, {0.5, 3.0}}, torch::kDouble).requires_grad_(true);
  auto b = torch::tensor({0.3, -0.7}, torch::kDouble).requires_grad_(true);
  AdamW opt(by_dim({{"w", w}, {"b", b}}, o), o);
  EXPECT_EQ(opt.params()[0].weight_decay, 0.1);
  EXPECT_EQ(opt.params()[1].weight_decay, 0.0);

  auto w_ref = w.detach().clone(), b_ref = b.detach().clone();
  auto m_w = torch::zeros_like(w_ref), v_w = torch::zeros_like(w_ref);
  auto m_b = torch::zeros_like(b_ref), v_b = torch::zeros_like(b_ref);
  const double lrs[] = {1e-2, 5e-3};
  for (int t = 1; t <= 2; ++t) {
    auto gw = torch::tensor({{0.1 * t, -0.2}, {0.3, 0.05 * t}}, torch::kDouble);
    auto gb = torch::tensor({-0.4, 0.2 * t}, torch::kDouble);
    w.mutable_grad() = gw.clone();
    b.mutable_grad() = gb.clone();
    const double lr = lrs[t - 1];
    opt.step(lr);
    auto ref = [&](torch::Tensor& p, torch::Tensor& m, torch::Tensor& v, const torch::Tensor& g,
                   bool decay) {
      if (decay) p = p * (1 - lr * 0.1);
      m = 0.9 * m + 0.1 * g;
      v = 0.95 * v + 0.05 * g * g;
      auto mhat = m / (1 - std::pow(0.9, t));
      auto vhat = v / (1 - std::pow(0.95, t));
      p = p - lr * mhat / (vhat.sqrt() + 1e-8);
    };
    ref(w_ref, m_w, v_w, gw, true);
    ref(b_ref, m_b, v_b, gb, false);
    EXPECT_TRUE(torch::allclose(w.detach(), w_ref, 1e-12, 1e-14)) << w << w_ref;
    EXPECT_TRUE(torch::allclose(b.detach(), b_ref, 1e-12, 1e-14)) << b << b_ref;
  }
  EXPECT_EQ(opt.steps_taken(), 2);
}

TEST(AdamWTest, StateRoundTripsByName) {
  OptimConfig o;
  auto w = torch::randn({3, 2}).requires_grad_(true);
  AdamW a(by_dim({{"w", w}}), o);
  w.mutable_grad() = torch::randn({3, 2});
  a.step(1e-3);
  auto w2 = w.detach().clone().requires_grad_(true);
  AdamW b(by_dim({{"w", w2}}), o);
  b.load_state(a.state(), a.steps_taken());
  auto g = torch::randn({3, 2});
  w.mutable_grad() = g.clone();
  w2.mutable_grad() = g.clone();
  a.step(1e-3);
  b.step(1e-3);
  EXPECT_TRUE(torch::equal(w.detach(), w2.detach()));
  EXPECT_EQ(a.state()[0].first, "exp_avg.w");
  EXPECT_EQ(a.state()[1].first, "exp_avg_sq.w");
}

// The hand-written update in double, with the gradient scaled by the clipping coefficient.
void reference_step(torch::Tensor& p, torch::Tensor& m, torch::Tensor& v, const torch::Tensor& g,
                    bool decay, double lr, double scale, int t) {
  const auto gs = g * scale;
  if (decay) p = p * (1 - lr * 0.1);
  m = 0.9 * m + 0.1 * gs;
  v = 0.95 * v + 0.05 * gs * gs;
  p = p - lr * (m / (1 - std::pow(0.9, t))) / ((v / (1 - std::pow(0.95, t))).sqrt() + 1e-8);
}

// Float CPU parameters take the fused kernel: several pieces per tensor (60000 elements), a
// clipping scale folded into the gradient, decay on the matrix only.
TEST(AdamWTest, FusedKernelMatchesHandWrittenUpdateWithClipScale) {
  OptimConfig o;
  o.betas = {0.9, 0.95};
  o.weight_decay = 0.1;
  torch::manual_seed(4);
  auto w = torch::randn({200, 300}).requires_grad_(true);
  auto b = torch::randn({300}).requires_grad_(true);
  AdamW opt(by_dim({{"w", w}, {"b", b}}, o), o);
  auto w_ref = w.detach().to(torch::kDouble), b_ref = b.detach().to(torch::kDouble);
  auto m_w = torch::zeros_like(w_ref), v_w = torch::zeros_like(w_ref);
  auto m_b = torch::zeros_like(b_ref), v_b = torch::zeros_like(b_ref);
  for (int t = 1; t <= 3; ++t) {
    const double lr = 1e-2 / t, scale = t == 2 ? 1.0 : 0.25;
    auto gw = torch::randn({200, 300}), gb = torch::randn({300});
    w.mutable_grad() = gw.clone();
    b.mutable_grad() = gb.clone();
    opt.step(lr, scale);
    reference_step(w_ref, m_w, v_w, gw.to(torch::kDouble), true, lr, scale, t);
    reference_step(b_ref, m_b, v_b, gb.to(torch::kDouble), false, lr, scale, t);
    EXPECT_LT((w.detach().to(torch::kDouble) - w_ref).abs().max().item<double>(), 2e-6) << t;
    EXPECT_LT((b.detach().to(torch::kDouble) - b_ref).abs().max().item<double>(), 2e-6) << t;
  }
  auto state = opt.state();
  EXPECT_LT((state[0].second.to(torch::kDouble) - m_w).abs().max().item<double>(), 1e-6);
  EXPECT_LT((state[1].second.to(torch::kDouble) - v_w).abs().max().item<double>(), 1e-6);
}

// Double parameters take the composed path, with the same clipping scale.
TEST(AdamWTest, ComposedPathAppliesTheClipScale) {
  OptimConfig o;
  o.betas = {0.9, 0.95};
  o.weight_decay = 0.1;
  auto w = torch::tensor({{1.0, -2.0}, {0.5, 3.0}}, torch::kDouble).requires_grad_(true);
  AdamW opt(by_dim({{"w", w}}, o), o);
  auto w_ref = w.detach().clone(), m = torch::zeros_like(w_ref), v = torch::zeros_like(w_ref);
  auto g = torch::tensor({{0.1, -0.2}, {0.3, 0.05}}, torch::kDouble);
  w.mutable_grad() = g.clone();
  opt.step(1e-2, 0.3);
  reference_step(w_ref, m, v, g, true, 1e-2, 0.3, 1);
  EXPECT_TRUE(torch::allclose(w.detach(), w_ref, 1e-12, 1e-14));
}

// LibTorch's fused AdamW (the CUDA path; its CPU kernel here) against the composed reference:
// several steps with a clip scale, a restored state in between, parameters and both moments
// agree. Skipped where this LibTorch has no fused AdamW (Debian's 1.13).
TEST(AdamWTest, LibTorchFusedPathMatchesTheComposedUpdate) {
  if (!have_libtorch_fused_adamw()) GTEST_SKIP() << "LibTorch < 2.4: no fused AdamW";
  auto make = [](AdamW::Path path) {
    torch::manual_seed(4);
    std::vector<std::pair<std::string, torch::Tensor>> named = {
        {"w", torch::randn({6, 5})}, {"b", torch::randn({5})}, {"g", torch::randn({7})}};
    OptimConfig o;
    auto opt = std::make_unique<AdamW>(by_dim(named), o);
    opt->force_path(path);
    return std::make_pair(named, std::move(opt));
  };
  auto [pa, a] = make(AdamW::Path::composed);
  auto [pb, b] = make(AdamW::Path::libtorch_fused);
  for (int s = 0; s < 4; ++s) {
    torch::manual_seed(100 + s);
    for (size_t i = 0; i < pa.size(); ++i) {
      auto g = torch::randn_like(pa[i].second);
      pa[i].second.mutable_grad() = g.clone();
      pb[i].second.mutable_grad() = g.clone();
    }
    a->step(1e-2, 0.37);
    b->step(1e-2, 0.37);
    if (s == 1) b->load_state(b->state(), b->steps_taken());  // the step counts are rebuilt
  }
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(torch::allclose(pa[i].second, pb[i].second, 1e-6, 1e-7))
        << pa[i].first << ": max diff " << (pa[i].second - pb[i].second).abs().max().item<double>();
  }
  auto sa = a->state(), sb = b->state();
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_TRUE(torch::allclose(sa[i].second, sb[i].second, 1e-5, 1e-9))
        << sa[i].first << ": max diff " << (sa[i].second - sb[i].second).abs().max().item<double>();
  }
}

// The fused CPU kernel serves parameters of several rates and decay coefficients in groups (one
// call per rate and decay): each parameter moves as the composed update with its own rate and
// decay moves it, including two decay coefficients under one rate and undecayed parameters beside
// them.
TEST(AdamWTest, OwnKernelGroupsByRateAndDecayAsTheComposedUpdate) {
  auto make = [](AdamW::Path path) {
    torch::manual_seed(9);
    std::vector<RatedParam> params = {
        {"a", torch::randn({6, 5}), Role::kMatrix, 1.0, 0.1},  {"b", torch::randn({5}), Role::kGain, 1.0, 0.0},
        {"c", torch::randn({4, 5}), Role::kMatrix, 1.0, 0.4},  {"d", torch::randn({7}), Role::kGain, 0.5, 0.0},
        {"e", torch::randn({3, 3}), Role::kEmbedding, 2.0, 0.2}, {"f", torch::randn({3, 4}), Role::kHead, 0.5, 0.05}};
    OptimConfig o;
    auto opt = std::make_unique<AdamW>(params, o);
    opt->force_path(path);
    return std::make_pair(params, std::move(opt));
  };
  auto [pa, a] = make(AdamW::Path::composed);
  auto [pb, b] = make(AdamW::Path::own_cpu_kernel);
  for (int s = 0; s < 3; ++s) {
    torch::manual_seed(200 + s);
    for (size_t i = 0; i < pa.size(); ++i) {
      auto g = torch::randn_like(pa[i].tensor);
      pa[i].tensor.mutable_grad() = g.clone();
      pb[i].tensor.mutable_grad() = g.clone();
    }
    a->step(3e-2, 0.8);
    b->step(3e-2, 0.8);
  }
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(torch::allclose(pa[i].tensor, pb[i].tensor, 1e-6, 1e-7))
        << pa[i].name << ": max diff " << (pa[i].tensor - pb[i].tensor).abs().max().item<double>();
  }
}

}  // namespace
}  // namespace normlab
