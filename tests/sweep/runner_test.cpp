// `normlab sweep` end to end through the binary on a tiny sweep: parallel runs, summary, skip of
// finished points, resume of an unfinished one, failure isolation, diverged points, stale runs.
#include "sweep/runner.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "core/fs.h"
#include "test_util.h"

namespace normlab {
namespace {
namespace fs = std::filesystem;

TEST(SweepRunnerTest, ThreadsSplitTheCores) {
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_EQ(threads_per_job(1), cores);
  EXPECT_EQ(threads_per_job(cores), 1);
  EXPECT_EQ(threads_per_job(cores * 4), 1);
}

class SweepEndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string src = testing::source_dir();
    std::ofstream(dir_ / "base.yaml")
        << "base: " << src << "/configs/default.yaml\n"
        << "data: {train: " << src << "/data/toy/train.txt, val: " << src << "/data/toy/val.txt}\n"
        << "model: {ctx: 32, d_model: 32, n_layers: 2, n_heads: 2, d_ff: 64}\n"
        << "optim: {warmup: 2}\n"
        << "train: {steps: 5, batch_size: 4, log_every: 1, checkpoint_every: 2}\n"
        << "eval: {every: 0, max_windows: 4}\n";
    // lr 1e30 makes the first update blow the weights up: those points diverge (non-finite loss).
    std::ofstream(dir_ / "sweep.yaml") << "base: base.yaml\n"
                                       << "out_dir: " << sweep_dir() << "\n"
                                       << "axes:\n"
                                       << "  optim.lr: [3.0e-3, 1.0e+30]\n"
                                       << "seeds: [1, 2]\n";
  }
  std::string sweep_dir() const { return dir_ / "out"; }
  std::string run(const std::string& name) const { return sweep_dir() + "/runs/" + name; }
  testing::CommandResult sweep(const std::string& extra = "") {
    return testing::run_command(
        testing::normlab_binary() + " sweep -c " + dir_ / "sweep.yaml --jobs 2 " + extra,
        dir_ / "err");
  }
  std::string err() const { return read_file(dir_ / "err"); }
  std::string status(const std::string& name) const {
    return YAML::LoadFile(run(name) + "/point.json")["status"].as<std::string>();
  }
  testing::TempDir dir_;
};

