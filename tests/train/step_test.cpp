// The training step (train/step.h): the decision as a pure function, and `normlab bench` timing
// the trainer's own step (same losses for the same config).
#include "train/step.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "config/load.h"
#include "train/bench.h"
#include "train/run_config.h"
#include "train/trainer.h"
#include "metrics/stats.h"
#include "test_util.h"

namespace normlab {
namespace {
// A plan with only a learning rate and the diagnostics flag set.
StepPlan plan(double lr, bool diag) {
  StepPlan p;
  p.lr = lr;
  p.diag = diag;
  return p;
}
}  // namespace
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

DiagConfig diag(const std::string& nonfinite, const std::string& spike_action) {
  DiagConfig d;
  d.nonfinite = *parse_choice<NonFinitePolicy>(nonfinite);
  d.spike.action = *parse_choice<SpikeAction>(spike_action);
  return d;
}

TEST(DecideStepTest, PrecedenceIsOverflowThenNonFiniteThenSpike) {
  const DiagConfig stop = diag("stop", "stop"), skip = diag("skip", "skip"), log = diag("stop", "log");
  EXPECT_EQ(decide_step(1.0, 2.0, false, false, stop), StepAction::kUpdate);
  EXPECT_EQ(decide_step(1.0, 2.0, true, false, stop), StepAction::kUpdate);
  // fp16: a finite loss with non-finite scaled gradients is an overflow, never a stop.
  EXPECT_EQ(decide_step(1.0, kInf, true, true, stop), StepAction::kSkipOverflow);
  EXPECT_EQ(decide_step(1.0, kNaN, true, false, stop), StepAction::kSkipOverflow);
  // Without loss scaling the same values are non-finite: stop or skip as diag.nonfinite says.
  EXPECT_EQ(decide_step(1.0, kInf, false, false, stop), StepAction::kStopNonFinite);
  EXPECT_EQ(decide_step(1.0, kInf, false, false, skip), StepAction::kSkipNonFinite);
  // A non-finite loss is never an overflow, and beats a spike.
  EXPECT_EQ(decide_step(kNaN, 1.0, true, true, stop), StepAction::kStopNonFinite);
  EXPECT_EQ(decide_step(-kInf, kInf, true, true, skip), StepAction::kSkipNonFinite);
  // Spikes act only when diag.spike.action says so.
  EXPECT_EQ(decide_step(1.0, 2.0, false, true, stop), StepAction::kStopSpike);
  EXPECT_EQ(decide_step(1.0, 2.0, false, true, skip), StepAction::kSkipSpike);
  EXPECT_EQ(decide_step(1.0, 2.0, false, true, log), StepAction::kUpdate);
  for (auto a : {StepAction::kSkipOverflow, StepAction::kSkipNonFinite, StepAction::kSkipSpike}) {
    EXPECT_TRUE(is_skip(a));
    EXPECT_FALSE(is_stop(a));
  }
  for (auto a : {StepAction::kStopNonFinite, StepAction::kStopSpike}) {
    EXPECT_TRUE(is_stop(a));
    EXPECT_FALSE(is_skip(a));
  }
  EXPECT_FALSE(is_skip(StepAction::kUpdate) || is_stop(StepAction::kUpdate));
}

// `normlab bench` runs the trainer's step: its first and last losses are the training run's
// losses at the same steps (only the statistics capture of the trainer's diagnostics steps may
// take another attention path, hence a float tolerance rather than bitwise).
TEST(TrainStepTest, BenchTimesTheTrainersStep) {
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "run");
  c.train.steps = 8;
  c.eval.every = 0;
  c.diag.every = 1000;
  const Config resolved = check_and_resolve(parse_config_text(dump_config(c)), true);
  ASSERT_EQ(train(resolved, {}), 0);
  const auto records = testing::records(c.out_dir, "train");
  ASSERT_EQ(records.size(), 8u);
  const BenchResult b = bench_training(resolved, "tiny", /*warmup=*/3, /*steps=*/5);
  EXPECT_NEAR(b.first_loss, records.front()["loss"].as<double>(), 1e-5 * b.first_loss);
  EXPECT_NEAR(b.last_loss, records.back()["loss"].as<double>(), 1e-5 * b.last_loss);
  EXPECT_LT(b.last_loss, b.first_loss);
}

