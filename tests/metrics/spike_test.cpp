#include "metrics/spike.h"

#include <gtest/gtest.h>

#include <random>

namespace normlab {
namespace {

TEST(SpikeDetectorTest, InactiveUntilTheBaselineIsFull) {
  SpikeDetector d(4, 6.0);
  for (double x : {1.0, 1.1, 0.9}) {
    EXPECT_FALSE(d.score(100.0).active);
    d.accept(x);
  }
  d.accept(1.0);
  auto z = d.score(100.0);
  EXPECT_TRUE(z.active);
  EXPECT_TRUE(d.is_spike(z));
}

TEST(SpikeDetectorTest, ZScoreUsesPopulationStdOfThePreviousWindowOnly) {
  SpikeDetector d(4, 6.0);
  for (double x : {0.0, 1.0, 2.0, 3.0, 4.0, 5.0}) d.accept(x);  // window keeps 2, 3, 4, 5
  auto z = d.score(10.0);
  EXPECT_DOUBLE_EQ(z.mean, 3.5);
  EXPECT_DOUBLE_EQ(z.std, std::sqrt(1.25));  // population: mean of squared deviations
  EXPECT_DOUBLE_EQ(z.z, (10.0 - 3.5) / std::sqrt(1.25));
  EXPECT_EQ(d.window().values().size(), 4u);  // score() does not add the value
}

TEST(SpikeDetectorTest, ConstantBaselineGivesZeroNotInfinity) {
  SpikeDetector d(3, 6.0);
  for (int i = 0; i < 3; ++i) d.accept(2.0);
  auto z = d.score(50.0);
  EXPECT_EQ(z.z, 0.0);
  EXPECT_FALSE(d.is_spike(z));
}

TEST(SpikeDetectorTest, NoFalsePositiveOnSmoothNoiseAndCatchesAnInjectedJump) {
  std::mt19937 rng(0);
  std::normal_distribution<double> noise(0.0, 0.02);
  SpikeDetector d(128, 6.0);
  int false_positives = 0;
  for (int s = 0; s < 5000; ++s) {
    const double loss = 3.0 * std::exp(-s / 2000.0) + 1.0 + noise(rng);  // a decaying training curve
    if (d.is_spike(d.score(loss))) ++false_positives;
    d.accept(loss);
  }
  EXPECT_EQ(false_positives, 0);
  const double jump = d.window().mean() + 0.5;
  EXPECT_TRUE(d.is_spike(d.score(jump)));
}

TEST(SpikeDetectorTest, SkippedValuesNeverEnterTheBaseline) {
  // The trainer calls accept() only for steps it applied; a run of spikes that are all skipped
  // keeps being detected against the clean baseline instead of becoming the new normal.
  SpikeDetector d(8, 6.0);
  for (int i = 0; i < 8; ++i) d.accept(1.0 + 0.01 * (i % 3));
  for (int i = 0; i < 20; ++i) {
    auto z = d.score(5.0);
    EXPECT_TRUE(d.is_spike(z)) << i;  // skipped: not accepted
  }
  RollingWindow w(3);
  w.assign({1, 2, 3, 4});
  EXPECT_EQ(w.values(), (std::deque<double>{2, 3, 4}));
}

}  // namespace
}  // namespace normlab