TEST_F(SweepEndToEndTest, RunsSkipsResumesAndIsolatesFailures) {
  const std::string ok1 = "lr=3.0e-3,seed=1", ok2 = "lr=3.0e-3,seed=2", bad1 = "lr=1.0e+30,seed=1";
  auto first = sweep();
  ASSERT_EQ(first.status, 0) << err();  // diverged points do not fail the sweep
  EXPECT_TRUE(first.out.empty());       // progress goes to stderr
  EXPECT_NE(err().find("| 2 jobs x"), std::string::npos) << err();
  EXPECT_NE(err().find("[4/4]"), std::string::npos) << err();
  EXPECT_EQ(status(ok1), "done");
  EXPECT_EQ(status(ok2), "done");
  EXPECT_EQ(status(bad1), "diverged");
  EXPECT_EQ(status("lr=1.0e+30,seed=2"), "diverged");
  EXPECT_EQ(testing::records(run(ok1), "train").size(), 5u);
  EXPECT_TRUE(file_exists(run(ok1) + "/stderr.log"));
  EXPECT_TRUE(file_exists(sweep_dir() + "/sweep.yaml"));
  const std::string csv = read_file(sweep_dir() + "/summary.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 4 + 2 * 2) << csv;
  EXPECT_NE(csv.find("run,\"lr=3.0e-3,seed=1\",3.0e-3,1,1,done,5,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("mean,lr=1.0e+30,1.0e+30,,2,0/2 done,"), std::string::npos) << csv;

  // `normlab report` on the sweep directory prints the table, recomputed from the runs.
  auto report = testing::run_command(testing::normlab_binary() + " report " + sweep_dir());
  EXPECT_EQ(report.status, 0);
  EXPECT_EQ(report.out, read_file(sweep_dir() + "/summary.md"));
  auto json = testing::run_command(testing::normlab_binary() + " report --json " + sweep_dir());
  EXPECT_EQ(YAML::Load(json.out)["rows"].size(), 8u);

  // A re-run starts nothing: every point is done or diverged.
  const std::string metrics_before = read_file(run(ok1) + "/metrics.jsonl");
  ASSERT_EQ(sweep().status, 0) << err();
  EXPECT_NE(err().find("4 finished earlier, 0 to resume, 0 new"), std::string::npos) << err();
  EXPECT_EQ(err().find("start"), std::string::npos) << err();
  EXPECT_EQ(read_file(run(ok1) + "/metrics.jsonl"), metrics_before);

  // ok1 made unfinished (no point.json, its checkpoint rolled back to step 2): resumed.
  // ok2 given a LATEST that names a missing checkpoint: its child fails, the others finish.
  fs::remove(run(ok1) + "/point.json");
  fs::remove_all(run(ok1) + "/checkpoints/step_00000004");
  fs::remove_all(run(ok1) + "/checkpoints/step_00000005");
  std::ofstream(run(ok1) + "/checkpoints/LATEST") << "step_00000002\n";
  fs::remove(run(ok2) + "/point.json");
  std::ofstream(run(ok2) + "/checkpoints/LATEST") << "step_00000099\n";
  auto again = sweep();
  EXPECT_EQ(again.status, 1) << err();
  EXPECT_NE(err().find("2 finished earlier, 2 to resume, 0 new"), std::string::npos) << err();
  EXPECT_EQ(status(ok1), "done");
  EXPECT_NE(read_file(run(ok1) + "/stderr.log").find("resumed from"), std::string::npos);
  const auto train = testing::records(run(ok1), "train");
  ASSERT_EQ(train.size(), 5u);  // steps 0..4 once each
  EXPECT_EQ(train.back()["step"].as<int>(), 4);
  EXPECT_EQ(status(ok2), "failed");
  EXPECT_NE(YAML::LoadFile(run(ok2) + "/point.json")["exit_code"].as<int>(), 0);
  EXPECT_NE(err().find("failed   " + ok2 + ": exit"), std::string::npos) << err();
  EXPECT_NE(read_file(sweep_dir() + "/summary.csv").find(",failed,"), std::string::npos);

  // Changed settings would mix two configs in one directory: refused before anything runs.
  auto changed = sweep("--set train.steps=6");
  EXPECT_EQ(changed.status, 2);
  EXPECT_NE(err().find("hold a run of another config"), std::string::npos) << err();
}

// Ctrl-C reaches the sweep only (children run in their own process group); it forwards one
// SIGINT, the children checkpoint and exit 130, the sweep records them unfinished and exits 130.
TEST_F(SweepEndToEndTest, SigintIsForwardedAndARerunResumes) {
  const std::string cmd = "exec " + testing::normlab_binary() + " sweep -c " + dir_ / "sweep.yaml" +
                          " --jobs 2 --set optim.lr=3.0e-3 --set train.steps=100000 --set "
                          "train.checkpoint_every=100000";
  std::ofstream(dir_ / "sweep.yaml")
      << "base: base.yaml\nout_dir: " << sweep_dir() << "\nseeds: [1, 2, 3]\n";
  // Interrupt once both children train (their metrics exist: past their own set-up).
  const std::string wait_for_runs = "for i in $(seq 150); do [ -e " + run("seed=1") +
                                    "/metrics.jsonl ] && [ -e " + run("seed=2") +
                                    "/metrics.jsonl ] && break; sleep 0.2; done; sleep 0.5; ";
  const std::string script = "(" + cmd + " 2>" + dir_ / "err" + " & pid=$!; " + wait_for_runs +
                             "kill -INT $pid; wait $pid; echo $?)";
  auto r = testing::run_command("bash -c '" + script + "'");
  EXPECT_EQ(r.out, "130\n") << err();
  EXPECT_NE(err().find("interrupted: asking 2 running points"), std::string::npos) << err();
  for (const char* name : {"seed=1", "seed=2"}) {
    const YAML::Node p = YAML::LoadFile(run(name) + "/point.json");
    EXPECT_EQ(p["status"].as<std::string>(), "running") << name;
    EXPECT_EQ(p["exit_code"].as<int>(), 130) << name;
    EXPECT_TRUE(file_exists(run(name) + "/checkpoints/LATEST")) << name << ": " << err();
  }
  EXPECT_FALSE(fs::exists(run("seed=3")));  // never started
  EXPECT_NE(read_file(sweep_dir() + "/summary.csv").find(",pending,"), std::string::npos);
  // The re-run plans to resume both (stopped again at once: --set changes nothing of the runs).
  // (interrupted once its plan is printed: a fixed sleep was too short on a loaded machine)
  auto again = testing::run_command("bash -c '(" + cmd + " 2>" + dir_ / "err" +
                                    " & pid=$!; for i in $(seq 300); do grep -q \"to resume\" " + dir_ / "err" +
                                    " && break; sleep 0.1; done; kill -INT $pid; wait $pid; echo $?)'");
  EXPECT_EQ(again.out, "130\n") << err();
  EXPECT_NE(err().find("0 finished earlier, 2 to resume, 1 new"), std::string::npos) << err();
}

TEST_F(SweepEndToEndTest, UsageErrorsExitTwo) {
  EXPECT_EQ(testing::run_command(testing::normlab_binary() + " sweep --help").status, 0);
  EXPECT_EQ(testing::run_command(testing::normlab_binary() + " sweep").status, 2);
  EXPECT_EQ(sweep("--jobs 0").status, 2);
  EXPECT_EQ(
      testing::run_command(testing::normlab_binary() + " sweep -c " + dir_ / "none.yaml").status,
      2);
  EXPECT_EQ(sweep("--quick").status, 2);  // no quick: section
  EXPECT_NE(err().find("has no quick: section"), std::string::npos) << err();
  EXPECT_FALSE(fs::exists(sweep_dir()));
}

TEST_F(SweepEndToEndTest, InvalidPointsStopEverythingBeforeAnyRun) {
  std::ofstream(dir_ / "sweep.yaml")
      << "base: base.yaml\nout_dir: " << sweep_dir() << "\naxes:\n  model.n_heads: [2, 3]\n";
  auto r = sweep();
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(err(),
            "error: " + dir_ / "sweep.yaml" +
                ":4: model.n_heads: 3 does not divide d_model 32 (point n_heads=3,seed=1337)\n");
  EXPECT_FALSE(fs::exists(sweep_dir()));
}

}  // namespace
}  // namespace normlab
