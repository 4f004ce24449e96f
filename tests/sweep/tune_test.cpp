// Tuned comparisons (sweep `tune:`): the Student t values the verdicts use against table values,
// the verdict rule, and a tuned sweep directory of hand-written runs whose selection, sensitivity,
// confirm statistics and verdicts are recomputed here from the runs' metrics.jsonl alone (the
// definitions of configs/sweeps/README.md, "Tuned comparisons"), not through the code under test.
#include "sweep/tune.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "core/fs.h"
#include "metrics/compare.h"
#include "sweep/summary.h"
#include "test_util.h"

namespace normlab {
namespace {
namespace fs = std::filesystem;

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Student's t: two-sided 95 % critical values from the usual table, and its CDF where it has a
// closed form (df 4: F(t) = 1/2 + 3/8 x (1 - x^2/12 (1 + t^2/4)^-1)..., written out below).
TEST(TuneStatsTest, StudentTMatchesTableValues) {
  const std::map<double, double> table = {{1, 12.7062}, {2, 4.3027},  {3, 3.1824},  {4, 2.7764},
                                          {5, 2.5706},  {6, 2.4469},  {8, 2.3060},  {10, 2.2281},
                                          {20, 2.0860}, {30, 2.0423}, {60, 2.0003}, {120, 1.9799}};
  for (const auto& [df, q] : table) {
    EXPECT_NEAR(student_t_quantile(0.975, df), q, 1e-4) << df;
    EXPECT_NEAR(student_t_cdf(q, df), 0.975, 2e-5) << df;
  }
  // One-sided 0.95 values.
  EXPECT_NEAR(student_t_quantile(0.95, 1), 6.3138, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.95, 9), 1.8331, 1e-4);
  // df 4 in closed form: F(t) = 1/2 + (3/8) u (1 - u^2 / 12 ... ) with u = t / sqrt(1 + t^2/4)
  // reduces to 1/2 + t (t^2 + 6) / (2 (t^2 + 4)^{3/2}).
  for (double t : {-5.0, -1.5, 0.0, 0.7, 2.0, 8.0}) {
    EXPECT_NEAR(student_t_cdf(t, 4), 0.5 + t * (t * t + 6) / (2 * std::pow(t * t + 4, 1.5)), 1e-12)
        << t;
  }
}

TEST(TuneStatsTest, VerdictIsTheWelchIntervalAgainstZero) {
  // Equal variances and sizes: df = 2 (n - 1) = 4 exactly, t_{0.975,4} from the table.
  const std::vector<double> base = {1.0, 1.0625, 1.125}, better = {0.5, 0.5625, 0.625};
  const TuneVerdict v = tune_verdict(better, base);
  const double se = std::sqrt(2 * 0.00390625 / 3);
  EXPECT_DOUBLE_EQ(v.delta, -0.5);
  EXPECT_NEAR(v.df, 4, 1e-12);
  EXPECT_NEAR(v.ci_low, -0.5 - 2.776445 * se, 1e-5);
  EXPECT_NEAR(v.ci_high, -0.5 + 2.776445 * se, 1e-5);
  const double t = -0.5 / se;
  EXPECT_NEAR(v.p, 2 * (0.5 + t * (t * t + 6) / (2 * std::pow(t * t + 4, 1.5))), 1e-10);
  EXPECT_EQ(v.verdict, "better");
  EXPECT_EQ(tune_verdict(base, better).verdict, "worse");
  EXPECT_EQ(tune_verdict({1.0, 1.2, 1.4}, {1.1, 1.3, 1.2}).verdict, "tie");
  // se = 0: p 0 and the interval [delta, delta] when the means differ, else p 1 and tie.
  const TuneVerdict flat = tune_verdict({1.0, 1.0}, {2.0, 2.0});
  EXPECT_EQ(flat.p, 0);
  EXPECT_EQ(flat.ci_low, -1);
  EXPECT_EQ(flat.ci_high, -1);
  EXPECT_EQ(flat.verdict, "better");
  const TuneVerdict same = tune_verdict({1.0, 1.0}, {1.0, 1.0});
  EXPECT_EQ(same.p, 1);
  EXPECT_EQ(same.verdict, "tie");
  // One value on a side: no variance estimate, an unbounded interval.
  const TuneVerdict one = tune_verdict({0.1}, {1.0, 1.1});
  EXPECT_NEAR(one.delta, -0.95, 1e-12);
  EXPECT_TRUE(std::isnan(one.ci_low) && std::isnan(one.p));
  EXPECT_EQ(one.verdict, "tie");
}

// ---- a tuned sweep directory of hand-written runs ----------------------------------------------

void write_text(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

std::string num(double v) { return std::isfinite(v) ? fmt::format("{}", v) : "null"; }

// A run: eval records at step 0 (step0) and at step 10 (last; NaN: diverged there); no metrics
// file at all when step0 is NaN (a run that failed before its first record).
void write_run(const std::string& dir, const std::string& status, double step0, double last) {
  if (std::isfinite(step0)) {
    write_text(dir + "/metrics.jsonl",
               "{\"kind\":\"eval\",\"step\":0,\"val_loss\":" + num(step0) + "}\n" +
                   "{\"kind\":\"train\",\"step\":0,\"loss\":5.0,\"grad_norm\":1.0}\n" +
                   "{\"kind\":\"train\",\"step\":9,\"loss\":" +
                   (std::isfinite(last) ? "2.0" : "null") + ",\"grad_norm\":1.0}\n" +
                   "{\"kind\":\"eval\",\"step\":10,\"val_loss\":" + num(last) + "}\n");
  }
  write_text(dir + "/point.json", "{\"status\":\"" + status + "\",\"exit_code\":0,\"wall_s\":1}\n");
}

// The test's own reading of a run's metrics.jsonl: best (lowest finite eval loss), final (last
// eval loss), step-0 eval loss; NaN where absent.
struct Read {
  double best = kNaN, final = kNaN, step0 = kNaN;
};
Read read_back(const std::string& dir) {
  Read r;
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const YAML::Node j = YAML::Load(line);
    if (j["kind"].as<std::string>() != "eval") continue;
    const double v = j["val_loss"].IsNull() ? kNaN : j["val_loss"].as<double>();
    if (j["step"].as<int>() == 0) r.step0 = v;
    r.final = v;
    if (std::isfinite(v) && !(r.best <= v)) r.best = v;
  }
  return r;
}

class TuneSummaryTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    // Three arms x lr {1e-3, 2e-3, 4e-3} x search seeds {1, 2}; confirm seeds {11, 12, 13}.
    write_text(dir_ / "s.yaml",
               std::string("base: none.yaml\nout_dir: ") + (dir_ / "out") +
                   "\naxes: {model.layout: [pre, post, sandwich]}\n"
                   "tune: {key: optim.lr, values: [1.0e-3, 2.0e-3, 4.0e-3], seeds: [1, 2],\n"
                   "       confirm_seeds: [11, 12, 13], metric: " +
                   GetParam() + ", baseline: {model.layout: pre}}\n");
    SweepOptions o;
    o.check_base = false;
    sweep_ = parse_sweep_file(dir_ / "s.yaml", o);
  }
  std::string run(const std::string& name) const { return dir_ / ("out/runs/" + name); }

  // The search runs: step-0 loss and the loss at step 10 by arm, lr and seed.
  void write_search() {
    // pre: optimum inside the grid.
    for (auto [lr, a, b] :
         {std::tuple{"1.0e-3", 2.0, 2.25}, {"2.0e-3", 1.75, 2.0}, {"4.0e-3", 1.875, 2.0}}) {
      write_run(run(std::string("layout=pre,lr=") + lr + ",seed=1"), "done", 5.5, a);
      write_run(run(std::string("layout=pre,lr=") + lr + ",seed=2"), "done", 5.5, b);
    }
    // post: optimum at the grid's edge; one run diverged at 1e-3 (its last eval non-finite).
    write_run(run("layout=post,lr=1.0e-3,seed=1"), "diverged", 5.25, kNaN);
    write_run(run("layout=post,lr=1.0e-3,seed=2"), "done", 5.25, 2.5);
    write_run(run("layout=post,lr=2.0e-3,seed=1"), "done", 5.25, 2.0);
    write_run(run("layout=post,lr=2.0e-3,seed=2"), "done", 5.25, 2.125);
    write_run(run("layout=post,lr=4.0e-3,seed=1"), "done", 5.25, 1.75);
    write_run(run("layout=post,lr=4.0e-3,seed=2"), "done", 5.25, 1.8125);
    // sandwich: one run failed without records (counts as l0); 2e-3 and 4e-3 tie (the smaller
    // wins).
    write_run(run("layout=sandwich,lr=1.0e-3,seed=1"), "failed", kNaN, kNaN);
    write_run(run("layout=sandwich,lr=1.0e-3,seed=2"), "done", 5.75, 2.0);
    write_run(run("layout=sandwich,lr=2.0e-3,seed=1"), "done", 5.5, 1.625);
    write_run(run("layout=sandwich,lr=2.0e-3,seed=2"), "done", 5.5, 1.625);
    write_run(run("layout=sandwich,lr=4.0e-3,seed=1"), "done", 5.5, 1.5);
    write_run(run("layout=sandwich,lr=4.0e-3,seed=2"), "done", 5.5, 1.75);
  }
  testing::TempDir dir_;
  Sweep sweep_;
};

