// Tuned comparisons (sweep `tune:`): the Student t values the verdicts use against table values,
// the verdict rule, and a tuned sweep directory of hand-written runs whose selection, sensitivity,
// confirm statistics and verdicts are recomputed here from the runs' metrics.jsonl alone (the
// definitions of configs/sweeps/README.md, "Tuned comparisons"), not through the code under test.
#include "sweep/tune.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "core/fs.h"
#include "metrics/stats.h"
#include "sweep/summary.h"
#include "test_util.h"

namespace normlab {
namespace {
namespace fs = std::filesystem;


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
  EXPECT_DOUBLE_EQ(v.welch.delta, -0.5);
  EXPECT_NEAR(v.welch.df, 4, 1e-12);
  EXPECT_NEAR(v.welch.ci95_low, -0.5 - 2.776445 * se, 1e-5);
  EXPECT_NEAR(v.welch.ci95_high, -0.5 + 2.776445 * se, 1e-5);
  const double t = -0.5 / se;
  EXPECT_NEAR(v.welch.p, 2 * (0.5 + t * (t * t + 6) / (2 * std::pow(t * t + 4, 1.5))), 1e-10);
  EXPECT_EQ(v.verdict, "better");
  EXPECT_EQ(tune_verdict(base, better).verdict, "worse");
  EXPECT_EQ(tune_verdict({1.0, 1.2, 1.4}, {1.1, 1.3, 1.2}).verdict, "tie");
  // se = 0: p 0 and the interval [delta, delta] when the means differ, else p 1 and tie.
  const TuneVerdict flat = tune_verdict({1.0, 1.0}, {2.0, 2.0});
  EXPECT_EQ(flat.welch.p, 0);
  EXPECT_EQ(flat.welch.ci95_low, -1);
  EXPECT_EQ(flat.welch.ci95_high, -1);
  EXPECT_EQ(flat.verdict, "better");
  const TuneVerdict same = tune_verdict({1.0, 1.0}, {1.0, 1.0});
  EXPECT_EQ(same.welch.p, 1);
  EXPECT_EQ(same.verdict, "tie");
  // One value on a side: no variance estimate, an unbounded interval.
  const TuneVerdict one = tune_verdict({0.1}, {1.0, 1.1});
  EXPECT_NEAR(one.welch.delta, -0.95, 1e-12);
  EXPECT_TRUE(std::isnan(one.welch.ci95_low) && std::isnan(one.welch.p));
  EXPECT_EQ(one.verdict, "tie");
}

// ---- a tuned sweep directory of hand-written runs ----------------------------------------------

std::string num(double v) { return std::isfinite(v) ? fmt::format("{}", v) : "null"; }

// A run: eval records at step 0 (step0) and at step 10 (last; NaN: diverged there); no metrics
// file at all when step0 is NaN (a run that failed before its first record).
void write_run(const std::string& dir, const std::string& status, double step0, double last) {
  if (std::isfinite(step0)) {
    testing::write_text(dir + "/metrics.jsonl",
               "{\"kind\":\"eval\",\"step\":0,\"val_loss\":" + num(step0) + "}\n" +
                   "{\"kind\":\"train\",\"step\":0,\"loss\":5.0,\"grad_norm\":1.0}\n" +
                   "{\"kind\":\"train\",\"step\":9,\"loss\":" +
                   (std::isfinite(last) ? "2.0" : "null") + ",\"grad_norm\":1.0}\n" +
                   "{\"kind\":\"eval\",\"step\":10,\"val_loss\":" + num(last) + "}\n");
  }
  testing::write_text(dir + "/point.json", "{\"status\":\"" + status + "\",\"exit_code\":0,\"wall_s\":1}\n");
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
    testing::write_text(dir_ / "s.yaml",
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
  EXPECT_EQ(t.baselines, std::vector<size_t>{0});
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
    EXPECT_NEAR(r.vs_baseline.welch.delta, delta, 1e-12);
    EXPECT_NEAR(r.vs_baseline.welch.df, df, 1e-9);
    if (a == 1) {
      // equal variances: df 4, the table's t_{0.975,4} and df 4's closed-form CDF
      EXPECT_NEAR(df, 4, 1e-9);
      EXPECT_NEAR(r.vs_baseline.welch.ci95_low, delta - 2.776445 * se, 1e-5);
      EXPECT_NEAR(r.vs_baseline.welch.ci95_high, delta + 2.776445 * se, 1e-5);
      const double tt = -std::fabs(delta / se);
      EXPECT_NEAR(r.vs_baseline.welch.p,
                  2 * (0.5 + tt * (tt * tt + 6) / (2 * std::pow(tt * tt + 4, 1.5))), 1e-10);
      EXPECT_EQ(r.vs_baseline.verdict, "better");
    } else {
      // the failed confirm run (l0 ~ 5.6) spreads sandwich's runs: the interval holds 0
      EXPECT_LT(r.vs_baseline.welch.ci95_low, 0);
      EXPECT_GT(r.vs_baseline.welch.ci95_high, 0);
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


// A ladder: search at two rungs, the middle rung's values transferred, paired verdicts per rung
// with Holm and a margin, the transfer audit's slopes and the machines of each rung's confirm
// runs, recomputed here from the hand-written runs.
TEST(TuneLadderTest, TransferredValuesPairedVerdictsAuditAndMachinesFromTheRuns) {
  testing::TempDir dir;
  testing::write_text(dir / "s.yaml",
             std::string("base: none.yaml\nout_dir: ") + (dir / "out") +
                 "\naxes: {model.layout: [pre, post, sandwich], model.d_model: [32, 64, 128]}\n"
                 "tune: {key: optim.lr, values: [1.0e-3, 2.0e-3, 4.0e-3], seeds: [1], confirm_seeds: [11, 12, 13],\n"
                 "       baseline: {model.layout: pre}, ladder: model.d_model, search_at: [32, 128],\n"
                 "       test: paired, margin: 0.01}\n");
  SweepOptions o;
  o.check_base = false;
  const Sweep sweep = parse_sweep_file(dir / "s.yaml", o);
  // The resolved sweep.yaml keeps the ladder and the tests (`normlab report` reads it back).
  testing::write_text(dir / "out/sweep.yaml", dump_sweep(sweep));
  const Sweep back = parse_sweep_file(dir / "out/sweep.yaml", o);
  ASSERT_TRUE(back.tune);
  EXPECT_EQ(back.tune->ladder, "model.d_model");
  EXPECT_EQ(back.tune->search_at, (std::vector<std::string>{"32", "128"}));
  EXPECT_EQ(back.tune->test, TestKind::kPaired);
  EXPECT_EQ(back.tune->margin, 0.01);
  EXPECT_EQ(back.tune->correction, Correction::kHolm);
  const auto cells = tune_arms(sweep);
  ASSERT_EQ(cells.size(), 9u);
  EXPECT_EQ(cells[4].name, "layout=post,d_model=64");
  EXPECT_EQ(cells[4].stem, "layout=post");
  EXPECT_EQ(cells[4].rung, 1u);
  // Search points only at the searched rungs.
  const auto search = expand_sweep(sweep);
  EXPECT_EQ(search.size(), 3u * 2 * 3);
  for (const auto& p : search) EXPECT_EQ(p.name.find("d_model=64"), std::string::npos) << p.name;
  auto run = [&](const std::string& name) { return std::string(dir / "out/runs/") + name; };
  // Selections: pre 4e-3 at 32 and 1e-3 at 128 (slope -1); post 2e-3 at both (slope 0); sandwich
  // 1e-3 at 32 (the grid's edge) and 2e-3 at 128 (slope +1/2).
  const std::map<std::string, std::vector<double>> grid = {
      {"pre,d_model=32", {2.0, 1.9, 1.8}},      {"pre,d_model=128", {1.5, 1.6, 1.7}},
      {"post,d_model=32", {2.0, 1.8, 1.9}},     {"post,d_model=128", {1.6, 1.5, 1.7}},
      {"sandwich,d_model=32", {1.8, 1.9, 2.0}}, {"sandwich,d_model=128", {1.6, 1.5, 1.7}}};
  const std::vector<std::string> values = {"1.0e-3", "2.0e-3", "4.0e-3"};
  for (const auto& [cell, m] : grid) {
    for (size_t v = 0; v < 3; ++v) write_run(run("layout=" + cell + ",lr=" + values[v] + ",seed=1"), "done", 5.5, m[v]);
  }
  const TuneSummary half = summarise_tune(sweep, dir / "out");
  ASSERT_TRUE(half.search_complete);
  std::vector<std::string> names;
  for (const auto& p : confirm_points(sweep, half.selected())) {
    if (p.seed == 11) names.push_back(p.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{
                       "layout=pre,d_model=32,lr=4.0e-3,confirm,seed=11", "layout=pre,d_model=64,lr=4.0e-3,confirm,seed=11",
                       "layout=pre,d_model=128,lr=1.0e-3,confirm,seed=11",
                       "layout=post,d_model=32,lr=2.0e-3,confirm,seed=11",
                       "layout=post,d_model=64,lr=2.0e-3,confirm,seed=11",
                       "layout=post,d_model=128,lr=2.0e-3,confirm,seed=11",
                       "layout=sandwich,d_model=32,lr=1.0e-3,confirm,seed=11",
                       "layout=sandwich,d_model=64,lr=1.0e-3,confirm,seed=11",
                       "layout=sandwich,d_model=128,lr=2.0e-3,confirm,seed=11"}));
  // Confirm runs: seeds share an offset (0, +0.2, -0.1) that Welch sees as noise and the pairing
  // removes. At d_model 64 post is better by ~0.03 on every seed, sandwich within 0.002 of pre
  // (equivalent at margin 0.01); at 32 post and sandwich differ from pre by a noisy ~0 (inconclusive);
  // at 128 one of pre's runs ran on another CPU.
  const std::vector<double> seed_offset = {0.0, 0.2, -0.1};
  const std::map<std::string, std::vector<double>> arm_offset = {
      {"pre,d_model=32", {1.70, 1.70, 1.70}},      {"post,d_model=32", {1.66, 1.74, 1.71}},
      {"sandwich,d_model=32", {1.75, 1.66, 1.70}}, {"pre,d_model=64", {1.60, 1.60, 1.60}},
      {"post,d_model=64", {1.571, 1.569, 1.572}},  {"sandwich,d_model=64", {1.601, 1.599, 1.6015}},
      {"pre,d_model=128", {1.50, 1.50, 1.50}},     {"post,d_model=128", {1.49, 1.47, 1.48}},
      {"sandwich,d_model=128", {1.52, 1.53, 1.51}}};
  const auto confirm = confirm_points(sweep, half.selected());
  std::map<std::string, std::vector<double>> values_of;
  for (const auto& p : confirm) {
    const std::string cell = p.name.substr(7, p.name.find(",lr=") - 7);
    const size_t k = static_cast<size_t>(p.seed - 11);
    const double x = arm_offset.at(cell)[k] + seed_offset[k];
    write_run(run(p.name), "done", 5.25 + 0.01 * static_cast<double>(k), x);
    values_of[cell].push_back(x);
    const std::string cpu = cell == "pre,d_model=128" && k == 2 ? "AMD EPYC" : "Intel Xeon";
    testing::write_text(run(p.name) + "/machine.json", "[{\"step\": 0, \"host\": \"h\", \"cpu\": \"" + cpu +
                                                  "\", \"device\": \"cpu\", \"torch\": \"2.11.0 (CPU)\", "
                                                  "\"commit\": \"abc\"}]\n");
  }
  const TuneSummary t = summarise_tune(sweep, dir / "out");
  ASSERT_EQ(t.arms.size(), 9u);
  EXPECT_EQ(t.rungs, (std::vector<std::string>{"32", "64", "128"}));
  EXPECT_EQ(t.baselines, (std::vector<size_t>{0, 1, 2}));
  // The test's own paired statistics: d over seeds, t quantiles at df 2.
  auto paired = [&](const std::string& a, const std::string& b) {
    std::vector<double> d;
    for (size_t k = 0; k < 3; ++k) d.push_back(values_of[a][k] - values_of[b][k]);
    const double mean = (d[0] + d[1] + d[2]) / 3;
    double ss = 0;
    for (double x : d) ss += (x - mean) * (x - mean);
    const double se = std::sqrt(ss / 2 / 3);
    const double p = 2 * (0.5 - std::fabs(mean / se) / (2 * std::sqrt(2 + (mean / se) * (mean / se))));
    return std::array<double, 3>{mean, se, p};
  };
  std::map<std::string, std::string> verdicts;
  for (const TuneArmResult& a : t.arms) {
    SCOPED_TRACE(a.name);
    const std::string cell = a.name.substr(7);
    verdicts[cell] = a.vs_baseline.verdict;
    EXPECT_EQ(a.transferred, a.rung == 1);
    EXPECT_EQ(a.searched, a.rung != 1);
    if (a.transferred) {
      EXPECT_EQ(a.from_rung, "32");
      EXPECT_TRUE(a.search.empty());
      EXPECT_NEAR(a.l0, 5.26, 1e-12);  // its confirm runs' step-0 evals: 5.25, 5.26, 5.27
    }
    if (a.stem == "layout=pre") {
      EXPECT_EQ(a.vs_baseline.verdict, "baseline");
      continue;
    }
    const std::string base = "pre,d_model=" + t.rungs[a.rung];
    const auto [mean, se, p] = paired(cell, base);
    const TuneVerdict& v = a.vs_baseline;
    EXPECT_NEAR(v.paired.delta, mean, 1e-12);
    EXPECT_NEAR(v.paired.se, se, 1e-12);
    EXPECT_NEAR(v.paired.p, p, 1e-9);
    EXPECT_NEAR(v.mde, (4.302653 + 1.060660) * se, 1e-5);  // t_{0.975,2} + t_{0.80,2}
    EXPECT_NEAR(v.welch.delta, mean, 1e-12);             // Welch beside it, on the same means
  }
  // Holm within each rung over its two arms: p_adj = the larger of 2 p_min and p_max for the larger,
  // 2 p_min for the smaller.
  for (size_t r = 0; r < 3; ++r) {
    const TuneArmResult &post = t.arms[3 + r], &sandwich = t.arms[6 + r];
    const double p1 = post.vs_baseline.paired.p, p2 = sandwich.vs_baseline.paired.p;
    const double lo = std::min(p1, p2), hi = std::max(p1, p2);
    EXPECT_NEAR(std::min(post.vs_baseline.p_adj, sandwich.vs_baseline.p_adj), std::min(1.0, 2 * lo), 1e-12);
    EXPECT_NEAR(std::max(post.vs_baseline.p_adj, sandwich.vs_baseline.p_adj), std::max(std::min(1.0, 2 * lo), hi),
                1e-12);
  }
  EXPECT_EQ(verdicts["post,d_model=64"], "better");
  EXPECT_EQ(verdicts["sandwich,d_model=64"], "equivalent");
  EXPECT_EQ(verdicts["post,d_model=32"], "inconclusive");
  EXPECT_EQ(verdicts["sandwich,d_model=32"], "inconclusive");
  // Welch would not have found d_model=64's post better: the seed offsets swamp it.
  EXPECT_GT(t.arms[4].vs_baseline.welch.p, 0.05);
  // Machines: only rung 128 is mixed.
  EXPECT_EQ(t.rung_machines[0], std::vector<std::string>{"Intel Xeon | cpu"});
  EXPECT_EQ(t.rung_machines[2].size(), 2u);
  EXPECT_TRUE(t.mixed_machines);
  // The transfer audit: log2 v* against log2 d_model.
  ASSERT_EQ(t.transfer.size(), 3u);
  EXPECT_EQ(t.transfer[0].stem, "layout=pre");
  EXPECT_EQ(t.transfer[0].rungs, (std::vector<std::string>{"32", "128"}));
  EXPECT_NEAR(t.transfer[0].slope, -1, 1e-12);
  EXPECT_NEAR(t.transfer[1].slope, 0, 1e-12);
  EXPECT_NEAR(t.transfer[2].slope, 0.5, 1e-12);
  EXPECT_TRUE(t.transfer[2].at_edge[0]);
  // Larger is better at each arm's selection at 32 (the search runs' eval at step 10; step 0 not
  // counted): pre 1.8 -> 1.7 at 4e-3, post 1.8 -> 1.5 at 2e-3, sandwich 1.8 -> 1.6 at 1e-3.
  for (size_t k = 0; k < 3; ++k) {
    ASSERT_EQ(t.transfer[k].ordered.size(), 1u);
    EXPECT_EQ(t.transfer[k].ordered[0].smaller, "32");
    EXPECT_EQ(t.transfer[k].ordered[0].larger, "128");
    EXPECT_EQ(t.transfer[k].ordered[0].evals, 1);
    EXPECT_EQ(t.transfer[k].ordered[0].first_not_below, -1);
  }
  EXPECT_EQ(t.transfer[0].ordered_value, 4e-3);
  EXPECT_EQ(t.transfer[2].ordered_value, 1e-3);
  // Larger is better on the confirm seeds: each arm 32 -> 64, 64 -> 128 and 32 -> 128 at the values
  // it ran at there, paired over the seeds (larger - smaller), Holm over the arm's three pairs.
  ASSERT_EQ(t.size_steps.size(), 9u);
  const std::vector<std::pair<std::string, std::string>> steps = {{"32", "64"}, {"64", "128"}, {"32", "128"}};
  for (size_t k = 0; k < 9; ++k) {
    const TuneSizeStep& st = t.size_steps[k];
    SCOPED_TRACE(st.stem + " " + st.smaller + " -> " + st.larger);
    EXPECT_EQ(st.stem, t.arms[3 * (k / 3)].stem);
    EXPECT_EQ(std::make_pair(st.smaller, st.larger), steps[k % 3]);
    const std::string arm = st.stem.substr(7);
    const auto [mean, se, p] = paired(arm + ",d_model=" + st.larger, arm + ",d_model=" + st.smaller);
    EXPECT_NEAR(st.v.paired.delta, mean, 1e-12);
    if (se > 0) {
      EXPECT_NEAR(st.v.paired.p, p, 1e-9);
    } else {
      EXPECT_EQ(st.v.paired.p, 0);  // the same difference on every seed: se 0, p 0
    }
    EXPECT_FALSE(st.at_entropy);
  }
  for (size_t arm = 0; arm < 3; ++arm) {
    std::vector<double> p;
    for (size_t k = 0; k < 3; ++k) p.push_back(t.size_steps[3 * arm + k].v.paired.p);
    std::vector<size_t> order = {0, 1, 2};
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
    double running = 0;
    for (size_t rank = 0; rank < 3; ++rank) {
      running = std::min(1.0, std::max(running, static_cast<double>(3 - rank) * p[order[rank]]));
      EXPECT_NEAR(t.size_steps[3 * arm + order[rank]].v.p_adj, running, 1e-12);
    }
  }
  // pre: 0.1 lower at 64 than at 32 on every seed (se ~ 0): the larger is better.
  EXPECT_EQ(t.size_steps[0].v.verdict, "better");
  EXPECT_LT(t.size_steps[0].v.paired.delta, 0);
  // summary.json and summary.md carry them.
  const YAML::Node j = YAML::Load(tune_json(t));
  EXPECT_EQ(j["ladder"].as<std::string>(), "model.d_model");
  EXPECT_EQ(j["test"].as<std::string>(), "paired");
  EXPECT_EQ(j["correction"].as<std::string>(), "holm");
  EXPECT_EQ(j["margin"].as<double>(), 0.01);
  EXPECT_TRUE(j["mixed_machines"].as<bool>());
  EXPECT_EQ(j["arms"][4]["rung"].as<double>(), 64);
  EXPECT_TRUE(j["arms"][4]["transferred"].as<bool>());
  EXPECT_EQ(j["arms"][4]["from_rung"].as<double>(), 32);
  EXPECT_EQ(j["arms"][4]["vs_baseline"]["verdict"].as<std::string>(), "better");
  EXPECT_NEAR(j["arms"][4]["vs_baseline"]["paired"]["p"].as<double>(), t.arms[4].vs_baseline.paired.p, 1e-12);
  EXPECT_NEAR(j["arms"][4]["vs_baseline"]["mde"].as<double>(), t.arms[4].vs_baseline.mde, 1e-12);
  EXPECT_NEAR(j["transfer"][0]["slope"].as<double>(), -1, 1e-12);
  const std::string md = tune_markdown(t);
  EXPECT_NE(md.find("### model.d_model = 64"), std::string::npos) << md;
  EXPECT_NE(md.find("| layout=post | 2.0e-3 from 32 |"), std::string::npos) << md;
  EXPECT_NE(md.find("**Machines mixed at model.d_model = 128**"), std::string::npos) << md;
  EXPECT_NE(md.find("| equivalent |"), std::string::npos) << md;
  EXPECT_NE(md.find("Transfer audit"), std::string::npos) << md;
  EXPECT_NE(md.find("- layout=pre at 0.004: 32 -> 128 below at all 1\n"), std::string::npos) << md;
  EXPECT_EQ(j["transfer"][0]["ordered"][0]["first_not_below"].as<int>(), -1);
  EXPECT_EQ(j["size_steps"][0]["smaller"].as<double>(), 32);
  EXPECT_EQ(j["size_steps"][2]["larger"].as<double>(), 128);
  EXPECT_EQ(j["size_steps"][0]["verdict"].as<std::string>(), "better");
  EXPECT_NEAR(j["size_steps"][4]["p_adj"].as<double>(), t.size_steps[4].v.p_adj, 1e-12);
  EXPECT_NE(md.find("Larger is better on the confirm seeds?"), std::string::npos) << md;
  EXPECT_NE(md.find("| layout=pre | 32 -> 64 | -0.1"), std::string::npos) << md;
}

// The fitted optimum: the parabola's minimum over the bracket, from the seed means.
TEST(TuneFitTest, QuadraticOptimumIsTheParabolasMinimumOverTheBracket) {
  const std::vector<double> x = {std::log2(1e-3), std::log2(2e-3), std::log2(4e-3)};
  const double star = std::log2(2.5e-3);
  auto parabola = [&](double xi) { return 1.5 + 0.1 * (xi - star) * (xi - star); };
  // Per-seed offsets shift all three points of a seed alike: every resample has the same vertex.
  std::vector<std::vector<double>> y;
  for (const double off : {0.0, 0.2, -0.1}) y.push_back({parabola(x[0]) + off, parabola(x[1]) + off, parabola(x[2]) + off});
  QuadraticOptimum q = quadratic_optimum(x, y);
  EXPECT_NEAR(q.x, star, 1e-12);
  EXPECT_NEAR(q.low, star, 1e-12);
  EXPECT_NEAR(q.high, star, 1e-12);
  EXPECT_FALSE(q.at_edge);
  // Noise that differs between the points of a seed: the interval widens around the estimate,
  // and the same runs give the same interval.
  y[1][0] += 0.02;
  y[2][2] += 0.03;
  q = quadratic_optimum(x, y);
  EXPECT_LT(q.low, q.x);
  EXPECT_GE(q.high, q.x);
  EXPECT_GE(q.low, x[0]);
  EXPECT_LE(q.high, x[2]);
  const QuadraticOptimum again = quadratic_optimum(x, y);
  EXPECT_EQ(again.low, q.low);
  EXPECT_EQ(again.high, q.high);
  // The test's own vertex of the parabola through the three means.
  const double m0 = (y[0][0] + y[1][0] + y[2][0]) / 3, m1 = (y[0][1] + y[1][1] + y[2][1]) / 3,
               m2 = (y[0][2] + y[1][2] + y[2][2]) / 3;
  const double h = x[1] - x[0];
  EXPECT_NEAR(q.x, x[1] + h * (m0 - m2) / (2 * (m0 - 2 * m1 + m2)), 1e-12);
  // Still falling at the upper end: the bracket's end, flagged.
  q = quadratic_optimum(x, {{2.0, 1.9, 1.7}, {2.1, 2.0, 1.8}});
  EXPECT_EQ(q.x, x[2]);
  EXPECT_TRUE(q.at_edge);
  // Curving down: the lower end.
  q = quadratic_optimum(x, {{1.6, 1.9, 1.7}});
  EXPECT_EQ(q.x, x[0]);
  EXPECT_TRUE(q.at_edge);
  EXPECT_TRUE(std::isnan(q.low));  // one seed: no interval
  EXPECT_TRUE(std::isnan(quadratic_optimum(x, {{1.6, std::nan(""), 1.7}}).x));
}

// The optimum against the ladder, resampled with the same seeds at every rung. Seed k's runs at rung
// r lie on (x - c_r - d_k)^2: the seed-mean parabola's vertex is c_r + mean(d) over the drawn seeds.
TEST(TuneFitTest, FittedSlopeResamplesTheSameSeedsAtEveryRung) {
  const std::vector<double> x = {-8.0, -7.0, -6.0};  // log2 of 1/256, 1/128, 1/64
  const std::vector<double> d = {-0.3, 0.0, 0.4};    // each seed's own shift of the optimum
  auto rung = [&](double c, const std::vector<double>& shift) {
    std::vector<std::vector<double>> y;
    for (const double dk : shift) {
      std::vector<double> row;
      for (const double xi : x) row.push_back(1.5 + (xi - c - dk) * (xi - c - dk));
      y.push_back(row);
    }
    return y;
  };
  // Every seed shifts every rung's optimum alike: the slope and the ratio are the same in every
  // resample (an unpaired resample would spread them by the seeds' 0.7 range). Rungs d = 64, 128,
  // 512, unevenly spaced in log2, and optima -7.2, -6.9, -6.6 off a line: the middle rung counts,
  // the least-squares slope is 0.9 / (42 / 9) = 27 / 140, not the ends' 0.2.
  FittedSlope f = fitted_slope({6.0, 7.0, 9.0}, {x, x, x}, {rung(-7.2, d), rung(-6.9, d), rung(-6.6, d)});
  EXPECT_NEAR(f.slope, 27.0 / 140.0, 1e-12);
  EXPECT_NEAR(f.low, 27.0 / 140.0, 1e-12);
  EXPECT_NEAR(f.high, 27.0 / 140.0, 1e-12);
  EXPECT_NEAR(f.log2_ratio, 0.6, 1e-12);
  EXPECT_NEAR(f.ratio_low, 0.6, 1e-12);
  EXPECT_NEAR(f.ratio_high, 0.6, 1e-12);
  EXPECT_EQ(f.edge_share, 0.0);
  EXPECT_EQ(f.rung_edge_share, std::vector<double>(3, 0.0));
  f = fitted_slope({6.0, 8.0}, {x, x}, {rung(-7.2, d), rung(-6.8, d)});
  EXPECT_NEAR(f.low, 0.2, 1e-12);
  EXPECT_NEAR(f.high, 0.2, 1e-12);
  // The point estimate is the least-squares slope through each rung's quadratic_optimum; the
  // interval the 2.5 % and 97.5 % points. Four seeds, the last rung's fourth one 0.6 octaves up:
  // a resample that draws it j times puts that rung at -6.8 + 0.15 j. P(j = 0) = (3/4)^4 = 32 %,
  // P(j = 4) = 1/256 (under 2.5 %), P(j >= 3) = 13/256 (above): the ratio's interval is
  // [0.4, 0.85] (not its range, [0.4, 1.0]) and the slope's, over rungs 6, 7, 8, half of it.
  const std::vector<double> rungs = {6.0, 7.0, 8.0};  // log2 d = 64, 128, 256
  const std::vector<double> flat = {0.0, 0.0, 0.0, 0.0};
  const std::vector<double> spread = {0.0, 0.0, 0.0, 0.6};
  f = fitted_slope(rungs, {x, x, x}, {rung(-7.2, flat), rung(-7.0, flat), rung(-6.8, spread)});
  const double last = quadratic_optimum(x, rung(-6.8, spread)).x;
  EXPECT_NEAR(last, -6.65, 1e-12);
  EXPECT_NEAR(f.slope, least_squares_slope(rungs, {-7.2, -7.0, last}), 1e-12);
  EXPECT_NEAR(f.log2_ratio, last + 7.2, 1e-12);
  EXPECT_NEAR(f.ratio_low, 0.4, 1e-12);
  EXPECT_NEAR(f.ratio_high, 0.85, 1e-12);
  EXPECT_NEAR(f.low, 0.2, 1e-12);
  EXPECT_NEAR(f.high, 0.425, 1e-12);
  EXPECT_EQ(f.edge_share, 0.0);
  // Seeds whose own optimum lies 3 octaves off: seed 0 pushes the first rung below its bracket,
  // seed 2 the last rung above its own. Each rung sits at its end in the resamples that draw its
  // seed at least once, 1 - (2/3)^3 = 19/27; some rung does in those that draw either, 26/27 (not
  // the sum, 38/27). The ratio's top is the two brackets' ends, -6 - (-8) = 2 (both drawn: 12/27).
  const std::vector<double> none = {0.0, 0.0, 0.0};
  f = fitted_slope(rungs, {x, x, x}, {rung(-7.2, {-3.0, 0.0, 0.0}), rung(-7.0, none), rung(-6.8, {0.0, 0.0, 3.0})});
  EXPECT_NEAR(f.edge_share, 26.0 / 27.0, 0.02);
  ASSERT_EQ(f.rung_edge_share.size(), 3u);
  EXPECT_NEAR(f.rung_edge_share[0], 19.0 / 27.0, 0.03);
  EXPECT_EQ(f.rung_edge_share[1], 0.0);
  EXPECT_NEAR(f.rung_edge_share[2], 19.0 / 27.0, 0.03);
  EXPECT_NEAR(f.ratio_high, 2.0, 1e-12);
  // Fewer than two rungs, one seed, or an unfinished run.
  EXPECT_TRUE(std::isnan(fitted_slope({6.0}, {x}, {rung(-7.0, d)}).slope));
  f = fitted_slope({6.0, 8.0}, {x, x}, {rung(-7.2, {0.0}), rung(-6.8, {0.0})});
  EXPECT_NEAR(f.slope, 0.2, 1e-12);
  EXPECT_TRUE(std::isnan(f.low));
  EXPECT_TRUE(std::isnan(f.edge_share));
  EXPECT_TRUE(f.rung_edge_share.empty());
  auto unfinished = rung(-6.8, d);
  unfinished[1][2] = std::nan("");
  EXPECT_TRUE(std::isnan(fitted_slope({6.0, 8.0}, {x, x}, {rung(-7.2, d), unfinished}).slope));
}

TEST(TuneFitTest, ConfirmRunsEitherSideOfTheSelectionGiveEachCellsFittedOptimum) {
  testing::TempDir dir;
  testing::write_text(dir / "s.yaml",
             std::string("base: none.yaml\nout_dir: ") + (dir / "out") +
                 "\naxes: {model.layout: [pre, post], model.d_model: [32, 64]}\n"
                 "tune: {key: optim.lr, values: [1.0e-3, 2.0e-3, 4.0e-3], seeds: [1], confirm_seeds: [11, 12],\n"
                 "       baseline: {model.layout: pre}, ladder: model.d_model, fit: quadratic}\n");
  SweepOptions o;
  o.check_base = false;
  const Sweep sweep = parse_sweep_file(dir / "s.yaml", o);
  ASSERT_TRUE(sweep.tune->fit);
  testing::write_text(dir / "out/sweep.yaml", dump_sweep(sweep));
  EXPECT_TRUE(parse_sweep_file(dir / "out/sweep.yaml", o).tune->fit);
  EXPECT_NO_THROW(expand_sweep(sweep));  // a neighbour's name is another selection's confirm name
  auto run = [&](const std::string& name) { return std::string(dir / "out/runs/") + name; };
  // Search: pre selects 2e-3 at both widths (inside the grid), post 4e-3 (the grid's edge).
  const std::vector<std::string> values = {"1.0e-3", "2.0e-3", "4.0e-3"};
  for (const std::string d : {"32", "64"}) {
    const std::vector<double> pre = {1.9, 1.7, 1.8}, post = {2.0, 1.9, 1.8};
    for (size_t v = 0; v < 3; ++v) {
      write_run(run("layout=pre,d_model=" + d + ",lr=" + values[v] + ",seed=1"), "done", 5.5, pre[v]);
      write_run(run("layout=post,d_model=" + d + ",lr=" + values[v] + ",seed=1"), "done", 5.5, post[v]);
    }
  }
  const TuneSummary half = summarise_tune(sweep, dir / "out");
  ASSERT_TRUE(half.search_complete);
  std::vector<std::string> names;
  for (const auto& p : confirm_points(sweep, half.selected())) {
    if (p.seed == 11 && p.name.find("d_model=32") != std::string::npos) names.push_back(p.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"layout=pre,d_model=32,lr=2.0e-3,confirm,seed=11",
                                             "layout=pre,d_model=32,lr=1.0e-3,confirm,seed=11",
                                             "layout=pre,d_model=32,lr=4.0e-3,confirm,seed=11",
                                             "layout=post,d_model=32,lr=4.0e-3,confirm,seed=11",
                                             "layout=post,d_model=32,lr=2.0e-3,confirm,seed=11"}));
  // Confirm runs on a parabola in log2 lr with its minimum at 2.5e-3 (d = 32) and 3e-3 (d = 64),
  // plus a per-seed offset.
  for (const auto& p : confirm_points(sweep, half.selected())) {
    const double lr = std::stod(p.overrides.back().second);
    const double star = p.name.find("d_model=32") != std::string::npos ? 2.5e-3 : 3e-3;
    const double dx = std::log2(lr) - std::log2(star);
    write_run(run(p.name), "done", 5.25, 1.5 + 0.1 * dx * dx + (p.seed == 11 ? 0.0 : 0.05));
  }
  const TuneSummary t = summarise_tune(sweep, dir / "out");
  ASSERT_EQ(t.arms.size(), 4u);
  EXPECT_NEAR(t.arms[0].fitted, 2.5e-3, 1e-12);
  EXPECT_NEAR(t.arms[0].fitted_low, 2.5e-3, 1e-12);
  EXPECT_NEAR(t.arms[0].fitted_high, 2.5e-3, 1e-12);
  EXPECT_NEAR(t.arms[1].fitted, 3e-3, 1e-12);
  EXPECT_TRUE(std::isnan(t.arms[2].fitted));  // post: v* at the grid's edge
  // The verdicts read the runs at v* only (two per cell).
  EXPECT_EQ(t.arms[0].confirm_n, 2);
  EXPECT_NEAR(t.arms[0].confirm_mean, 1.5 + 0.1 * std::pow(1 - std::log2(2.5), 2) + 0.025, 1e-12);
  ASSERT_EQ(t.transfer.size(), 2u);
  EXPECT_EQ(t.transfer[0].fit_rungs, (std::vector<std::string>{"32", "64"}));
  EXPECT_NEAR(t.transfer[0].fitted_slope, std::log2(3.0 / 2.5), 1e-12);  // log2 of the ratio over one doubling
  EXPECT_TRUE(t.transfer[1].fit_rungs.empty());
  const YAML::Node j = YAML::Load(tune_json(t));
  EXPECT_EQ(j["fit"].as<std::string>(), "quadratic");
  EXPECT_NEAR(j["arms"][0]["fit"]["value"].as<double>(), 2.5e-3, 1e-12);
  EXPECT_NEAR(j["transfer"][0]["fitted_slope"].as<double>(), std::log2(1.2), 1e-12);
  const std::string md = tune_markdown(t);
  EXPECT_NE(md.find("| layout=pre,d_model=32 | 2.0e-3 | 0.0025 [0.0025, 0.0025] |"), std::string::npos) << md;
  // The seeds differ by a constant here, which moves no optimum: a zero-width paired interval.
  EXPECT_NE(md.find("| layout=pre | 32, 64 | +0.26 [+0.26, +0.26] | +0.26 [+0.26, +0.26] | 0 % |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| layout=post | - | - | - | - |"), std::string::npos) << md;
  EXPECT_NEAR(j["transfer"][0]["fitted_log2_ratio"].as<double>(), std::log2(1.2), 1e-12);
  EXPECT_NEAR(j["transfer"][0]["fitted_slope_low"].as<double>(), std::log2(1.2), 1e-12);
  EXPECT_NEAR(j["transfer"][0]["fitted_edge_share"].as<double>(), 0.0, 0.0);
  ASSERT_EQ(j["transfer"][0]["fitted_edge_share_by_rung"].size(), 2u);
  EXPECT_EQ(j["transfer"][0]["fitted_edge_share_by_rung"][1]["rung"].as<int>(), 64);
  EXPECT_EQ(j["transfer"][0]["fitted_edge_share_by_rung"][1]["share"].as<double>(), 0.0);
  // Larger is not better at the selections: d = 64 at 2e-3 (pre) and 4e-3 (post) ties d = 32 at step 10.
  EXPECT_EQ(t.transfer[0].ordered[0].first_not_below, 10);
  EXPECT_EQ(t.transfer[1].ordered[0].first_not_below, 10);
  EXPECT_NE(md.find("- layout=post at 0.004: 32 -> 64 not below at step 10\n"), std::string::npos) << md;
  // The same runs with the ladder written largest first: the fit still reads the rungs smallest
  // first, so the ratio is the larger width's optimum over the smaller's (+log2 1.2, not -).
  testing::write_text(dir / "r.yaml",
             std::string("base: none.yaml\nout_dir: ") + (dir / "out") +
                 "\naxes: {model.layout: [pre, post], model.d_model: [64, 32]}\n"
                 "tune: {key: optim.lr, values: [1.0e-3, 2.0e-3, 4.0e-3], seeds: [1], confirm_seeds: [11, 12],\n"
                 "       baseline: {model.layout: pre}, ladder: model.d_model, fit: quadratic}\n");
  const TuneSummary r = summarise_tune(parse_sweep_file(dir / "r.yaml", o), dir / "out");
  ASSERT_EQ(r.transfer.size(), 2u);
  EXPECT_EQ(r.transfer[0].paired_rungs, (std::vector<std::string>{"32", "64"}));
  EXPECT_NEAR(r.transfer[0].fitted_paired.log2_ratio, std::log2(1.2), 1e-12);
  EXPECT_NEAR(r.transfer[0].fitted_paired.ratio_low, std::log2(1.2), 1e-12);
  EXPECT_NEAR(r.transfer[0].fitted_slope, std::log2(1.2), 1e-12);
}

// Values chosen elsewhere (tune.given, e.g. another machine's search): where no rung is searched
// nothing is, and every cell runs its confirm seeds at its arm's given value, with the usual
// per-rung verdicts; with a searched rung, the rungs before it take the given value and the rungs
// after it that rung's selection.
TEST(TuneLadderTest, GivenValuesStandInForTheSearchWhereNoSearchedRungComesBefore) {
  testing::TempDir dir;
  const std::string head = std::string("base: none.yaml\nout_dir: ") + (dir / "out") +
                           "\naxes: {model.layout: [pre, post], model.d_model: [32, 64, 128]}\n"
                           "tune: {key: optim.lr, values: [1.0e-3, 2.0e-3, 4.0e-3], seeds: [1], confirm_seeds: [11, 12, 13],\n"
                           "       baseline: {model.layout: pre}, ladder: model.d_model, test: paired,\n"
                           "       given: [{model.layout: post, value: 1.0e-3}, {model.layout: pre, value: 4e-3}]";
  testing::write_text(dir / "s.yaml", head + "}\n");
  testing::write_text(dir / "m.yaml", head + ", search_at: [64]}\n");
  SweepOptions o;
  o.check_base = false;
  const Sweep sweep = parse_sweep_file(dir / "s.yaml", o);
  EXPECT_TRUE(expand_sweep(sweep).empty());  // no rung searched: no search run at all
  testing::write_text(dir / "out/sweep.yaml", dump_sweep(sweep));
  const Sweep back = parse_sweep_file(dir / "out/sweep.yaml", o);
  ASSERT_EQ(back.tune->given.size(), 2u);
  EXPECT_EQ(back.tune->given[1].text, "4e-3");
  EXPECT_EQ(back.tune->given[1].arm, (std::vector<std::pair<std::string, std::string>>{{"model.layout", "pre"}}));
  EXPECT_TRUE(back.tune->search_at.empty());
  const TuneSummary none = summarise_tune(sweep, dir / "out");
  ASSERT_TRUE(none.search_complete);
  std::vector<std::string> names;
  const auto confirm = confirm_points(sweep, none.selected());
  for (const auto& p : confirm) {
    if (p.seed == 11) names.push_back(p.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"layout=pre,d_model=32,lr=4.0e-3,confirm,seed=11",
                                             "layout=pre,d_model=64,lr=4.0e-3,confirm,seed=11",
                                             "layout=pre,d_model=128,lr=4.0e-3,confirm,seed=11",
                                             "layout=post,d_model=32,lr=1.0e-3,confirm,seed=11",
                                             "layout=post,d_model=64,lr=1.0e-3,confirm,seed=11",
                                             "layout=post,d_model=128,lr=1.0e-3,confirm,seed=11"}));
  // Post behind pre by 0.03, 0.05, 0.04 on the three seeds at every rung; seeds share offsets.
  auto run = [&](const std::string& name) { return std::string(dir / "out/runs/") + name; };
  const std::vector<double> seed_offset = {0.0, 0.2, -0.1}, post_gap = {0.03, 0.05, 0.04};
  for (const auto& p : confirm) {
    const size_t k = static_cast<size_t>(p.seed - 11);
    const bool post = p.name.rfind("layout=post", 0) == 0;
    write_run(run(p.name), "done", 5.5, 1.6 + seed_offset[k] + (post ? post_gap[k] : 0.0));
  }
  const TuneSummary t = summarise_tune(sweep, dir / "out");
  ASSERT_EQ(t.arms.size(), 6u);
  for (const TuneArmResult& a : t.arms) {
    const bool post = a.stem == "layout=post";
    EXPECT_TRUE(a.given && a.transferred && !a.searched) << a.name;
    EXPECT_EQ(a.selected, post ? 0 : 2) << a.name;
    EXPECT_TRUE(a.confirm_complete) << a.name;
    EXPECT_NEAR(a.l0, 5.5, 1e-12) << a.name;  // from its confirm runs: there is no search run
    if (!post) continue;
    EXPECT_NEAR(a.vs_baseline.paired.delta, 0.04, 1e-12) << a.name;
    EXPECT_NEAR(a.vs_baseline.paired.ci95_low, 0.04 - 4.302652729749464 * 0.01 / std::sqrt(3.0), 1e-9) << a.name;
    EXPECT_EQ(a.vs_baseline.verdict, "worse") << a.name;
  }
  const std::string md = tune_markdown(t);
  EXPECT_NE(md.find("searched at none; at any other rung an arm runs at the value it selected at the nearest "
                    "searched rung before (its given value when none comes before)"),
            std::string::npos) << md;
  EXPECT_NE(md.find("\nGiven: "), std::string::npos) << md;
  EXPECT_NE(md.find("Search: none; every arm runs at the optim.lr tune.given names for it, one of [1.0e-3, "
                    "2.0e-3, 4.0e-3] (Given, below). Confirm: "),
            std::string::npos) << md;
  EXPECT_NE(md.find("| layout=post | 1.0e-3 given |  | - | "), std::string::npos) << md;
  EXPECT_EQ(md.find("e-3 from"), std::string::npos) << md;
  EXPECT_EQ(md.find("Search grid"), std::string::npos) << md;  // nothing was searched
  const YAML::Node j = YAML::Load(tune_json(t));
  EXPECT_TRUE(j["arms"][3]["given"].as<bool>());
  EXPECT_TRUE(j["arms"][3]["from_rung"].IsNull());
  EXPECT_NEAR(j["arms"][3]["selected"].as<double>(), 1e-3, 1e-15);
  ASSERT_EQ(j["given"].size(), 2u);
  EXPECT_EQ(j["given"][1]["model.layout"].as<std::string>(), "pre");
  EXPECT_NEAR(j["given"][1]["value"].as<double>(), 4e-3, 1e-15);
  EXPECT_EQ(j["search_at"].size(), 0u);
  // Searched at 64: 32 keeps the given values, 64 selects from its search, 128 carries 64's.
  const Sweep mid = parse_sweep_file(dir / "m.yaml", o);
  const auto search = expand_sweep(mid);
  EXPECT_EQ(search.size(), 2u * 3);
  for (const auto& p : search) EXPECT_NE(p.name.find("d_model=64,"), std::string::npos) << p.name;
  const std::vector<std::string> values = {"1.0e-3", "2.0e-3", "4.0e-3"};
  const std::vector<double> m = {1.9, 1.7, 1.8};
  for (const std::string arm : {"pre", "post"}) {
    for (size_t v = 0; v < 3; ++v) write_run(run("layout=" + arm + ",d_model=64,lr=" + values[v] + ",seed=1"), "done", 5.5, m[v]);
  }
  const TuneSummary ms = summarise_tune(mid, dir / "out");
  ASSERT_TRUE(ms.search_complete);
  ASSERT_EQ(ms.arms.size(), 6u);
  const std::vector<int> selected = {2, 1, 1, 0, 1, 1};
  const std::vector<bool> given = {true, false, false, true, false, false};
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(ms.arms[i].selected, selected[i]) << ms.arms[i].name;
    EXPECT_EQ(ms.arms[i].given, given[i]) << ms.arms[i].name;
  }
  EXPECT_EQ(ms.arms[2].from_rung, "64");
  const std::string mmd = tune_markdown(ms);
  EXPECT_NE(mmd.find("| layout=pre | 2.0e-3 from 64 |"), std::string::npos) << mmd;
  EXPECT_NE(mmd.find("| layout=pre | 4.0e-3 given |"), std::string::npos) << mmd;
  EXPECT_NE(mmd.find("Search: every arm at each searched rung at optim.lr"), std::string::npos) << mmd;
  EXPECT_NE(mmd.find("searched at [64]"), std::string::npos) << mmd;
}

// µP's protocol: the rate searched at the base width only and carried up (search_at one rung); the
// fit at every rung still gives the fitted optimum against the ladder, with no search-side audit.
TEST(TuneFitTest, ALadderSearchedAtOneRungStillFitsTheOptimumAgainstTheLadder) {
  testing::TempDir dir;
  const std::string head = std::string("base: none.yaml\nout_dir: ") + (dir / "out") +
                           "\naxes: {model.d_model: [32, 64]}\n"
                           "tune: {key: optim.lr, values: [1.0e-3, 2.0e-3, 4.0e-3], seeds: [1], confirm_seeds: [11, 12],\n"
                           "       baseline: {}, ladder: model.d_model, search_at: [32]";
  testing::write_text(dir / "s.yaml", head + ", fit: quadratic}\n");
  testing::write_text(dir / "n.yaml", head + "}\n");
  SweepOptions o;
  o.check_base = false;
  const Sweep sweep = parse_sweep_file(dir / "s.yaml", o);
  auto run = [&](const std::string& name) { return std::string(dir / "out/runs/") + name; };
  const std::vector<std::string> values = {"1.0e-3", "2.0e-3", "4.0e-3"};
  const std::vector<double> search = {1.9, 1.7, 1.8};
  for (size_t v = 0; v < 3; ++v) write_run(run("d_model=32,lr=" + values[v] + ",seed=1"), "done", 5.5, search[v]);
  const TuneSummary half = summarise_tune(sweep, dir / "out");
  ASSERT_TRUE(half.search_complete);
  // Parabolas in log2 lr with their minima at 2.5e-3 (d = 32) and 3e-3 (d = 64), seed 12 higher.
  std::map<std::string, double> mean;  // the test's own means per (rung, value)
  for (const auto& p : confirm_points(sweep, half.selected())) {
    const double lr = std::stod(p.overrides.back().second);
    const bool narrow = p.name.find("d_model=32") != std::string::npos;
    const double dx = std::log2(lr) - std::log2(narrow ? 2.5e-3 : 3e-3);
    const double y = 1.5 + 0.1 * dx * dx + (p.seed == 11 ? 0.0 : 0.05);
    write_run(run(p.name), "done", 5.25, y);
    mean[(narrow ? "32@" : "64@") + p.overrides.back().second] += y / 2;
  }
  ASSERT_EQ(mean.size(), 6u);  // both rungs ran their confirm seeds at v* = 2e-3 and either side
  const TuneSummary t = summarise_tune(sweep, dir / "out");
  ASSERT_EQ(t.arms.size(), 2u);
  EXPECT_TRUE(t.arms[1].transferred);
  EXPECT_NEAR(t.arms[1].fitted, 3e-3, 1e-12);
  ASSERT_EQ(t.transfer.size(), 1u);
  EXPECT_EQ(t.transfer[0].rungs, (std::vector<std::string>{"32"}));  // searched at one rung: no slope of v*
  EXPECT_TRUE(std::isnan(t.transfer[0].slope));
  EXPECT_TRUE(t.transfer[0].ordered.empty());
  EXPECT_EQ(t.transfer[0].paired_rungs, (std::vector<std::string>{"32", "64"}));
  EXPECT_NEAR(t.transfer[0].fitted_paired.log2_ratio, std::log2(1.2), 1e-12);
  EXPECT_NEAR(t.transfer[0].fitted_slope, std::log2(1.2), 1e-12);
  const std::string md = tune_markdown(t);
  EXPECT_NE(md.find("| (all) | 32, 64 | +0.26 [+0.26, +0.26] | +0.26 [+0.26, +0.26] | 0 % |"), std::string::npos) << md;
  EXPECT_EQ(md.find("Transfer audit"), std::string::npos) << md;  // it needs two searched rungs
  const YAML::Node j = YAML::Load(tune_json(t));
  EXPECT_TRUE(j["transfer"][0]["slope"].IsNull());
  EXPECT_NEAR(j["transfer"][0]["fitted_log2_ratio"].as<double>(), std::log2(1.2), 1e-12);
  // Each arm's fit points: the bracket's values and the confirm seeds' mean at each.
  for (size_t a = 0; a < 2; ++a) {
    const YAML::Node f = j["arms"][a]["fit"];
    ASSERT_EQ(f["points"].size(), 3u);
    ASSERT_EQ(f["means"].size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_NEAR(f["points"][i].as<double>(), std::stod(values[i]), 1e-15);
      EXPECT_NEAR(f["means"][i].as<double>(), mean[(a == 0 ? "32@" : "64@") + values[i]], 1e-12);
    }
  }
  // Without a fit, one searched rung gives nothing against the ladder (no transfer[] at all).
  const TuneSummary n = summarise_tune(parse_sweep_file(dir / "n.yaml", o), dir / "out");
  EXPECT_TRUE(n.transfer.empty());
  EXPECT_EQ(tune_markdown(n).find("Fitted optimum against"), std::string::npos);
}

// The fit's bracket walk (tune.fit_extend): from v*'s neighbours towards the lowest confirm mean.
TEST(TuneFitTest, FitWalkMovesTheBracketTowardsTheLowestMeanWithinTheGridAndTheBudget) {
  const double nan = kNaN;
  // The lowest inside the bracket: centred on it, nothing more to run.
  FitWalk w = fit_walk({nan, 2.0, 1.9, 2.1, nan}, 2, 2);
  EXPECT_EQ(w.centre, 2);
  EXPECT_EQ(w.next, -1);
  // Falling at the upper end: the next value up is needed first.
  w = fit_walk({nan, 2.0, 1.9, 1.8, nan, nan}, 2, 2);
  EXPECT_EQ(w.centre, -1);
  EXPECT_EQ(w.next, 4);
  // With it run and higher: the bracket centres on the value that was v*'s upper neighbour.
  w = fit_walk({nan, 2.0, 1.9, 1.8, 1.85, nan}, 2, 2);
  EXPECT_EQ(w.centre, 3);
  EXPECT_EQ(w.next, -1);
  // Still falling: one more, then the budget (2 past v* + 1 = index 5) ends the walk at its end.
  w = fit_walk({nan, 2.0, 1.9, 1.8, 1.7, nan, nan}, 2, 2);
  EXPECT_EQ(w.next, 5);
  w = fit_walk({nan, 2.0, 1.9, 1.8, 1.7, 1.6, nan}, 2, 2);
  EXPECT_EQ(w.centre, 4);  // the three values ending at the budget's end
  EXPECT_EQ(w.next, -1);
  // The grid's end stops it too.
  w = fit_walk({nan, 2.0, 1.9, 1.8, 1.7}, 2, 5);
  EXPECT_EQ(w.centre, 3);
  EXPECT_EQ(w.next, -1);
  // Downwards, the same; budget 0 keeps v* (today's fit).
  w = fit_walk({nan, nan, 1.7, 1.8, 1.9, nan}, 3, 1);
  EXPECT_EQ(w.next, 1);
  w = fit_walk({nan, 1.75, 1.7, 1.8, 1.9, nan}, 3, 1);
  EXPECT_EQ(w.centre, 2);
  w = fit_walk({nan, 2.0, 1.7, 1.8, 1.9, nan}, 3, 0);
  EXPECT_EQ(w.centre, 3);
  EXPECT_EQ(w.next, -1);
  w = fit_walk({nan, 1.6, 1.7, 1.8, 1.9, nan}, 3, 1);  // still falling at the budget's end
  EXPECT_EQ(w.centre, 2);
  // A bracket value not finished: undecided, nothing to start. No bracket at the grid's edge.
  w = fit_walk({nan, 2.0, nan, 1.8, nan}, 2, 2);
  EXPECT_EQ(w.centre, -1);
  EXPECT_EQ(w.next, -1);
  EXPECT_EQ(fit_walk({1.5, 2.0, 2.1}, 0, 3).centre, -1);
  EXPECT_EQ(fit_walk({2.0, 2.1, 1.5}, 2, 3).centre, -1);
  // Equal means: the first (smaller value) counts as the lowest, so an interior tie stays.
  EXPECT_EQ(fit_walk({nan, 1.9, 1.9, 2.0, nan}, 2, 2).next, 0);
  EXPECT_EQ(fit_walk({nan, 2.0, 1.9, 1.9, nan}, 2, 2).centre, 2);
}

// A sweep with fit_extend: the walk's points, then the fit around the lowest confirm mean.
TEST(TuneFitTest, FitExtendRunsBeyondTheBracketUntilTheMinimumIsInsideAndFitsThere) {
  testing::TempDir dir;
  testing::write_text(dir / "s.yaml",
             std::string("base: none.yaml\nout_dir: ") + (dir / "out") +
                 "\naxes: {model.layout: [pre, post]}\n"
                 "tune: {key: optim.lr, values: [1.0e-3, 2.0e-3, 4.0e-3, 8.0e-3, 1.6e-2, 3.2e-2], seeds: [1],\n"
                 "       confirm_seeds: [11, 12], baseline: {model.layout: pre}, fit: quadratic, fit_extend: 2}\n");
  SweepOptions o;
  o.check_base = false;
  const Sweep sweep = parse_sweep_file(dir / "s.yaml", o);
  ASSERT_EQ(sweep.tune->fit_extend, 2);
  testing::write_text(dir / "out/sweep.yaml", dump_sweep(sweep));
  EXPECT_EQ(parse_sweep_file(dir / "out/sweep.yaml", o).tune->fit_extend, 2);
  auto run = [&](const std::string& name) { return std::string(dir / "out/runs/") + name; };
  const std::vector<std::string> values = {"1.0e-3", "2.0e-3", "4.0e-3", "8.0e-3", "1.6e-2", "3.2e-2"};
  // Search (one seed): both arms select 2e-3 (index 1).
  for (size_t v = 0; v < values.size(); ++v) {
    for (const std::string arm : {"pre", "post"}) {
      write_run(run("layout=" + arm + ",lr=" + values[v] + ",seed=1"), "done", 5.5, v == 1 ? 1.5 : 2.0 + 0.01 * v);
    }
  }
  // Confirm seeds on parabolas in log2 lr: pre's minimum at 2.5e-3 (inside its first bracket),
  // post's at 1.2e-2 (two grid values up), plus a per-seed offset.
  auto loss = [](const std::string& arm, double lr, int64_t seed) {
    const double star = arm == "pre" ? 2.5e-3 : 1.2e-2;
    const double dx = std::log2(lr) - std::log2(star);
    return 1.5 + 0.1 * dx * dx + (seed == 11 ? 0.0 : 0.05);
  };
  auto write_confirm = [&](const std::vector<SweepPoint>& points) {
    for (const auto& p : points) {
      const std::string arm = p.name.find("layout=pre") == 0 ? "pre" : "post";
      write_run(run(p.name), "done", 5.25, loss(arm, std::stod(p.overrides.back().second), p.seed));
    }
  };
  TuneSummary t = summarise_tune(sweep, dir / "out");
  ASSERT_EQ(t.selected(), (std::vector<int>{1, 1}));
  EXPECT_TRUE(fit_extension_points(sweep, t).empty());  // the confirm runs have not run yet
  write_confirm(confirm_points(sweep, t.selected()));
  t = summarise_tune(sweep, dir / "out");
  EXPECT_EQ(t.arms[0].fit_centre, 1);
  EXPECT_NEAR(t.arms[0].fitted, 2.5e-3, 1e-12);
  // post: the lowest of 1e-3 .. 4e-3 is at 4e-3: it needs 8e-3 first, and has no fit meanwhile.
  EXPECT_EQ(t.arms[1].fit_centre, -1);
  EXPECT_EQ(t.arms[1].fit_next, 3);
  EXPECT_TRUE(std::isnan(t.arms[1].fitted));
  std::vector<std::string> names;
  for (const auto& p : fit_extension_points(sweep, t)) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"layout=post,lr=8.0e-3,confirm,seed=11", "layout=post,lr=8.0e-3,confirm,seed=12"}));
  const std::string walking = tune_markdown(t);
  EXPECT_NE(walking.find("| layout=post | 2.0e-3 | walking: 8.0e-3 | - |"), std::string::npos) << walking;
  // One of the two finished: still waiting for the other, nothing new to name but the pair.
  write_confirm({fit_extension_points(sweep, t)[0]});
  EXPECT_EQ(fit_extension_points(sweep, summarise_tune(sweep, dir / "out")).size(), 2u);
  write_confirm(fit_extension_points(sweep, t));
  t = summarise_tune(sweep, dir / "out");
  EXPECT_EQ(t.arms[1].fit_next, 4);  // 8e-3 is lower still
  write_confirm(fit_extension_points(sweep, t));
  t = summarise_tune(sweep, dir / "out");
  EXPECT_TRUE(fit_extension_points(sweep, t).empty());
  EXPECT_EQ(t.arms[1].fit_centre, 3);  // 8e-3: 1.6e-2 is higher
  EXPECT_NEAR(t.arms[1].fitted, 1.2e-2, 1e-12);
  EXPECT_FALSE(t.arms[1].fitted_at_edge);
  // The verdict still reads the runs at v* alone.
  EXPECT_EQ(t.arms[1].confirm_n, 2);
  EXPECT_NEAR(t.arms[1].confirm_mean, loss("post", 2e-3, 11) + 0.025, 1e-12);
  const YAML::Node j = YAML::Load(tune_json(t));
  EXPECT_EQ(j["fit_extend"].as<int>(), 2);
  EXPECT_NEAR(j["arms"][1]["fit_centre"].as<double>(), 8e-3, 1e-15);
  EXPECT_TRUE(j["arms"][1]["fit_next"].IsNull());
  EXPECT_NEAR(j["arms"][1]["fit"]["value"].as<double>(), 1.2e-2, 1e-12);
  const std::string md = tune_markdown(t);
  EXPECT_NE(md.find("With tune.fit_extend 2:"), std::string::npos) << md;
  EXPECT_NE(md.find("| layout=post | 2.0e-3 | 4.0e-3 .. 1.6e-2 | 0.012 [0.012, 0.012] |"), std::string::npos) << md;
  EXPECT_NE(md.find("| layout=pre | 2.0e-3 | 1.0e-3 .. 4.0e-3 | 0.0025 [0.0025, 0.0025] |"), std::string::npos) << md;
}

}  // namespace
}  // namespace normlab
