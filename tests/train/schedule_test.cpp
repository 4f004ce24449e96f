#include "train/schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"
#include "train/schedules/schedule_type.h"
#include "train/trainer.h"

namespace normlab {
namespace {

OptimConfig opt(const char* schedule) {
  OptimConfig o;
  o.lr = 1e-3;
  o.min_lr = 1e-4;
  o.warmup = 10;
  o.schedule = schedule;
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

// WSD, 10 warm-up steps then 100 (p = (s - 10) / 100): the peak until p = 1 - f, then down to
// min_lr at p = 1, along a line or along 1 - sqrt of the progress through the decay.
TEST(ScheduleTest, WsdHoldsThePeakThenDecaysOverItsLastFraction) {
  auto o = opt("wsd");
  o.schedule_keys.set("wsd.decay_frac", 0.25);
  EXPECT_DOUBLE_EQ(lr_at(o, 3, 110), 4e-4);  // warm-up
  for (const int s : {10, 40, 84, 85}) EXPECT_EQ(lr_at(o, s, 110), 1e-3) << s;  // p <= 0.75
  // p = 0.85: q = 0.4 of the decay
  EXPECT_NEAR(lr_at(o, 95, 110), 1e-3 - 9e-4 * 0.4, 1e-15);
  EXPECT_NEAR(lr_at(o, 109, 110), 1e-4 + 9e-4 / (0.25 * 100), 1e-15);  // the last step: one decay step above
  EXPECT_NEAR(lr_at(o, 110, 110), 1e-4, 1e-15);
  o.schedule_keys.set("wsd.shape", std::string("sqrt"));
  EXPECT_NEAR(lr_at(o, 95, 110), 1e-4 + 9e-4 * (1 - std::sqrt(0.4)), 1e-15);
  EXPECT_EQ(lr_at(o, 85, 110), 1e-3);
  EXPECT_NEAR(lr_at(o, 110, 110), 1e-4, 1e-15);
  // decay_frac 1: the whole span decays, as linear does.
  o.schedule_keys.set("wsd.decay_frac", 1.0);
  o.schedule_keys.set("wsd.shape", std::string("linear"));
  for (int s = 0; s <= 110; ++s) EXPECT_NEAR(lr_at(o, s, 110), lr_at(opt("linear"), s, 110), 1e-18) << s;
  // The stable phase does not depend on the run's length beyond its end: a 1000-step and a 110-step
  // run at decay_frac 0.1 agree up to the shorter one's decay.
  o.schedule_keys.set("wsd.decay_frac", 0.1);
  for (int s = 0; s <= 100; ++s) EXPECT_EQ(lr_at(o, s, 110), lr_at(o, s, 1000)) << s;
}

// Registry-wide: every schedule starts at the peak after the warm-up, never rises, and stays
// within [min_lr, lr].
TEST(ScheduleTest, EveryScheduleStartsAtThePeakAndNeverRises) {
  for (const auto& t : schedule_registry()) {
    SCOPED_TRACE(t.name);
    EXPECT_FALSE(t.formula.empty());
    const OptimConfig o = opt(t.name.c_str());
    EXPECT_DOUBLE_EQ(lr_at(o, 10, 110), 1e-3);
    for (int s = 11; s <= 110; ++s) {
      EXPECT_LE(lr_at(o, s, 110), lr_at(o, s - 1, 110) + 1e-18) << s;
      EXPECT_GE(lr_at(o, s, 110), 1e-4 - 1e-18) << s;
    }
  }
}

// The keys a schedule owns: one-line errors for a value out of range, a name not in the list, and a
// key of a schedule the config does not select.
TEST(ScheduleTest, WsdKeysAreCheckedLikeEveryOwnedKey) {
  EXPECT_TRUE(testing::config_problems("optim: {schedule: wsd, wsd: {decay_frac: 0.1, shape: sqrt}}").empty());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"optim: {schedule: wsd, wsd: {decay_frac: 0}}", "optim.wsd.decay_frac: 0 must be in (0, 1]"},
      {"optim: {schedule: wsd, wsd: {decay_frac: 1.5}}", "optim.wsd.decay_frac: 1.5 must be in (0, 1]"},
      {"optim: {schedule: wsd, wsd: {shape: exp}}", "optim.wsd.shape: expected one of: linear, sqrt, got 'exp'"},
      {"optim: {wsd: {decay_frac: 0.5}}",
       "optim.wsd.decay_frac: belongs to optim.schedule wsd (optim.schedule is cosine); it would do nothing here"},
  };
  for (const auto& [yaml, text] : cases) {
    const auto p = testing::config_problems(yaml);
    ASSERT_EQ(p.size(), 1u) << yaml;
    EXPECT_NE(p[0].find(text), std::string::npos) << p[0];
  }
  // An unknown schedule hides no optimizer key's rule, an unknown optimizer no schedule key's.
  EXPECT_EQ(testing::config_problems("optim: {schedule: wavy, type: muon, muon: {ns_steps: 0}}").size(), 2u);
  EXPECT_EQ(testing::config_problems("optim: {type: adamx, schedule: wsd, wsd: {decay_frac: 2}}").size(), 2u);
}

// A run under wsd records, at every update, the rate lr_at gives.
TEST(ScheduleRunTest, ARunRecordsTheWsdRates) {
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "run");
  c.train.steps = 12;
  c.train.log_every = 1;
  c.optim.warmup = 2;
  c.optim.schedule = "wsd";
  c.optim.schedule_keys.set("wsd.decay_frac", 0.5);
  c.optim.schedule_keys.set("wsd.shape", std::string("sqrt"));
  ASSERT_EQ(train(testing::resolved(c), {}), 0);
  const auto records = testing::records(dir / "run", "train");
  ASSERT_EQ(records.size(), 12u);
  for (const auto& r : records) {
    const int64_t s = r["step"].as<int64_t>();
    EXPECT_EQ(r["lr"].as<double>(), lr_at(c.optim, s, 12)) << s;
  }
  EXPECT_EQ(records[6]["lr"].as<double>(), c.optim.lr);  // p = 0.4: still the peak
  EXPECT_LT(records[11]["lr"].as<double>(), c.optim.lr);
}

}  // namespace
}  // namespace normlab