// A full-diagnostics step (the trainer's `diag.every` steps, `bench --diag`) trains exactly as a
// plain one and carries every statistic, of the right length, with the parameter norm and the
// update ratio of the weights it leaves.
TEST(TrainStepTest, DiagnosticsStepsTrainAlikeAndCarryEveryStatistic) {
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "run");
  c = check_and_resolve(parse_config_text(dump_config(c)), true);
  const Corpus data = Corpus::load(c.data.train);
  const torch::Device cpu(torch::kCPU);
  const int64_t L = c.model.n_layers;
  std::vector<double> losses[2];
  std::vector<torch::Tensor> before, after;
  for (const bool diag : {false, true}) {
    Trainable t = make_trainable(c, cpu);
    TrainStep step(c, t, data, cpu);
    int64_t mb = 0;
    for (int s = 0; s < 4; ++s) {
      if (diag && s == 3) {
        for (auto& p : t.params) before.push_back(p.detach().clone());
      }
      const StepOutcome o = step.run(mb, plan(1e-3, diag));
      losses[diag].push_back(o.loss);
      ASSERT_EQ(o.diag.has_value(), diag);
      if (!diag || s < 3) continue;
      const Diagnostics& d = *o.diag;
      EXPECT_EQ(d.layer("update_ratio").size(), static_cast<size_t>(L));
      for (const char* name : {"act_rms", "act_max", "act_kurtosis"}) {
        EXPECT_EQ(d.layer(name).size(), static_cast<size_t>(L + 1)) << name;
      }
      for (const char* name : {"attn_entropy", "attn_logit_max", "block_cos", "attn_sink"}) {
        EXPECT_EQ(d.layer(name).size(), static_cast<size_t>(L)) << name;
      }
      EXPECT_EQ(d.layers.size(), 12u);  // update_ratio, the 4 weight statistics, 7 of the forward
      // The weight statistics of block 0 (src/metrics/README.md), recomputed here from its 2-D
      // block weights (the matrices of this model) before and after the update; sigma_max by SVD.
      {
        double sq = 0, n = 0, smax = 0, srank = 0, mats = 0, dot = 0, dsq = 0, bsq = 0;
        for (size_t i = 0; i < t.params.size(); ++i) {
          if (t.names[i].rfind("blocks.0.", 0) != 0 || t.params[i].dim() != 2) continue;
          const auto w = t.params[i].detach().to(torch::kDouble), w0 = before[i].to(torch::kDouble);
          const double f2 = w.pow(2).sum().item<double>(), s1 = torch::linalg_svdvals(w).max().item<double>();
          sq += f2, n += static_cast<double>(w.numel()), smax = std::max(smax, s1), srank += f2 / (s1 * s1), ++mats;
          dot += ((w - w0) * w0).sum().item<double>(), dsq += (w - w0).pow(2).sum().item<double>();
          bsq += w0.pow(2).sum().item<double>();
        }
        ASSERT_GT(mats, 0);
        EXPECT_NEAR(d.layer("w_rms")[0], std::sqrt(sq / n), 1e-6 * std::sqrt(sq / n));
        // sigma_max from fp32 Grams by Lanczos: the contract's 1e-3, held here to 1e-4.
        EXPECT_NEAR(d.layer("w_spec_max")[0], smax, 1e-4 * smax);
        EXPECT_NEAR(d.layer("w_stable_rank")[0], srank / mats, 2e-4 * srank / mats);
        const double cos = dot / std::sqrt(dsq * bsq);
        EXPECT_NEAR(d.layer("update_cos")[0], cos, 1e-6 + 1e-4 * std::abs(cos));
      }
      double w2 = 0;
      for (auto& p : t.params) w2 += p.detach().to(torch::kDouble).pow(2).sum().item<double>();
      EXPECT_NEAR(d.param_norm, std::sqrt(w2), 1e-5 * std::sqrt(w2));
      // Block 0's update ratio from the weights before and after this update.
      double dw2 = 0, b2 = 0;
      for (size_t i = 0; i < t.params.size(); ++i) {
        if (t.names[i].rfind("blocks.0.", 0) != 0) continue;
        dw2 += (t.params[i].detach() - before[i]).to(torch::kDouble).pow(2).sum().item<double>();
        b2 += before[i].to(torch::kDouble).pow(2).sum().item<double>();
      }
      EXPECT_NEAR(d.layer("update_ratio")[0], std::sqrt(dw2 / b2), 1e-4 * std::sqrt(dw2 / b2));
      EXPECT_GT(d.layer("update_ratio")[0], 0);
    }
  }
  for (size_t s = 0; s < losses[0].size(); ++s) EXPECT_NEAR(losses[1][s], losses[0][s], 1e-5 * losses[0][s]);
}

}  // namespace
}  // namespace normlab

