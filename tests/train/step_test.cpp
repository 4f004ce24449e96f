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
#include "test_util.h"

namespace normlab {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

DiagConfig diag(const std::string& nonfinite, const std::string& spike_action) {
  DiagConfig d;
  d.nonfinite = nonfinite;
  d.spike.action = spike_action;
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

}  // namespace
}  // namespace normlab
