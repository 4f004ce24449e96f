// The statistics behind the verdicts (src/metrics/stats.h) against hand computations: the paired
// test from the per-seed differences (Student's t with 2 degrees of freedom has a closed-form CDF),
// Holm's adjustment on a worked example, the detectable effect from table quantiles, and the
// verdict rule with and without an equivalence margin.
#include "metrics/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace normlab {
namespace {


// Student's t with df 2: F(t) = 1/2 + t / (2 sqrt(2 + t^2)).
double cdf2(double t) { return 0.5 + t / (2 * std::sqrt(2 + t * t)); }

TEST(StatsTest, LeastSquaresSlopeIsTheFittedLinesSlope) {
  // y = 3 - 0.5 x exactly, then with residuals that sum to zero against x (slope unchanged).
  EXPECT_NEAR(least_squares_slope({1, 2, 3, 4}, {2.5, 2.0, 1.5, 1.0}), -0.5, 1e-15);
  EXPECT_NEAR(least_squares_slope({1, 2, 3, 4}, {2.6, 1.8, 1.7, 0.9}), -0.52, 1e-12);  // sxy / sxx = -2.6 / 5
  EXPECT_TRUE(std::isnan(least_squares_slope({1}, {1})));
  EXPECT_TRUE(std::isnan(least_squares_slope({2, 2}, {1, 3})));  // no spread in x
  EXPECT_TRUE(std::isnan(least_squares_slope({1, 2, 3}, {1, std::nan(""), 3})));
  EXPECT_TRUE(std::isnan(least_squares_slope({1, 2}, {1, -std::numeric_limits<double>::infinity()})));
}

TEST(StatsTest, PairedTestIsTheOneSampleTestOfThePerSeedDifferences) {
  const std::vector<double> arm = {2.10, 2.305, 1.965}, base = {2.13, 2.33, 2.00};
  const double d[3] = {arm[0] - base[0], arm[1] - base[1], arm[2] - base[2]};  // -0.03, -0.025, -0.035
  const double mean = (d[0] + d[1] + d[2]) / 3;
  double ss = 0;
  for (double x : d) ss += (x - mean) * (x - mean);
  const double se = std::sqrt(ss / 2) / std::sqrt(3.0);
  const TTest t = paired_test(arm, base);
  EXPECT_NEAR(t.delta, mean, 1e-12);
  EXPECT_NEAR(t.se, se, 1e-12);
  EXPECT_EQ(t.df, 2);
  EXPECT_EQ(t.n, 3);
  EXPECT_NEAR(t.p, 2 * cdf2(-std::fabs(mean / se)), 1e-10);
  EXPECT_NEAR(t.ci95_low, mean - 4.302653 * se, 1e-5);
  EXPECT_NEAR(t.ci95_high, mean + 4.302653 * se, 1e-5);
  EXPECT_NEAR(t.ci90_low, mean - 2.919986 * se, 1e-5);
  EXPECT_NEAR(t.ci90_high, mean + 2.919986 * se, 1e-5);
  // The seeds' shared spread (0.2 nats between seeds) hides the effect from Welch's test; the
  // pairing removes it.
  const TTest w = welch_test(arm, base);
  EXPECT_NEAR(w.delta, mean, 1e-12);
  EXPECT_GT(w.p, 0.5);
  EXPECT_LT(t.p, 0.05);
  // A seed missing on either side drops its pair.
  const TTest dropped = paired_test({2.10, kNaN, 1.965, 2.0}, {2.13, 2.33, 2.00, kNaN});
  EXPECT_EQ(dropped.n, 2);
  EXPECT_NEAR(dropped.delta, (-0.03 - 0.035) / 2, 1e-12);
  // One pair: no variance estimate, unbounded.
  const TTest one = paired_test({1.0}, {2.0});
  EXPECT_EQ(one.delta, -1);
  EXPECT_FALSE(one.bounded());
  EXPECT_TRUE(std::isnan(one.p));
  // Identical differences: se 0, p 0 and a point interval.
  const TTest flat = paired_test({1.0, 2.0, 3.0}, {1.5, 2.5, 3.5});
  EXPECT_EQ(flat.se, 0);
  EXPECT_EQ(flat.p, 0);
  EXPECT_EQ(flat.ci95_low, -0.5);
  EXPECT_EQ(flat.ci90_high, -0.5);
}

TEST(StatsTest, HolmAdjustsSortedPValuesStepDownAndKeepsTheirOrder) {
  // Sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> 0.06 (monotone).
  const std::vector<double> adj = holm_adjust({0.01, 0.04, 0.03, 0.005});
  ASSERT_EQ(adj.size(), 4u);
  EXPECT_NEAR(adj[0], 0.03, 1e-15);
  EXPECT_NEAR(adj[1], 0.06, 1e-15);
  EXPECT_NEAR(adj[2], 0.06, 1e-15);
  EXPECT_NEAR(adj[3], 0.02, 1e-15);
  // Capped at 1; a NaN (an arm without a test) stays NaN and does not count in k.
  // Sorted over k = 3: 0.02 x 3 = 0.06, 0.5 x 2 = 1.0, 0.6 x 1 = 0.6 -> 1.0 (monotone).
  const std::vector<double> capped = holm_adjust({0.6, kNaN, 0.02, 0.5});
  EXPECT_NEAR(capped[2], 0.06, 1e-15);
  EXPECT_TRUE(std::isnan(capped[1]));
  EXPECT_EQ(capped[0], 1.0);
  EXPECT_EQ(capped[3], 1.0);
  EXPECT_EQ(holm_adjust({0.7, 0.6})[0], 1.0);  // 0.6 x 2 = 1.2, capped
  EXPECT_TRUE(holm_adjust({}).empty());
  // One test: unchanged.
  EXPECT_EQ(holm_adjust({0.03})[0], 0.03);
}

TEST(StatsTest, DetectableEffectIsTheSumOfTwoQuantilesTimesTheStandardError) {
  TTest t;
  t.se = 0.01;
  t.df = 7;
  // t_{0.975,7} = 2.364624, t_{0.80,7} = 0.896030 (tables)
  EXPECT_NEAR(minimum_detectable_effect(t), (2.364624 + 0.896030) * 0.01, 1e-7);
  t.se = 0;
  EXPECT_EQ(minimum_detectable_effect(t), 0);
  t.se = kNaN;
  EXPECT_TRUE(std::isnan(minimum_detectable_effect(t)));
}

TEST(StatsTest, VerdictNeedsTheAdjustedPAndUsesTheMarginForEquivalence) {
  TTest below;  // clearly below 0
  below.delta = -0.05;
  below.ci95_low = -0.08;
  below.ci95_high = -0.02;
  below.ci90_low = -0.075;
  below.ci90_high = -0.025;
  below.p = 0.004;
  EXPECT_EQ(decide(below, 0.004, 0), "better");
  EXPECT_EQ(decide(below, 0.06, 0), "tie");  // Holm took it over 0.05
  EXPECT_EQ(decide(below, 0.06, 0.01), "inconclusive");
  TTest above = below;
  above.delta = 0.05;
  above.ci95_low = 0.02;
  above.ci95_high = 0.08;
  EXPECT_EQ(decide(above, 0.004, 0.01), "worse");
  TTest close;  // near 0, tight
  close.delta = 0.001;
  close.ci95_low = -0.006;
  close.ci95_high = 0.008;
  close.ci90_low = -0.004;
  close.ci90_high = 0.006;
  close.p = 0.7;
  EXPECT_EQ(decide(close, 0.7, 0), "tie");
  EXPECT_EQ(decide(close, 0.7, 0.01), "equivalent");
  EXPECT_EQ(decide(close, 0.7, 0.005), "inconclusive");  // 0.006 sticks out
  TTest unbounded;
  unbounded.delta = -0.5;
  EXPECT_EQ(decide(unbounded, kNaN, 0), "tie");
  EXPECT_EQ(decide(unbounded, kNaN, 0.01), "inconclusive");
}

}  // namespace
}  // namespace normlab
