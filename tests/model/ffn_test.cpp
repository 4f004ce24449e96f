// The feed-forward registry (src/model/README.md, "Feed-forward"): every entry's FFN against its
// formula written out here with plain loops in double over the entry's own `reference` activation
// (which does not call the module), the gate present exactly for gated entries, the memory estimate
// counting it, and (FfnRunTest, integration tier) a short run under every entry.
#include "model/ffn.h"

#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"
#include "train/run_config.h"
#include "train/trainer.h"

namespace normlab {
namespace {

// y[t][i] = sum_j fc2[i][j] h[t][j], h = ref(fc1 x) or ref(gate x) * (fc1 x), in double.
torch::Tensor by_loops(const FfnType& type, FfnImpl& f, const torch::Tensor& x) {
  const auto W1 = f.fc1->weight.accessor<double, 2>(), W2 = f.fc2->weight.accessor<double, 2>();
  const auto X = x.accessor<double, 2>();
  const int64_t T = x.size(0), d = x.size(1), ff = f.fc1->weight.size(0);
  auto y = torch::zeros({T, d}, torch::kDouble);
  auto Y = y.accessor<double, 2>();
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < ff; ++j) {
      double a = 0, g = 0;
      for (int64_t k = 0; k < d; ++k) a += W1[j][k] * X[t][k];
      if (type.gated) {
        const auto Wg = f.gate->weight.accessor<double, 2>();
        for (int64_t k = 0; k < d; ++k) g += Wg[j][k] * X[t][k];
      }
      const double h = type.gated ? type.reference(g) * a : type.reference(a);
      for (int64_t i = 0; i < d; ++i) Y[t][i] += W2[i][j] * h;
    }
  }
  return y;
}

TEST(FfnTest, EveryEntryIsItsFormula) {
  torch::manual_seed(3);
  for (const auto& type : ffn_registry()) {
    SCOPED_TRACE(type.name);
    EXPECT_FALSE(type.formula.empty());
    FfnOptions o;
    o.d_model = 8;
    o.d_ff = 12;
    o.type = &type;
    Ffn f(o);
    f->to(torch::kDouble);
    EXPECT_EQ(static_cast<bool>(f->gate), type.gated);
    const auto x = torch::randn({5, 8}, torch::kDouble) * 2;
    torch::NoGradGuard ng;
    EXPECT_TRUE(torch::allclose(f->forward(x), by_loops(type, *f, x), 1e-12, 1e-12));
    // The activation on a grid of single numbers, negative to positive.
    const auto a = torch::linspace(-4, 4, 33, torch::kDouble);
    const auto got = type.act(a);
    for (int64_t i = 0; i < a.size(0); ++i)
      EXPECT_NEAR(got[i].item<double>(), type.reference(a[i].item<double>()), 1e-14) << a[i].item<double>();
  }
}

// The estimate counts a gated FFN's third matrix: L d d_ff parameters more than an ungated one.
TEST(FfnTest, TheMemoryEstimateCountsTheGate) {
  for (const auto& type : ffn_registry()) {
    Config c;
    c.model.ffn = type.name;
    Config plain;
    const double extra = static_cast<double>(c.model.n_layers * c.model.d_model * c.model.d_ff);
    EXPECT_EQ(estimate_training_memory(c).params - estimate_training_memory(plain).params, type.gated ? extra : 0.0)
        << type.name;
  }
}

// Every entry trains: a short run's loss falls, and the checkpoint holds ffn.gate exactly for the
// gated ones.
TEST(FfnRunTest, EveryEntryTrains) {
  for (const auto& type : ffn_registry()) {
    SCOPED_TRACE(type.name);
    testing::TempDir dir;
    Config c = testing::tiny_config(dir / "run");
    c.train.steps = 12;
    c.model.ffn = type.name;
    const Config run = testing::resolved(c);
    ASSERT_EQ(train(run, {}), 0);
    const auto r = testing::records(dir / "run", "train");
    ASSERT_FALSE(r.empty());
    EXPECT_LT(r.back()["loss"].as<double>(), r.front()["loss"].as<double>());
    bool has_gate = false;
    for (const auto& [name, t] : testing::final_weights(dir / "run", run)) has_gate = has_gate || name == "blocks.0.ffn.gate.weight";
    EXPECT_EQ(has_gate, type.gated);
  }
}

}  // namespace
}  // namespace normlab
