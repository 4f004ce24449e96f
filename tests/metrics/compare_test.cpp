#include "metrics/compare.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/errors.h"
#include "core/fs.h"
#include "test_util.h"

namespace normlab {
namespace {
namespace fs = std::filesystem;

TEST(CompareStatsTest, StudentTMatchesItsClosedFormsAndTheNormalLimit) {
  const double pi = std::acos(-1.0);
  for (double t : {-30.0, -2.5, -1.0, -0.1, 0.0, 0.3, 1.0, 2.0, 12.7, 100.0}) {
    EXPECT_NEAR(student_t_cdf(t, 1), 0.5 + std::atan(t) / pi, 1e-12) << t;           // Cauchy
    EXPECT_NEAR(student_t_cdf(t, 2), 0.5 + t / (2 * std::sqrt(2 + t * t)), 1e-12) << t;
    EXPECT_NEAR(student_t_cdf(t, 7.5) + student_t_cdf(-t, 7.5), 1.0, 1e-12) << t;    // symmetry
  }
  EXPECT_NEAR(student_t_cdf(1.959963984540054, 1e7), 0.975, 1e-6);
  // Quantiles invert the CDF: df 1 and 2 in closed form, and the familiar table values.
  EXPECT_NEAR(student_t_quantile(0.975, 1), std::tan(pi * (0.975 - 0.5)), 1e-8);
  const double p = 0.975;
  EXPECT_NEAR(student_t_quantile(p, 2), (2 * p - 1) * std::sqrt(2 / (4 * p * (1 - p))), 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 4), 2.776445, 1e-5);
  EXPECT_NEAR(student_t_quantile(0.975, 10), 2.228139, 1e-5);
  EXPECT_NEAR(student_t_quantile(0.025, 10), -2.228139, 1e-5);
}

TEST(CompareStatsTest, WelchFollowsItsDefinition) {
  const std::vector<double> a{3.01, 3.05, 2.98, 3.02}, b{3.10, 3.07, 3.15, 3.09, 3.12};
  const WelchResult w = welch_t_test(a, b);
  auto mean = [](const std::vector<double>& v) { double s = 0; for (double x : v) s += x; return s / v.size(); };
  auto var = [&](const std::vector<double>& v) {
    const double m = mean(v);
    double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return s / (v.size() - 1);
  };
  const double qa = var(a) / 4, qb = var(b) / 5;
  EXPECT_NEAR(w.t, (mean(a) - mean(b)) / std::sqrt(qa + qb), 1e-12);
  EXPECT_NEAR(w.df, (qa + qb) * (qa + qb) / (qa * qa / 3 + qb * qb / 4), 1e-9);
  EXPECT_NEAR(w.p, 2 * student_t_cdf(-std::fabs(w.t), w.df), 1e-15);
  EXPECT_LT(w.p, 0.01);
  EXPECT_GT(w.p, 0);
  // Swapping the samples flips t, keeps p; identical samples give p = 1.
  EXPECT_NEAR(welch_t_test(b, a).t, -w.t, 1e-12);
  EXPECT_NEAR(welch_t_test(b, a).p, w.p, 1e-15);
  EXPECT_EQ(welch_t_test({1, 1}, {1, 1}).p, 1);
  EXPECT_EQ(welch_t_test({1, 1}, {2, 2}).p, 0);
}

// A run directory with the given train losses, a layers.grad_norm series and eval losses.
void write_run(const std::string& dir, const std::vector<double>& losses, const std::vector<double>& grad_block1,
               const std::vector<double>& val, const std::string& layout = "pre", int seed = -1) {
  fs::create_directories(dir);
  std::ofstream m(dir + "/metrics.jsonl");
  for (size_t s = 0; s < losses.size(); ++s) {
    m << "{\"kind\":\"train\",\"step\":" << s << ",\"loss\":" << losses[s] << ",\"layers\":{\"grad_norm\":[0.5,"
      << grad_block1[s] << "]}}\n";
  }
  for (size_t k = 0; k < val.size(); ++k) m << "{\"kind\":\"eval\",\"step\":" << k * 10 << ",\"val_loss\":" << val[k] << "}\n";
  std::ofstream(dir + "/config.yaml") << "model:\n  layout: \"" << layout << "\"\n  n_layers: 2\n"
                                      << (seed >= 0 ? "seed: " + std::to_string(seed) + "\n" : "");
}

TEST(CompareTest, FindsTheFirstDivergentStepAndTheLargestDifferences) {
  testing::TempDir dir;
  write_run(dir / "a", {5, 4, 3, 2.5}, {1, 1, 1, 1}, {4.5, 3.1});
  write_run(dir / "same", {5, 4, 3, 2.5}, {1, 1, 1, 1}, {4.5, 3.1});
  write_run(dir / "b", {5, 4, 3.25, 2.0}, {1, 1.5, 1, 0.75}, {4.5, 3.0});
  Comparison c = compare_runs({dir / "a", dir / "same"}, "");
  ASSERT_EQ(c.pairs.size(), 1u);
  EXPECT_FALSE(c.pairs[0].first_divergent_step.has_value());
  EXPECT_TRUE(c.pairs[0].identical);
  EXPECT_EQ(c.pairs[0].common_steps, 4);
  YAML::Node j = YAML::Load(comparison_json(c));
  EXPECT_TRUE(j["first_divergent_step"].IsNull());

  c = compare_runs({dir / "a", dir / "b"}, "");
  const PairComparison& p = c.pairs[0];
  ASSERT_TRUE(p.first_divergent_step.has_value());
  EXPECT_EQ(*p.first_divergent_step, 2);
  EXPECT_FALSE(p.identical);
  EXPECT_EQ(p.loss.step, 3);
  EXPECT_DOUBLE_EQ(p.loss.max_abs_diff, 0.5);
  EXPECT_EQ(p.val_loss.step, 10);
  EXPECT_NEAR(p.val_loss.max_abs_diff, 0.1, 1e-12);
  ASSERT_EQ(p.layers.size(), 1u);
  EXPECT_EQ(p.layers[0].name, "layers.grad_norm");
  EXPECT_EQ(p.layers[0].step, 1);  // |1.5 - 1| beats |0.75 - 1|
  EXPECT_EQ(p.layers[0].index, 1);
  j = YAML::Load(comparison_json(c));
  EXPECT_EQ(j["first_divergent_step"].as<int64_t>(), 2);
  EXPECT_EQ(j["pairs"][0]["layers"]["grad_norm"]["index"].as<int64_t>(), 1);
  EXPECT_NE(comparison_text(c).find("first divergent step     2"), std::string::npos) << comparison_text(c);
  EXPECT_THROW(compare_runs({dir / "a"}, ""), UsageError);
  EXPECT_THROW(compare_runs({dir / "a", dir / "nothing"}, ""), UsageError);
}

TEST(CompareTest, GroupsBySeedsGiveMeansIntervalsAndWelchsP) {
  testing::TempDir dir;
  // A sweep directory: runs/*/ are its runs. Best val losses: pre 3.0, 3.1, 3.2; post 3.5, 3.6.
  int i = 0;
  for (const auto& [layout, best] : {std::pair{"pre", 3.0}, std::pair{"pre", 3.1}, std::pair{"pre", 3.2},
                                     std::pair{"post", 3.5}, std::pair{"post", 3.6}}) {
    write_run(dir / ("sweep/runs/p" + std::to_string(i++)), {5, 4}, {1, 1}, {4.0, best, best + 0.05}, layout);
  }
  const Comparison c = compare_runs({dir / "sweep"}, "model.layout");
  ASSERT_EQ(c.groups.size(), 2u);
  EXPECT_EQ(c.groups[0].value, "pre");
  EXPECT_NEAR(c.groups[0].mean, 3.1, 1e-12);
  EXPECT_NEAR(c.groups[0].std, 0.1, 1e-12);
  const double half = student_t_quantile(0.975, 2) * 0.1 / std::sqrt(3.0);
  EXPECT_NEAR(*c.groups[0].ci_low, 3.1 - half, 1e-12);
  EXPECT_NEAR(*c.groups[0].ci_high, 3.1 + half, 1e-12);
  ASSERT_EQ(c.tests.size(), 1u);
  const WelchResult w = welch_t_test({3.0, 3.1, 3.2}, {3.5, 3.6});
  EXPECT_DOUBLE_EQ(*c.tests[0].p, w.p);
  EXPECT_LT(w.p, 0.05);
  const YAML::Node j = YAML::Load(comparison_json(c));
  EXPECT_DOUBLE_EQ(j["p_value"].as<double>(), w.p);
  EXPECT_EQ(j["groups"][1]["n"].as<int>(), 2);
  EXPECT_THROW(compare_runs({dir / "sweep"}, "model.nothing"), UsageError);
}

// Groups that ran the same seeds are compared pairwise by seed too, and every test's deciding p
// (paired where there is one) is Holm-adjusted over the tests.
TEST(CompareTest, GroupsSharingSeedsGetThePairedTestAndHolm) {
  testing::TempDir dir;
  // Seeds 1, 2, 3 shift every layout alike (0, +0.3, -0.2); post is 0.05 above pre on each seed.
  const std::map<std::string, double> base = {{"pre", 3.0}, {"post", 3.05}, {"sandwich", 3.01}};
  const double shift[3] = {0.0, 0.3, -0.2};
  int i = 0;
  for (const char* layout : {"pre", "post", "sandwich"}) {
    for (int seed : {1, 2, 3}) {
      const double best = base.at(layout) + shift[seed - 1] + (layout == std::string("sandwich") ? 0.004 * seed : 0);
      write_run(dir / fmt::format("sweep/runs/p{:02d}", i++), {5, 4}, {1, 1}, {4.0, best, best + 0.05}, layout, 4 - seed);
    }
  }
  // deepnorm ran other seeds: Welch only.
  for (int seed : {7, 8, 9}) {
    write_run(dir / fmt::format("sweep/runs/p{:02d}", i++), {5, 4}, {1, 1}, {4.0, 3.5 + 0.01 * seed, 4.0}, "deepnorm",
              seed);
  }
  const Comparison c = compare_runs({dir / "sweep"}, "model.layout");
  ASSERT_EQ(c.groups.size(), 4u);
  ASSERT_EQ(c.tests.size(), 6u);
  std::vector<double> deciding;
  for (const GroupTest& t : c.tests) {
    SCOPED_TRACE(t.a + " - " + t.b);
    const bool shared = t.a != "deepnorm" && t.b != "deepnorm";
    ASSERT_EQ(t.paired.has_value(), shared);
    if (shared) {
      // The test's own pairing: group values by seed.
      std::vector<double> va, vb;
      for (int seed : {1, 2, 3}) {
        auto value = [&](const std::string& layout) {
          return base.at(layout) + shift[seed - 1] + (layout == "sandwich" ? 0.004 * seed : 0);
        };
        va.push_back(value(t.a));
        vb.push_back(value(t.b));
      }
      const TTest expect = paired_test(va, vb);
      EXPECT_NEAR(t.paired->delta, expect.delta, 1e-12);
      EXPECT_NEAR(t.paired->p, expect.p, 1e-12);
      EXPECT_EQ(t.paired->n, 3);
      deciding.push_back(t.paired->p);
    } else {
      deciding.push_back(*t.p);
    }
  }
  const std::vector<double> adjusted = holm_adjust(deciding);
  for (size_t k = 0; k < c.tests.size(); ++k) EXPECT_DOUBLE_EQ(*c.tests[k].p_adj, adjusted[k]);
  // pre - post: 0.05 on every seed, which Welch cannot see through the seed shifts.
  EXPECT_EQ(c.tests[0].a, "pre");
  EXPECT_EQ(c.tests[0].b, "post");
  EXPECT_LT(c.tests[0].paired->p, 1e-6);
  EXPECT_GT(*c.tests[0].p, 0.5);
  const YAML::Node j = YAML::Load(comparison_json(c));
  EXPECT_NEAR(j["tests"][0]["paired"]["diff"].as<double>(), -0.05, 1e-12);
  EXPECT_TRUE(j["tests"][2]["paired"].IsNull());
  EXPECT_NE(comparison_text(c).find("paired: n 3"), std::string::npos);
}

// Real runs through the command line: the same config and seed twice is bit-identical; another
// seed differs from step 0.
TEST(CompareRunTest, SameSeedIsIdenticalAndAnotherSeedDivergesAtStepZero) {
  testing::TempDir dir;
  const std::string base = testing::normlab_binary() + " train -c " + testing::source_dir() +
                           "/configs/default.yaml --set train.steps=6 --set train.log_every=1 --set model.n_layers=2"
                           " --set model.d_model=32 --set model.n_heads=2 --set model.d_ff=64 --set model.ctx=32"
                           " --set train.batch_size=4 --set train.threads=1 --set eval.every=3 --set eval.max_windows=4";
  ASSERT_EQ(testing::run_command(base + " --out " + dir / "a").status, 0);
  ASSERT_EQ(testing::run_command(base + " --out " + dir / "b").status, 0);
  ASSERT_EQ(testing::run_command(base + " --set seed=7 --out " + dir / "c").status, 0);
  auto r = testing::run_command(testing::normlab_binary() + " compare --json " + dir / "a" + " " + dir / "b");
  ASSERT_EQ(r.status, 0);
  YAML::Node j = YAML::Load(r.out);
  EXPECT_TRUE(j["first_divergent_step"].IsNull()) << r.out;
  EXPECT_TRUE(j["identical"].as<bool>());
  r = testing::run_command(testing::normlab_binary() + " compare --json " + dir / "a" + " " + dir / "c");
  ASSERT_EQ(r.status, 0);
  j = YAML::Load(r.out);
  EXPECT_EQ(j["first_divergent_step"].as<int64_t>(), 0) << r.out;
  EXPECT_GT(j["pairs"][0]["layers"]["grad_norm"]["max_abs_diff"].as<double>(), 0);
}

}  // namespace
}  // namespace normlab