namespace normlab {
namespace {

// McCandlish et al.'s estimators recover tr(S) / |G|^2 from the expected squared norms.
TEST(GradNoiseScaleTest, EstimatorsFollowAppendixA) {
  EXPECT_TRUE(std::isnan(simple_noise_scale(1.0, 1.0, 4, 1)));      // one gradient: undefined
  EXPECT_DOUBLE_EQ(simple_noise_scale(3.0, 3.0, 4, 2), 0.0);        // identical gradients: no noise
  // n gradients of batch b drawn around G with per-example covariance S: E mean|g|^2 = |G|^2 +
  // tr(S)/b and E|avg|^2 = |G|^2 + tr(S)/(n b). With |G|^2 = 2, tr(S) = 12, b = 4, n = 3:
  const double g2 = 2, trS = 12, b = 4, n = 3;
  EXPECT_NEAR(simple_noise_scale(g2 + trS / b, g2 + trS / (n * b), 4, 3), trS / g2, 1e-12);
}

// The step's estimate equals the formula applied to the two micro-batches' own gradients,
// computed here one micro-batch at a time.
TEST(GradNoiseScaleTest, TheStepUsesEachMicroBatchsOwnGradient) {
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "run");
  c.train.accum = 2;
  c = check_and_resolve(parse_config_text(dump_config(c)), true);
  const Corpus data = Corpus::load(c.data.train);
  const torch::Device cpu(torch::kCPU);

  // Each micro-batch alone, from the same initial weights.
  std::vector<std::vector<torch::Tensor>> g(2);
  Config one = c;
  one.train.accum = 1;
  for (int64_t k = 0; k < 2; ++k) {
    Trainable t = make_trainable(one, cpu);
    int64_t mb = k;
    forward_backward(one, t.model, *t.optimizer, data, cpu, mb, false);
    for (auto& p : t.params) g[k].push_back(p.grad().to(torch::kDouble).clone());
  }
  double small = 0, big = 0;
  for (size_t i = 0; i < g[0].size(); ++i) {
    small += (g[0][i].pow(2).sum().item<double>() + g[1][i].pow(2).sum().item<double>()) / 2;
    big += ((g[0][i] + g[1][i]) / 2).pow(2).sum().item<double>();
  }
  const double want = simple_noise_scale(small, big, c.train.batch_size, 2);

  Trainable t = make_trainable(c, cpu);
  TrainStep step(c, t, data, cpu);
  int64_t mb = 0;
  const StepOutcome diag_step = step.run(mb, plan(1e-3, /*diag=*/true));
  EXPECT_NEAR(diag_step.grad_noise_scale, want, 1e-4 * std::abs(want));
  EXPECT_TRUE(std::isnan(step.run(mb, plan(1e-3, /*diag=*/false)).grad_noise_scale));  // diag steps only
}

}  // namespace
}  // namespace normlab
