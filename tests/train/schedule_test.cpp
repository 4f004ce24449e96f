#include "train/schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace normlab {
namespace {

OptimConfig opt(const char* schedule) {
  OptimConfig o;
  o.lr = 1e-3;
  o.min_lr = 1e-4;
  o.warmup = 10;
  o.schedule = *parse_choice<LrSchedule>(schedule);
  return o;
}

TEST(ScheduleTest, WarmupIsLinearFromLrOverWarmup) {
  auto o = opt("cosine");
  for (int s = 0; s < 10; ++s) EXPECT_DOUBLE_EQ(lr_at(o, s, 110), 1e-3 * (s + 1) / 10.0);
}

TEST(ScheduleTest, CosineStartsAtPeakHalvesAtMidpointEndsAtMinLr) {
  auto o = opt("cosine");
  EXPECT_DOUBLE_EQ(lr_at(o, 10, 110), 1e-3);
  EXPECT_NEAR(lr_at(o, 60, 110), 1e-4 + 0.5 * (1e-3 - 1e-4), 1e-15);
  EXPECT_NEAR(lr_at(o, 110, 110), 1e-4, 1e-15);
  EXPECT_NEAR(lr_at(o, 35, 110), 1e-4 + 0.5 * 9e-4 * (1 + std::cos(M_PI * 0.25)), 1e-15);
  for (int s = 11; s <= 110; ++s) EXPECT_LE(lr_at(o, s, 110), lr_at(o, s - 1, 110) + 1e-18);
}

TEST(ScheduleTest, LinearAndConstant) {
  auto l = opt("linear");
  EXPECT_DOUBLE_EQ(lr_at(l, 10, 110), 1e-3);
  EXPECT_NEAR(lr_at(l, 60, 110), 5.5e-4, 1e-15);
  EXPECT_NEAR(lr_at(l, 110, 110), 1e-4, 1e-15);
  auto c = opt("constant");
  EXPECT_DOUBLE_EQ(lr_at(c, 3, 110), 4e-4);  // warmup still applies
  EXPECT_DOUBLE_EQ(lr_at(c, 50, 110), 1e-3);
  EXPECT_DOUBLE_EQ(lr_at(c, 109, 110), 1e-3);
}

TEST(ScheduleTest, NoWarmupStartsAtPeak) {
  auto o = opt("cosine");
  o.warmup = 0;
  EXPECT_DOUBLE_EQ(lr_at(o, 0, 100), 1e-3);
}

}  // namespace
}  // namespace normlab
