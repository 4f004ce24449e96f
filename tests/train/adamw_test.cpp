#include "train/adamw.h"

#include <gtest/gtest.h>

namespace normlab {
namespace {

// Two steps of AdamW against the update written out by hand (torch.optim.AdamW's form).
TEST(AdamWTest, MatchesHandWrittenUpdateAndDecaysOnlyMatrices) {
  OptimConfig o;
  o.betas = {0.9, 0.95};
  o.eps = 1e-8;
  o.weight_decay = 0.1;
  auto w = torch::tensor({{1.0, -2.0}, {0.5, 3.0}}, torch::kDouble).requires_grad_(true);
  auto b = torch::tensor({0.3, -0.7}, torch::kDouble).requires_grad_(true);
  AdamW opt({{"w", w}, {"b", b}}, o);
  EXPECT_TRUE(opt.decays(0));
  EXPECT_FALSE(opt.decays(1));

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
    auto ref = [&](torch::Tensor& p, torch::Tensor& m, torch::Tensor& v, const torch::Tensor& g, bool decay) {
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
  AdamW a({{"w", w}}, o);
  w.mutable_grad() = torch::randn({3, 2});
  a.step(1e-3);
  auto w2 = w.detach().clone().requires_grad_(true);
  AdamW b({{"w", w2}}, o);
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

}  // namespace
}  // namespace normlab
