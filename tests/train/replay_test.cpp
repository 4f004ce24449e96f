#include "train/replay.h"

#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "config/load.h"
#include "core/errors.h"
#include "core/fs.h"
#include "metrics/records.h"
#include "metrics/report.h"
#include "model/layouts/layout.h"
#include "model/residual/residual.h"
#include "optim/registry.h"
#include "train/run_config.h"
#include "train/trainer.h"
#include "test_util.h"

namespace normlab {
namespace {
namespace fs = std::filesystem;


// 16 updates, 2 micro-batches each, checkpoints every 5, full diagnostics every 4; a spike
// detector so sensitive (window 4, z 0.5, action skip) that some updates are skipped.
Config replay_run(const std::string& out) {
  Config c = testing::tiny_config(out);
  c.train.steps = 16;
  c.train.accum = 2;
  c.train.checkpoint_every = 5;
  c.train.save_init = true;
  c.diag.every = 4;
  c.diag.spike.window = 4;
  c.diag.spike.zscore = 0.5;
  c.diag.spike.action = SpikeAction::kSkip;
  return c;
}

TEST(ReplayTest, ALoggedStepReplaysBitForBitAndItsRowsAverageToItsLoss) {
  testing::TempDir dir;
  const Config c = replay_run(dir / "run");
  ASSERT_EQ(train(testing::resolved(c), {}), 0);
  const std::string metrics_before = read_file(dir / "run/metrics.jsonl");
  const RunRecords recs = read_run(dir / "run");
  bool saw_skip = false;
  for (int64_t n : {int64_t{0}, int64_t{8}, int64_t{13}}) {  // from step_0, across a diagnostics step, from step_10
    const ReplayResult r = replay_step(dir / "run", n);
    SCOPED_TRACE(n);
    EXPECT_TRUE(r.reproducible) << r.loss << " vs " << r.logged_loss;
    EXPECT_EQ(r.loss, r.logged_loss);
    EXPECT_EQ(r.grad_norm, r.logged_grad_norm);
    ASSERT_EQ(r.at.rows.size(), 8u);  // 2 micro-batches of 4 rows
    EXPECT_NEAR(r.at.rows_mean, r.at.loss, 1e-5 * r.at.loss);
    EXPECT_EQ(r.before.has_value(), n > 0);
    if (n > 0) {
      EXPECT_EQ(r.before->step, n - 1);
    }
    // Per-layer statistics of every block and per-head attention statistics.
    ASSERT_EQ(r.at.head_entropy.size(), 2u);
    EXPECT_EQ(r.at.head_entropy[0].size(), 2u);
    EXPECT_EQ(r.at.head_logit_max[1].size(), 2u);
    bool has_act = false;
    for (const auto& [name, v] : r.at.layers) {
      if (name == "act_rms") has_act = v.size() == 3u;
      if (name == "grad_norm") {
        EXPECT_EQ(v.size(), 2u);
      }
    }
    EXPECT_TRUE(has_act);
    EXPECT_LT(r.at.rows[0].worst[0].position, 32);
    EXPECT_FALSE(r.at.rows[0].worst[0].text.empty());
    EXPECT_TRUE(file_exists(dir / fmt::format("run/spikes/step_{:08d}.autopsy.json", n)));
    saw_skip = saw_skip || r.at.action != "update";
  }
  // The run's own records are untouched; report lists the autopsies.
  EXPECT_EQ(read_file(dir / "run/metrics.jsonl"), metrics_before);
  EXPECT_EQ(read_run(dir / "run").autopsies.size(), 3u);
  EXPECT_NE(report_text(dir / "run").find("autopsies"), std::string::npos);
  // The command line: --json prints the autopsy, which is also the file.
  const auto cli = testing::run_command(testing::normlab_binary() + " replay --json --run " + dir / "run" + " --step 8");
  ASSERT_EQ(cli.status, 0);
  EXPECT_TRUE(YAML::Load(cli.out)["reproducible"].as<bool>()) << cli.out;
  EXPECT_GT(fs::file_size(dir / "run/spikes/step_00000008.autopsy.png"), 10000u);  // drawn by scripts/plot.py
  const YAML::Node j = YAML::LoadFile(dir / "run/spikes/step_00000008.autopsy.json");
  EXPECT_TRUE(j["reproducible"].as<bool>());
  EXPECT_EQ(j["rows"].size(), 8u);
  double mean = 0;
  for (const auto& row : j["rows"]) mean += row["loss"].as<double>() / 8;
  EXPECT_NEAR(mean, j["loss"].as<double>(), 1e-5 * mean);  // the rows' mean is the step's loss
  EXPECT_EQ(j["baseline"]["step"].as<int64_t>(), 7);
  // A skipped step replays too.
  for (const auto& t : recs.train) {
    if (!t.skipped || t.step == 0) continue;
    const ReplayResult r = replay_step(dir / "run", t.step);
    EXPECT_TRUE(r.reproducible) << t.step;
    EXPECT_EQ(r.at.action, "skipped: spike");
    saw_skip = true;
    break;
  }
  EXPECT_TRUE(saw_skip) << "the sensitive spike detector skipped no update: the skipped case went untested";
}

// Every optimizer of the registry but AdamW (the tests above): replay restores its state from the
// checkpoint before the step and reproduces the logged loss and gradient norm bit for bit.
TEST(ReplayTest, EveryOptimizersRunsReplayBitForBit) {
  for (const auto& entry : optimizer_registry()) {
    const std::string type = entry.name;
    if (type == "adamw") continue;
    SCOPED_TRACE(type);
    testing::TempDir dir;
    Config c = replay_run(dir / "run");
    c.optim.type = type;
    c.diag.spike.action = SpikeAction::kLog;
    ASSERT_EQ(train(testing::resolved(c), {}), 0);
    for (int64_t n : {int64_t{3}, int64_t{12}}) {  // from step_0 and from step_10 (momenta restored)
      const ReplayResult r = replay_step(dir / "run", n);
      EXPECT_TRUE(r.reproducible) << n << ": " << r.loss << " vs " << r.logged_loss;
      EXPECT_EQ(r.loss, r.logged_loss) << n;
      EXPECT_EQ(r.grad_norm, r.logged_grad_norm) << n;
    }
  }
}

// Under every parametrization but sp (mup, completep) off the base shape, a logged step replays
// bit for bit.
TEST(ReplayTest, EveryParametrizationReplaysBitForBit) {
  for (const std::string& p : testing::non_default_parametrizations()) {
    SCOPED_TRACE(p);
    testing::TempDir dir;
    Config c = replay_run(dir / "run");
    testing::off_base_shape(c, p);
    c.diag.spike.action = SpikeAction::kLog;
    ASSERT_EQ(train(testing::resolved(c), {}), 0);
    const ReplayResult r = replay_step(dir / "run", 12);
    EXPECT_TRUE(r.reproducible) << r.loss << " vs " << r.logged_loss;
    EXPECT_EQ(r.grad_norm, r.logged_grad_norm);
  }
}

// Every layout and every residual type (under pre): a run replays bit for bit from a checkpoint,
// across a step without diagnostics (the inspector's extra capture forward) and one with them.
TEST(ReplayTest, EveryLayoutAndResidualTypeReplaysBitForBit) {
  std::vector<std::pair<std::string, std::string>> arms;  // layout, residual type
  for (const auto& l : layout_registry()) arms.emplace_back(l.name, "add");
  for (const auto& r : residual_registry()) {
    if (r.name != "add") arms.emplace_back("pre", r.name);
  }
  for (const auto& [layout, residual] : arms) {
    SCOPED_TRACE(layout + " / " + residual);
    testing::TempDir dir;
    Config c = testing::tiny_config(dir / "run");
    c = fit_to_layout(*find_layout(layout), c);
    c.model.residual.type = residual;
    c.model.n_layers = 2;
    c.train.steps = 7;
    c.train.log_every = 1;
    c.train.checkpoint_every = 3;
    c.diag.every = 4;
    c.eval.every = 0;
    ASSERT_EQ(train(testing::resolved(c), {}), 0);
    for (int64_t n : {int64_t{4}, int64_t{5}}) {  // a diagnostics step, and the step after it
      const ReplayResult r = replay_step(dir / "run", n);
      EXPECT_TRUE(r.reproducible) << n << ": " << r.loss << " vs " << r.logged_loss;
      EXPECT_FALSE(r.at.layers.empty()) << n;
    }
  }
}

TEST(ReplayTest, ALoggedValueThatDiffersIsReportedNotReproducible) {
  testing::TempDir dir;
  Config c = replay_run(dir / "run");
  c.diag.spike.action = SpikeAction::kLog;
  ASSERT_EQ(train(testing::resolved(c), {}), 0);
  // As if the machine had computed another loss at step 6: one bit of its last digit changed.
  std::string m = read_file(dir / "run/metrics.jsonl");
  const auto at = m.find("\"step\":6,\"loss\":");
  ASSERT_NE(at, std::string::npos);
  const auto end = m.find(',', at + 16);
  const double logged = std::stod(m.substr(at + 16, end - at - 16));
  m.replace(at + 16, end - at - 16, fmt::format("{}", std::nextafter(logged, 10.0)));
  write_file_atomic(dir / "run/metrics.jsonl", m);
  const ReplayResult r = replay_step(dir / "run", 6);
  EXPECT_FALSE(r.reproducible);
  EXPECT_EQ(r.loss, logged);
  EXPECT_THROW(replay_step(dir / "run", 99), UsageError);  // no such logged step
}

}  // namespace
}  // namespace normlab