TEST_P(TuneSummaryTest, SelectionSensitivityAndVerdictsAreThoseOfTheRunsOwnRecords) {
  const bool best = std::string(GetParam()) == "best_val";
  write_search();
  // Before the confirm runs: the search is complete, the confirm points are named by v*.
  const TuneSummary half = summarise_tune(sweep_, dir_ / "out");
  ASSERT_TRUE(half.search_complete);
  EXPECT_EQ(half.arms[0].vs_baseline.verdict, "baseline");
  EXPECT_EQ(half.arms[1].vs_baseline.verdict, "pending");
  std::vector<std::string> confirm_names;
  for (const auto& p : confirm_points(sweep_, half.selected())) confirm_names.push_back(p.name);
  const std::string post_v = best ? "4.0e-3" : "4.0e-3";
  EXPECT_EQ(
      confirm_names,
      (std::vector<std::string>{
          "layout=pre,lr=2.0e-3,confirm,seed=11", "layout=pre,lr=2.0e-3,confirm,seed=12",
          "layout=pre,lr=2.0e-3,confirm,seed=13", "layout=post,lr=" + post_v + ",confirm,seed=11",
          "layout=post,lr=" + post_v + ",confirm,seed=12",
          "layout=post,lr=" + post_v + ",confirm,seed=13",
          "layout=sandwich,lr=2.0e-3,confirm,seed=11", "layout=sandwich,lr=2.0e-3,confirm,seed=12",
          "layout=sandwich,lr=2.0e-3,confirm,seed=13"}));
  // Confirm runs: post clearly better than pre; sandwich's second seed failed (counts as l0).
  const std::vector<double> pre = {1.0, 1.0625, 1.125}, post = {0.5, 0.5625, 0.625};
  for (int k = 0; k < 3; ++k) {
    write_run(run(confirm_names[k]), "done", 5.5, pre[k]);
    write_run(run(confirm_names[3 + k]), "done", 5.25, post[k]);
  }
  write_run(run(confirm_names[6]), "done", 5.5, 1.0625);
  write_run(run(confirm_names[7]), "failed", kNaN, kNaN);
  write_run(run(confirm_names[8]), "done", 5.5, 1.0);

  // ---- the test's own computation, from metrics.jsonl and point.json only ----
  const std::vector<std::string> arms = {"pre", "post", "sandwich"},
                                 values = {"1.0e-3", "2.0e-3", "4.0e-3"};
  const std::vector<double> v_num = {1e-3, 2e-3, 4e-3};
  auto metric = [&](const Read& r) { return best ? r.best : r.final; };
  std::vector<double> l0(3), sens(3);
  std::vector<std::vector<double>> m(3, std::vector<double>(3));
  std::vector<int> sel(3);
  std::vector<std::vector<double>> confirm(3);
  for (int a = 0; a < 3; ++a) {
    double sum = 0;
    int n = 0;
    for (const auto& v : values) {
      for (int seed : {1, 2}) {
        const Read r =
            read_back(run("layout=" + arms[a] + ",lr=" + v + ",seed=" + std::to_string(seed)));
        if (std::isfinite(r.step0)) sum += r.step0, ++n;
      }
    }
    l0[a] = sum / n;
    for (int v = 0; v < 3; ++v) {
      double s = 0;
      for (int seed : {1, 2}) {
        const double x = metric(read_back(
            run("layout=" + arms[a] + ",lr=" + values[v] + ",seed=" + std::to_string(seed))));
        s += std::isfinite(x) ? x : l0[a];
      }
      m[a][v] = s / 2;
    }
    sel[a] = 0;
    for (int v = 1; v < 3; ++v) {
      if (m[a][v] < m[a][sel[a]]) sel[a] = v;
    }
    double ss = 0;
    for (int v = 0; v < 3; ++v) ss += std::min(m[a][v], l0[a]) - m[a][sel[a]];
    sens[a] = ss / 3;
    for (int k = 0; k < 3; ++k) {
      const double x = metric(read_back(run(confirm_names[3 * a + k])));
      confirm[a].push_back(std::isfinite(x) ? x : l0[a]);
    }
  }
  // The situations this test is about, as the records give them.
  EXPECT_EQ(sel,
            (std::vector<int>{1, 2, 1}));  // inside, at the edge, a tie broken to the smaller value
  EXPECT_EQ(m[2][1], m[2][2]);
  EXPECT_NE(l0[2], 5.5);  // the failed run has no step-0 eval: l0 over the other five

  const TuneSummary t = summarise_tune(sweep_, dir_ / "out");
  ASSERT_EQ(t.arms.size(), 3u);
  EXPECT_EQ(t.baseline, 0u);
  auto mean = [](const std::vector<double>& x) {
    double s = 0;
    for (double v : x) s += v;
    return s / x.size();
  };
  auto var = [&](const std::vector<double>& x) {
    double s = 0;
    for (double v : x) s += (v - mean(x)) * (v - mean(x));
    return s / (x.size() - 1);
  };
  for (int a = 0; a < 3; ++a) {
    const TuneArmResult& r = t.arms[a];
    SCOPED_TRACE(arms[a]);
    EXPECT_EQ(r.name, "layout=" + arms[a]);
    EXPECT_DOUBLE_EQ(r.l0, l0[a]);
    for (int v = 0; v < 3; ++v) EXPECT_DOUBLE_EQ(r.search[v], m[a][v]);
    EXPECT_EQ(r.selected, sel[a]);
    EXPECT_EQ(r.at_edge, sel[a] == 0 || sel[a] == 2);
    EXPECT_NEAR(r.sensitivity, sens[a], 1e-12);
    EXPECT_NEAR(r.confirm_mean, mean(confirm[a]), 1e-12);
    EXPECT_NEAR(r.confirm_std, std::sqrt(var(confirm[a])), 1e-12);
    EXPECT_EQ(r.confirm_n, 3);
    if (a == 0) {
      EXPECT_EQ(r.vs_baseline.verdict, "baseline");
      continue;
    }
    const double q1 = var(confirm[a]) / 3, q0 = var(confirm[0]) / 3, se = std::sqrt(q1 + q0);
    const double df = (q1 + q0) * (q1 + q0) / (q1 * q1 / 2 + q0 * q0 / 2);
    const double delta = mean(confirm[a]) - mean(confirm[0]);
    EXPECT_NEAR(r.vs_baseline.delta, delta, 1e-12);
    EXPECT_NEAR(r.vs_baseline.df, df, 1e-9);
    if (a == 1) {
      // equal variances: df 4, the table's t_{0.975,4} and df 4's closed-form CDF
      EXPECT_NEAR(df, 4, 1e-9);
      EXPECT_NEAR(r.vs_baseline.ci_low, delta - 2.776445 * se, 1e-5);
      EXPECT_NEAR(r.vs_baseline.ci_high, delta + 2.776445 * se, 1e-5);
      const double tt = -std::fabs(delta / se);
      EXPECT_NEAR(r.vs_baseline.p,
                  2 * (0.5 + tt * (tt * tt + 6) / (2 * std::pow(tt * tt + 4, 1.5))), 1e-10);
      EXPECT_EQ(r.vs_baseline.verdict, "better");
    } else {
      // the failed confirm run (l0 ~ 5.6) spreads sandwich's runs: the interval holds 0
      EXPECT_LT(r.vs_baseline.ci_low, 0);
      EXPECT_GT(r.vs_baseline.ci_high, 0);
      EXPECT_EQ(r.vs_baseline.verdict, "tie");
    }
  }

  // summary.json's tune.arms[] and summary.md's verdict table carry those numbers.
  const SweepSummary s = summarise_sweep_dir(sweep_, dir_ / "out");
  EXPECT_EQ(s.rows.size(), 18u + 9u + 2 * (9u + 3u));  // runs, then mean/std per group
  const YAML::Node j = YAML::Load(summary_json(s));
  const YAML::Node ja = j["tune"]["arms"];
  ASSERT_EQ(ja.size(), 3u);
  EXPECT_EQ(j["tune"]["key"].as<std::string>(), "optim.lr");
  EXPECT_EQ(j["tune"]["metric"].as<std::string>(), GetParam());
  for (int a = 0; a < 3; ++a) {
    EXPECT_EQ(ja[a]["axes"]["model.layout"].as<std::string>(), arms[a]);
    EXPECT_EQ(ja[a]["values"].as<std::vector<double>>(), v_num);
    EXPECT_EQ(ja[a]["search"].as<std::vector<double>>(), m[a]);
    EXPECT_EQ(ja[a]["selected"].as<double>(), v_num[sel[a]]);
    EXPECT_EQ(ja[a]["at_edge"].as<bool>(), sel[a] == 2);
    EXPECT_NEAR(ja[a]["sensitivity"].as<double>(), sens[a], 1e-12);
    EXPECT_DOUBLE_EQ(ja[a]["l0"].as<double>(), l0[a]);
    EXPECT_NEAR(ja[a]["confirm"]["mean"].as<double>(), mean(confirm[a]), 1e-12);
    EXPECT_NEAR(ja[a]["confirm"]["std"].as<double>(), std::sqrt(var(confirm[a])), 1e-12);
    EXPECT_EQ(ja[a]["confirm"]["n"].as<int>(), 3);
    for (const char* k : {"delta", "ci", "p", "df", "verdict"})
      EXPECT_TRUE(ja[a]["vs_baseline"][k]) << k;
  }
  EXPECT_TRUE(ja[0]["vs_baseline"]["delta"].IsNull());
  EXPECT_EQ(ja[1]["vs_baseline"]["verdict"].as<std::string>(), "better");
  EXPECT_EQ(ja[1]["vs_baseline"]["ci"].size(), 2u);
  const std::string md = summary_markdown(s);
  EXPECT_NE(md.find("| layout=post | 4.0e-3 | edge |"), std::string::npos) << md;
  EXPECT_NE(md.find("| better |"), std::string::npos) << md;
  EXPECT_NE(md.find("| layout=pre | 2.0e-3 |  |"), std::string::npos) << md;
  EXPECT_LT(md.find("## Tuned comparison"), md.find("## Runs"));
}

INSTANTIATE_TEST_SUITE_P(Metrics, TuneSummaryTest, ::testing::Values("best_val", "final_val"));

// While search runs are still going, nothing is selected and no confirm point is named.
TEST(TuneSearchTest, NothingIsSelectedUntilEverySearchRunFinished) {
  TuneArmResult arm;
  TuneRun done{true, 2.0, 5.0}, running{false, 1.0, 5.0};
  tune_search({{done, done}, {done, running}, {done, done}}, arm);
  EXPECT_EQ(arm.selected, -1);
  EXPECT_FALSE(arm.search_finished);
  EXPECT_EQ(arm.search[0], 2.0);
  EXPECT_TRUE(std::isnan(arm.search[1]));
  EXPECT_TRUE(std::isnan(arm.sensitivity));
  // Every run missing its metric, and no step-0 eval anywhere: nothing can be selected.
  TuneRun failed{true, kNaN, kNaN};
  tune_search({{failed}, {failed}, {failed}}, arm);
  EXPECT_TRUE(arm.search_finished);
  EXPECT_EQ(arm.selected, -1);
}

}  // namespace
}  // namespace normlab
