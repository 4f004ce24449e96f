// The step's plan and state (train/step.h): plan_at is the one rule for what happens around a
// step (trainer, replay and bench follow it), and TrainStep's own state goes through a
// checkpoint's TrainState and back unchanged.
#include <gtest/gtest.h>

#include "config/load.h"
#include "train/bench.h"
#include "train/checkpoint.h"
#include "train/run_config.h"
#include "train/schedule.h"
#include "train/step.h"
#include "test_util.h"

namespace normlab {
namespace {

TEST(StepPlanTest, DiagnosticsLoggingEvaluationAndCheckpointsFollowTheirIntervals) {
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "run");
  c.train.steps = 100;
  c.train.log_every = 10;
  c.diag.every = 25;
  c.eval.every = 20;
  c.train.checkpoint_every = 30;
  c.diag.per_param = true;
  const StepPlan p0 = plan_at(c, 0);
  EXPECT_TRUE(p0.diag && p0.log && p0.per_param && p0.progress);
  EXPECT_FALSE(p0.eval || p0.checkpoint || p0.last);
  EXPECT_DOUBLE_EQ(p0.lr, lr_at(c.optim, 0, 100));
  const StepPlan p5 = plan_at(c, 5);  // nothing but the update
  EXPECT_FALSE(p5.diag || p5.log || p5.per_param || p5.progress || p5.eval || p5.checkpoint || p5.last);
  const StepPlan p25 = plan_at(c, 25);  // a diagnostics step is logged, without a progress line
  EXPECT_TRUE(p25.diag && p25.log && p25.per_param);
  EXPECT_FALSE(p25.progress);
  EXPECT_TRUE(plan_at(c, 19).eval);       // after the update the counter is 20
  EXPECT_TRUE(plan_at(c, 29).checkpoint);  // 30
  EXPECT_FALSE(plan_at(c, 29).eval);
  const StepPlan last = plan_at(c, 99);  // 100: the last step checkpoints; its eval is the final one
  EXPECT_TRUE(last.last && last.checkpoint && last.log && last.progress);
  EXPECT_FALSE(last.eval);
  EXPECT_DOUBLE_EQ(plan_at(c, 60).lr, lr_at(c.optim, 60, 100));
  c.eval.every = 0;  // off
  EXPECT_FALSE(plan_at(c, 19).eval);
}

TEST(StepPlanTest, TheStepsStateGoesThroughACheckpointsStateAndBack) {
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "run");
  c.diag.spike.window = 3;
  c = check_and_resolve(parse_config_text(dump_config(c)), true);
  c.train.precision = Precision::kFp16;  // the scaler's state (no step runs: the CPU is fine)
  const Corpus data = Corpus::load(c.data.train);
  Trainable t = make_trainable(c, torch::Device(torch::kCPU));
  TrainState saved;
  saved.loss_scale = 1024;
  saved.loss_scale_good_steps = 17;
  saved.spike_loss = {3.0, 2.5, 2.0};
  saved.spike_grad_norm = {1.0, 0.5};
  saved.spike_layers = {{0.1, 0.2}, {0.3}, {}, {0.4, 0.5, 0.6}};  // blocks 0, 1, embed, head
  TrainStep step(c, t, data, torch::Device(torch::kCPU));
  step.restore(saved);
  EXPECT_DOUBLE_EQ(step.scaler().scale(), 1024);
  TrainState back;
  step.snapshot(back);
  EXPECT_DOUBLE_EQ(back.loss_scale, 1024);
  EXPECT_EQ(back.loss_scale_good_steps, 17);
  EXPECT_EQ(back.spike_loss, saved.spike_loss);
  EXPECT_EQ(back.spike_grad_norm, saved.spike_grad_norm);
  EXPECT_EQ(back.spike_layers, saved.spike_layers);
  // A fresh step of an fp32 run saves no loss scale and empty baselines, one per layer.
  c.train.precision = Precision::kFp32;
  TrainStep fresh(c, t, data, torch::Device(torch::kCPU));
  TrainState none;
  fresh.snapshot(none);
  EXPECT_EQ(none.loss_scale, 0);
  EXPECT_TRUE(none.spike_loss.empty());
  EXPECT_EQ(none.spike_layers.size(), static_cast<size_t>(c.model.n_layers + 2));
}

// A bf16 run times a matmul at start (the bf16 warning): that must not move torch's global
// generator, whose state every checkpoint saves and a resume restores.
TEST(GemmPeakTest, LeavesTheGlobalGeneratorAsItWas) {
  torch::manual_seed(3);
  const std::string before = torch_rng_state_hex();
  EXPECT_GT(gemm_peak_gflops(torch::Device(torch::kCPU), torch::kBFloat16, 64, 1), 0);
  EXPECT_GT(gemm_peak_gflops(torch::Device(torch::kCPU), torch::kFloat, 64, 1), 0);
  EXPECT_EQ(torch_rng_state_hex(), before);
}

}  // namespace
}  // namespace normlab
