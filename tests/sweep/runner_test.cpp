// `normlab sweep` end to end through the binary on a tiny sweep: parallel runs, summary, skip of
// finished points, resume of an unfinished one, failure isolation, diverged points, stale runs.
#include "sweep/runner.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/errors.h"
#include "core/fs.h"
#include "metrics/records.h"
#include "test_util.h"

namespace normlab {
namespace {
namespace fs = std::filesystem;

// Runs already in a sweep directory that ran, wholly or in part, on another CPU are named before
// anything runs; runs without a machine.json, or only on this CPU, are not.
TEST(SweepOtherMachinesTest, RunsFromAnotherCpuAreCountedByCpu) {
  testing::TempDir dir;
  const auto run = [&](const std::string& name, const std::vector<std::string>& cpus) {
    const std::string d = dir.path() + "/" + name;
    fs::create_directories(d);
    std::vector<MachineRecord> starts;
    for (const std::string& cpu : cpus) {
      starts.push_back(MachineRecord{static_cast<int64_t>(starts.size()) * 100, "vm", cpu, "cpu", "1.13.0 (CPU)", "abc"});
    }
    if (!cpus.empty()) testing::write_text(d + "/machine.json", machine_json(starts));
    return d;
  };
  const std::string here = "AMD EPYC (family 26, model 2)", zen4 = "AMD EPYC (family 25, model 17)";
  const std::vector<std::string> same = {run("a", {here}), run("b", {here, here}), run("old", {})};
  EXPECT_EQ(other_machines_warning(same, here), "");
  EXPECT_EQ(other_machines_warning({}, here), "");
  const std::vector<std::string> mixed = {run("c", {zen4}), run("d", {zen4, here}), run("e", {here}),
                                          run("f", {"AMD EPYC", zen4})};
  EXPECT_EQ(other_machines_warning(mixed, here),
            "warning: 3 of the 4 runs already in this sweep directory name another CPU in their machine.json than "
            "this machine's (AMD EPYC: 1, AMD EPYC (family 25, model 17): 3; here: AMD EPYC (family 26, model 2)): "
            "comparisons of them with the runs made here mix machines (the tuned summary's mixed_machines); "
            "--out DIR keeps a new sweep apart");
}

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
  EXPECT_EQ(err().find("another CPU"), std::string::npos) << err();  // every run made here

  // A run whose machine.json names another CPU is counted before anything runs.
  const std::string machines = read_file(run(bad1) + "/machine.json");
  auto foreign = read_machines(run(bad1));
  ASSERT_EQ(foreign.size(), 1u);
  foreign[0].cpu = "Another CPU (family 1, model 2)";
  testing::write_text(run(bad1) + "/machine.json", machine_json(foreign));
  ASSERT_EQ(sweep().status, 0) << err();
  EXPECT_NE(err().find("warning: 1 of the 4 runs already in this sweep directory name another CPU"),
            std::string::npos) << err();
  EXPECT_NE(err().find("(Another CPU (family 1, model 2): 1; here: "), std::string::npos) << err();
  testing::write_text(run(bad1) + "/machine.json", machines);

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
  // (interrupted once its plan is printed: a fixed sleep was too short on a loaded machine; the
  // pattern is the re-run's own, "0 to resume" of the first run may still be in the file)
  auto again = testing::run_command("bash -c '(" + cmd + " 2>" + dir_ / "err" +
                                    " & pid=$!; for i in $(seq 300); do grep -q \"2 to resume\" " + dir_ / "err" +
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

// ---- tuned sweeps (tune:) -------------------------------------------------------------------------

// The test's own reading of a run: lowest finite eval val_loss and the step-0 one (NaN if none).
std::pair<double, double> best_and_step0(const std::string& run) {
  double best = std::nan(""), step0 = std::nan("");
  if (!fs::exists(run + "/metrics.jsonl")) return {best, step0};
  for (const auto& e : testing::records(run, "eval")) {
    const double v = e["val_loss"].IsNull() ? std::nan("") : e["val_loss"].as<double>();
    if (e["step"].as<int>() == 0) step0 = v;
    if (std::isfinite(v) && !(best <= v)) best = v;
  }
  return {best, step0};
}

void write_tune_sweep(const std::string& path, const std::string& out, const std::string& values) {
  std::ofstream(path) << "base: base.yaml\nout_dir: " << out << "\n"
                      << "axes: {model.layout: [pre, post]}\n"
                      << "tune: {key: optim.lr, values: " << values << ", seeds: [1], confirm_seeds: [2, 3],\n"
                      << "       baseline: {model.layout: pre}}\n";
}

// The search, then the confirm points at each arm's selected value (in the summary as the runs'
// own records give them), and a re-run starts nothing.
TEST_F(SweepEndToEndTest, TunedSweepSearchesThenConfirmsAndARerunStartsNothing) {
  write_tune_sweep(dir_ / "sweep.yaml", sweep_dir(), "[3.0e-3, 1.0e-2, 1.0e+30]");
  ASSERT_EQ(sweep().status, 0) << err();
  EXPECT_NE(err().find("search phase: 6 points (0 finished earlier, 0 to resume, 6 new)"), std::string::npos) << err();
  EXPECT_NE(err().find("tune: search complete; selected optim.lr: layout=pre "), std::string::npos) << err();
  EXPECT_NE(err().find("confirm phase: 4 points (0 finished earlier, 0 to resume, 4 new)"), std::string::npos) << err();
  EXPECT_EQ(status("layout=post,lr=1.0e+30,seed=1"), "diverged");

  const YAML::Node arms = YAML::LoadFile(sweep_dir() + "/summary.json")["tune"]["arms"];
  ASSERT_EQ(arms.size(), 2u);
  const std::vector<std::string> values = {"3.0e-3", "1.0e-2", "1.0e+30"};
  for (size_t a = 0; a < 2; ++a) {
    const std::string arm = a == 0 ? "layout=pre" : "layout=post";
    double l0 = 0;
    for (const auto& v : values) l0 += best_and_step0(run(arm + ",lr=" + v + ",seed=1")).second / 3;
    size_t sel = 0;
    std::vector<double> m;
    for (const auto& v : values) {
      const double b = best_and_step0(run(arm + ",lr=" + v + ",seed=1")).first;
      m.push_back(std::isfinite(b) ? b : l0);
      if (m.back() < m[sel]) sel = m.size() - 1;
    }
    EXPECT_EQ(arms[a]["search"].as<std::vector<double>>(), m) << arm;
    EXPECT_NEAR(arms[a]["l0"].as<double>(), l0, 1e-12) << arm;
    EXPECT_EQ(arms[a]["selected"].as<double>(), std::stod(values[sel])) << arm;
    for (int seed : {2, 3}) {
      const std::string name = arm + ",lr=" + values[sel] + ",confirm,seed=" + std::to_string(seed);
      EXPECT_EQ(status(name), "done") << name;
      EXPECT_EQ(testing::records(run(name), "train").size(), 5u) << name;
    }
    EXPECT_EQ(arms[a]["confirm"]["n"].as<int>(), 2);
    EXPECT_EQ(arms[a]["vs_baseline"]["verdict"].as<std::string>() == "baseline", a == 0);
  }

  // A re-run reuses every finished run: both phases planned as finished, nothing started.
  ASSERT_EQ(sweep().status, 0) << err();
  EXPECT_NE(err().find("search phase: 6 points (6 finished earlier"), std::string::npos) << err();
  EXPECT_NE(err().find("confirm phase: 4 points (4 finished earlier"), std::string::npos) << err();
  EXPECT_EQ(err().find("start"), std::string::npos) << err();
  // --list names the search points, then (the search being complete) the confirm points.
  auto list = testing::run_command(testing::normlab_binary() + " sweep -c " + dir_ / "sweep.yaml --list");
  EXPECT_EQ(std::count(list.out.begin(), list.out.end(), '\n'), 10) << list.out;
  EXPECT_NE(list.out.find(",confirm,seed=3\n"), std::string::npos) << list.out;

  // report prints summary.md with its verdict table; compare on the sweep alone prints the table.
  auto report = testing::run_command(testing::normlab_binary() + " report " + sweep_dir());
  EXPECT_EQ(report.status, 0);
  EXPECT_EQ(report.out, read_file(sweep_dir() + "/summary.md"));
  EXPECT_NE(report.out.find("## Tuned comparison: optim.lr per arm, by best_val"), std::string::npos);
  auto compare = testing::run_command(testing::normlab_binary() + " compare " + sweep_dir());
  EXPECT_EQ(compare.status, 0);
  EXPECT_EQ(compare.out.rfind("## Tuned comparison", 0), 0u) << compare.out;
  EXPECT_NE(compare.out.find("| layout=post |"), std::string::npos) << compare.out;
  auto compare_json = testing::run_command(testing::normlab_binary() + " compare --json " + sweep_dir());
  EXPECT_EQ(YAML::Load(compare_json.out)["arms"].size(), 2u);
}

// tune.fit_extend through the binary: search and confirm records written beforehand (skipped as
// finished) put post's lowest confirm mean at the top of its bracket (3e-3); the sweep then runs
// post's confirm seeds at 4e-3 for real (their losses, well below the written 9s, are the lowest),
// then at 5e-3 (the grid's end: the walk ends there, centred on 4e-3 whichever of the two real
// values is lower); pre's lowest is inside its bracket and it runs nothing more. A re-run starts
// nothing.
TEST_F(SweepEndToEndTest, TunedSweepWithFitExtendRunsTheWalksPointsRoundAfterRound) {
  std::ofstream(dir_ / "sweep.yaml") << "base: base.yaml\nout_dir: " << sweep_dir() << "\n"
                                     << "axes: {model.layout: [pre, post]}\n"
                                     << "tune: {key: optim.lr, values: [1.0e-3, 2.0e-3, 3.0e-3, 4.0e-3, 5.0e-3],\n"
                                     << "       seeds: [1], confirm_seeds: [2, 3], baseline: {model.layout: pre},\n"
                                     << "       fit: quadratic, fit_extend: 3}\n";
  auto fake = [&](const std::string& name, double best) {
    fs::create_directories(run(name));
    std::ofstream(run(name) + "/metrics.jsonl") << "{\"kind\":\"eval\",\"step\":0,\"val_loss\":9.9}\n"
                                                << "{\"kind\":\"eval\",\"step\":5,\"val_loss\":" << best << "}\n";
    std::ofstream(run(name) + "/point.json") << "{\"status\":\"done\",\"exit_code\":0,\"wall_s\":1}\n";
  };
  const std::vector<std::string> values = {"1.0e-3", "2.0e-3", "3.0e-3", "4.0e-3", "5.0e-3"};
  for (const std::string arm : {"pre", "post"}) {
    for (size_t v = 0; v < values.size(); ++v) fake("layout=" + arm + ",lr=" + values[v] + ",seed=1", v == 1 ? 9.0 : 9.5);
    for (const std::string seed : {"2", "3"}) {  // pre: lowest at v* (2e-3); post: at 3e-3, the top
      for (size_t v = 0; v < 3; ++v) {
        fake("layout=" + arm + ",lr=" + values[v] + ",confirm,seed=" + seed,
             arm == "pre" ? (v == 1 ? 9.0 : 9.4) : 9.6 - 0.2 * static_cast<double>(v));
      }
    }
  }
  // --list before: the search, the confirm points and the two the walk needs next.
  auto list = testing::run_command(testing::normlab_binary() + " sweep -c " + dir_ / "sweep.yaml --list");
  EXPECT_EQ(std::count(list.out.begin(), list.out.end(), '\n'), 10 + 12 + 2) << list.out;
  EXPECT_NE(list.out.find("layout=post,lr=4.0e-3,confirm,seed=3\n"), std::string::npos) << list.out;
  ASSERT_EQ(sweep().status, 0) << err();
  EXPECT_NE(err().find("search phase: 10 points (10 finished earlier, 0 to resume, 0 new)"), std::string::npos) << err();
  EXPECT_NE(err().find("confirm phase: 12 points (12 finished earlier, 0 to resume, 0 new)"), std::string::npos) << err();
  const std::string log = err();
  const size_t first = log.find("fit extension: 2 points (0 finished earlier, 0 to resume, 2 new)");
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_NE(log.find("fit extension: 2 points (0 finished earlier, 0 to resume, 2 new)", first + 1), std::string::npos)
      << log;
  for (const std::string v : {"4.0e-3", "5.0e-3"}) {
    for (const std::string seed : {"2", "3"}) {
      const std::string name = "layout=post,lr=" + v + ",confirm,seed=" + seed;
      EXPECT_EQ(status(name), "done") << name;
      EXPECT_EQ(testing::records(run(name), "train").size(), 5u) << name;
    }
  }
  EXPECT_FALSE(fs::exists(run("layout=pre,lr=4.0e-3,confirm,seed=2")));
  const YAML::Node summary = YAML::LoadFile(sweep_dir() + "/summary.json");
  const YAML::Node arms = summary["tune"]["arms"];
  EXPECT_NEAR(arms[0]["fit_centre"].as<double>(), 2e-3, 1e-15);
  EXPECT_NEAR(arms[1]["fit_centre"].as<double>(), 4e-3, 1e-15);
  EXPECT_TRUE(arms[1]["fit_next"].IsNull());
  EXPECT_FALSE(arms[1]["fit"]["value"].IsNull());
  EXPECT_NE(read_file(sweep_dir() + "/summary.md").find("| layout=post | 2.0e-3 | 3.0e-3 .. 5.0e-3 |"), std::string::npos);
  size_t rows = 0;  // the run rows: search, confirm and the walk's four
  for (const auto& r : summary["rows"]) rows += r["row"].as<std::string>() == "run";
  EXPECT_EQ(rows, 10u + 12u + 4u);
  EXPECT_NE(read_file(sweep_dir() + "/summary.csv").find("layout=post,lr=5.0e-3,confirm,seed=3"), std::string::npos);
  // Nothing left: --list names search and confirm points only, and a re-run starts nothing.
  list = testing::run_command(testing::normlab_binary() + " sweep -c " + dir_ / "sweep.yaml --list");
  EXPECT_EQ(std::count(list.out.begin(), list.out.end(), '\n'), 10 + 12) << list.out;
  ASSERT_EQ(sweep().status, 0) << err();
  EXPECT_EQ(err().find("start"), std::string::npos) << err();
  EXPECT_EQ(err().find("fit extension"), std::string::npos) << err();
}

// A walk that waits for confirm runs another process is running: the sweep says so and exits 3.
TEST_F(SweepEndToEndTest, TunedSweepWithFitExtendExitsThreeWhileAWalkWaitsForAnotherProcess) {
  std::ofstream(dir_ / "sweep.yaml") << "base: base.yaml\nout_dir: " << sweep_dir() << "\n"
                                     << "axes: {model.layout: [pre, post]}\n"
                                     << "tune: {key: optim.lr, values: [1.0e-3, 2.0e-3, 3.0e-3, 4.0e-3],\n"
                                     << "       seeds: [1], confirm_seeds: [2, 3], baseline: {model.layout: pre},\n"
                                     << "       fit: quadratic, fit_extend: 1}\n";
  auto fake = [&](const std::string& name, double best) {
    fs::create_directories(run(name));
    std::ofstream(run(name) + "/metrics.jsonl") << "{\"kind\":\"eval\",\"step\":0,\"val_loss\":9.9}\n"
                                                << "{\"kind\":\"eval\",\"step\":5,\"val_loss\":" << best << "}\n";
    std::ofstream(run(name) + "/point.json") << "{\"status\":\"done\",\"exit_code\":0,\"wall_s\":1}\n";
  };
  const std::vector<std::string> values = {"1.0e-3", "2.0e-3", "3.0e-3", "4.0e-3"};
  for (const std::string arm : {"pre", "post"}) {
    for (size_t v = 0; v < values.size(); ++v) fake("layout=" + arm + ",lr=" + values[v] + ",seed=1", v == 1 ? 9.0 : 9.5);
    for (const std::string seed : {"2", "3"}) {
      for (size_t v = 0; v < 3; ++v) {
        fake("layout=" + arm + ",lr=" + values[v] + ",confirm,seed=" + seed,
             arm == "pre" ? (v == 1 ? 9.0 : 9.4) : 9.6 - 0.2 * static_cast<double>(v));
      }
    }
  }
  // Another process holds the claim of one of the walk's points: this one skips it and waits.
  fs::create_directories(sweep_dir() + "/claims");
  auto r = testing::run_command(
      "bash -c 'exec 9>" + sweep_dir() + "/claims/layout=post,lr=4.0e-3,confirm,seed=3.lock; flock -n 9 && " +
          testing::normlab_binary() + " sweep -c " + dir_ / "sweep.yaml --jobs 2 9>&- 2>" + dir_ / "err" + "; echo $?'");
  EXPECT_EQ(r.out, "3\n") << err();
  EXPECT_NE(err().find("skip     layout=post,lr=4.0e-3,confirm,seed=3: another normlab sweep process is running it"),
            std::string::npos) << err();
  EXPECT_NE(err().find("tune: fit extension: 1 cell wait for confirm runs not finished (first: layout=post)"),
            std::string::npos) << err();
  EXPECT_EQ(status("layout=post,lr=4.0e-3,confirm,seed=2"), "done");
  // Once that process is gone, a re-run runs it and the walk ends.
  ASSERT_EQ(sweep().status, 0) << err();
  EXPECT_EQ(status("layout=post,lr=4.0e-3,confirm,seed=3"), "done");
}

// Shards over machines: each runs its share of the search; the confirm phase starts on a shard
// only once every search point (of every shard) has finished in the shared directory, else it
// says so and exits 3; a re-run then runs its share of the confirm points.
TEST_F(SweepEndToEndTest, TunedSweepShardsConfirmOnlyOnceTheWholeSearchIsThere) {
  write_tune_sweep(dir_ / "sweep.yaml", sweep_dir(), "[1.0e-3, 3.0e-3, 1.0e-2]");
  EXPECT_EQ(sweep("--shard 0/2").status, kSearchIncomplete) << err();
  EXPECT_NE(err().find("tune: 3 search points not finished (first: layout=pre,lr=3.0e-3,seed=1)"), std::string::npos)
      << err();
  EXPECT_FALSE(fs::exists(run("layout=pre,lr=3.0e-3,seed=1")));
  ASSERT_EQ(sweep("--shard 1/2").status, 0) << err();
  EXPECT_NE(err().find("confirm phase: shard 1/2: 2 of 4 points"), std::string::npos) << err();
  ASSERT_EQ(sweep("--shard 0/2").status, 0) << err();
  EXPECT_NE(err().find("confirm phase: shard 0/2: 2 of 4 points (0 finished earlier, 0 to resume, 2 new)"),
            std::string::npos) << err();
  const YAML::Node arms = YAML::LoadFile(sweep_dir() + "/summary.json")["tune"]["arms"];
  EXPECT_EQ(arms[0]["confirm"]["n"].as<int>(), 2);
  EXPECT_EQ(arms[1]["confirm"]["n"].as<int>(), 2);
  EXPECT_NE(arms[1]["vs_baseline"]["verdict"].as<std::string>(), "pending");
}

// Ctrl-C during the search: the children checkpoint, the sweep exits 130 without starting the
// confirm phase, and a re-run plans to resume the interrupted search points.
TEST_F(SweepEndToEndTest, TunedSweepCtrlCInTheSearchStopsBeforeTheConfirmPhase) {
  write_tune_sweep(dir_ / "sweep.yaml", sweep_dir(), "[1.0e-3, 3.0e-3, 1.0e-2]");
  const std::string cmd = "exec " + testing::normlab_binary() + " sweep -c " + dir_ / "sweep.yaml" +
                          " --jobs 2 --set train.steps=100000 --set train.checkpoint_every=100000";
  const std::string first = run("layout=pre,lr=1.0e-3,seed=1"), second = run("layout=pre,lr=3.0e-3,seed=1");
  const std::string wait_for_runs = "for i in $(seq 150); do [ -e " + first + "/metrics.jsonl ] && [ -e " + second +
                                    "/metrics.jsonl ] && break; sleep 0.2; done; sleep 0.5; ";
  auto r = testing::run_command("bash -c '(" + cmd + " 2>" + dir_ / "err" + " & pid=$!; " + wait_for_runs +
                                "kill -INT $pid; wait $pid; echo $?)'");
  EXPECT_EQ(r.out, "130\n") << err();
  EXPECT_EQ(err().find("confirm phase"), std::string::npos) << err();
  EXPECT_EQ(err().find("tune: search complete"), std::string::npos) << err();
  EXPECT_EQ(status("layout=pre,lr=1.0e-3,seed=1"), "running");
  EXPECT_TRUE(file_exists(first + "/checkpoints/LATEST")) << err();
  auto again = testing::run_command("bash -c '(" + cmd + " 2>" + dir_ / "err" +
                                    " & pid=$!; for i in $(seq 300); do grep -q \"2 to resume\" " + dir_ / "err" +
                                    " && break; sleep 0.1; done; kill -INT $pid; wait $pid; echo $?)'");
  EXPECT_EQ(again.out, "130\n") << err();
  EXPECT_NE(err().find("search phase: 6 points (0 finished earlier, 2 to resume, 4 new)"), std::string::npos) << err();
}

// Every bad tune: block stops the sweep before anything runs: one line naming file:line and the
// key, exit 2, no sweep directory.
TEST_F(SweepEndToEndTest, BadTuneBlocksExitTwoWithOneLineAndWriteNothing) {
  const std::string rest = "seeds: [1], confirm_seeds: [2], baseline: {model.layout: pre}";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{key: model.layout, values: [1.0e-3, 2.0e-3, 4.0e-3], " + rest + "}", "tune.key"},
      {"{key: model.norm.type, values: [1.0e-3, 2.0e-3, 4.0e-3], " + rest + "}", "tune.key"},
      {"{key: seed, values: [1.0e-3, 2.0e-3, 4.0e-3], " + rest + "}", "tune.key"},
      {"{key: optim.lr, values: [4.0e-3, 2.0e-3, 1.0e-3], " + rest + "}", "tune.values"},
      {"{key: optim.lr, values: [-1.0e-3, 2.0e-3, 4.0e-3], " + rest + "}", "tune.values"},
      {"{key: optim.lr, values: [1.0e-3, 2.0e-3], " + rest + "}", "tune.values"},
      {"{key: optim.lr, values: [1.0e-3, 2.0e-3, 4.0e-3], seeds: [1], confirm_seeds: [1], baseline: {model.layout: pre}}",
       "tune.confirm_seeds"},
      {"{key: optim.lr, values: [1.0e-3, 2.0e-3, 4.0e-3], seeds: [], confirm_seeds: [2], baseline: {model.layout: pre}}",
       "tune.seeds"},
      {"{key: optim.lr, values: [1.0e-3, 2.0e-3, 4.0e-3], " + rest + ", metric: loss}", "tune.metric"},
      {"{key: optim.lr, values: [1.0e-3, 2.0e-3, 4.0e-3], seeds: [1], confirm_seeds: [2], baseline: {model.layout: x}}",
       "tune.baseline"},
      {"{key: optim.lr, values: [1.0e-3, 2.0e-3, 4.0e-3], " + rest + ", grid: log}", "tune.grid"},
  };
  for (const auto& [block, key] : cases) {
    std::ofstream(dir_ / "sweep.yaml") << "base: base.yaml\nout_dir: " << sweep_dir()
                                       << "\naxes: {model.layout: [pre, post]}\ntune: " << block << "\n";
    EXPECT_EQ(sweep().status, 2) << block;
    const std::string e = err();
    EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 1) << e;
    EXPECT_EQ(e.rfind("error: " + dir_ / "sweep.yaml" + ":4: " + key + ": ", 0), 0u) << e;
    EXPECT_FALSE(fs::exists(sweep_dir())) << block;
  }
  // A tuned sweep file with seeds: as well.
  std::ofstream(dir_ / "sweep.yaml") << "base: base.yaml\nout_dir: " << sweep_dir()
                                     << "\naxes: {model.layout: [pre, post]}\ntune: {key: optim.lr, values: "
                                        "[1.0e-3, 2.0e-3, 4.0e-3], " << rest << "}\nseeds: [1]\n";
  EXPECT_EQ(sweep().status, 2);
  EXPECT_EQ(err().rfind("error: " + dir_ / "sweep.yaml" + ":5: seeds: a sweep with tune: has no seeds:", 0), 0u) << err();
  EXPECT_EQ(sweep("--set optim.lr=0.1").status, 2);
  EXPECT_FALSE(fs::exists(sweep_dir()));
}

TEST(SweepShardTest, ParsesIOverNAndRejectsTheRest) {
  const SweepShard s = parse_shard("1/3");
  EXPECT_EQ(s.index, 1);
  EXPECT_EQ(s.count, 3);
  EXPECT_FALSE(s.has(0));
  EXPECT_TRUE(s.has(1));
  EXPECT_TRUE(s.has(4));
  EXPECT_TRUE(parse_shard("0/1").whole());
  for (const char* bad : {"", "1", "3/3", "-1/2", "0/0", "1/-2", "a/2", "1/2x", " 1/2", "1//2", "/2"}) {
    try {
      parse_shard(bad);
      ADD_FAILURE() << bad;
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), std::string("--shard ") + bad + ": expected i/n with 0 <= i < n, e.g. 0/4");
    }
  }
}

// The summary without its timing columns (tok_per_s, wall_s: the last two), which differ between
// two runs of the same points.
std::string without_timings(const std::string& csv) {
  std::istringstream in(csv);
  std::string line, out;
  while (std::getline(in, line)) {
    for (int k = 0; k < 2; ++k) line = line.substr(0, line.rfind(','));
    out += line + "\n";
  }
  return out;
}

// `--shard i/n` runs the points whose index is i mod n; shards running at once into one directory
// (and a whole sweep beside them) claim each point once, and the merged directory summarises as
// the unsharded sweep does.
TEST_F(SweepEndToEndTest, ShardsRunConcurrentlyIntoOneDirectoryAsTheWholeSweep) {
  const std::string bin = testing::normlab_binary() + " sweep -c " + dir_ / "sweep.yaml";
  auto list = testing::run_command(bin + " --list");
  EXPECT_EQ(list.status, 0);
  EXPECT_EQ(list.out, "lr=3.0e-3,seed=1\nlr=3.0e-3,seed=2\nlr=1.0e+30,seed=1\nlr=1.0e+30,seed=2\n");
  EXPECT_EQ(testing::run_command(bin + " --list --shard 1/3").out, "lr=3.0e-3,seed=2\n");
  EXPECT_EQ(testing::run_command(bin + " --list --shard 3/3").status, 2);
  EXPECT_FALSE(fs::exists(sweep_dir()));  // --list writes nothing

  ASSERT_EQ(sweep("--out " + dir_ / "whole").status, 0) << err();
  const std::string expected = without_timings(read_file(dir_ / "whole/summary.csv"));

  // Two shards and the whole sweep at once, into one directory (--jobs 2 as above: one thread per
  // run everywhere, so the losses are bitwise those of the whole sweep).
  const std::string merged = dir_ / "merged";
  const std::string script = "(" + bin + " --jobs 2 --shard 0/2 --out " + merged + " 2>" + dir_ / "e0" + " & a=$!; " +
                             bin + " --jobs 2 --shard 1/2 --out " + merged + " 2>" + dir_ / "e1" + " & b=$!; " +
                             bin + " --jobs 2 --out " + merged + " 2>" + dir_ / "e2" + " & " +
                             "c=$!; wait $a; echo $?; wait $b; echo $?; wait $c; echo $?)";
  auto r = testing::run_command("bash -c '" + script + "'");
  EXPECT_EQ(r.out, "0\n0\n0\n") << read_file(dir_ / "e0") << read_file(dir_ / "e1") << read_file(dir_ / "e2");
  EXPECT_NE(read_file(dir_ / "e0").find("shard 0/2: 2 of 4 points"), std::string::npos) << read_file(dir_ / "e0");
  for (const char* name : {"lr=3.0e-3,seed=1", "lr=3.0e-3,seed=2", "lr=1.0e+30,seed=1", "lr=1.0e+30,seed=2"}) {
    // Trained once: one train record per step, one start in the sweep log.
    const auto train = testing::records(merged + "/runs/" + name, "train");
    if (std::string(name).find("1.0e+30") == std::string::npos) {
      EXPECT_EQ(train.size(), 5u) << name;
    }
    std::vector<int> steps;
    for (const auto& t : train) steps.push_back(t["step"].as<int>());
    EXPECT_TRUE(std::is_sorted(steps.begin(), steps.end()) &&
                std::adjacent_find(steps.begin(), steps.end()) == steps.end()) << name;
    const std::string log = read_file(merged + "/sweep.log");
    size_t starts = 0;
    for (size_t at = log.find("start   " + std::string(name)); at != std::string::npos;
         at = log.find("start   " + std::string(name), at + 1)) {
      ++starts;
    }
    EXPECT_EQ(starts, 1u) << name << "\n" << log;
  }
  EXPECT_EQ(without_timings(read_file(merged + "/summary.csv")), expected);
  // `normlab report` over the merged directory gives the same table.
  auto report = testing::run_command(testing::normlab_binary() + " report " + merged);
  EXPECT_EQ(report.status, 0);
  EXPECT_EQ(report.out, read_file(merged + "/summary.md"));

  // The same shard twice at once: the second is refused.
  const std::string busy = "(" + bin + " --jobs 1 --shard 0/2 --out " + dir_ / "busy" +
                           " --set train.steps=100000 --set train.checkpoint_every=100000 2>/dev/null & pid=$!; " +
                           "for i in $(seq 300); do [ -e " + dir_ / "busy/sweep.log" + " ] && break; sleep 0.1; done; " +
                           bin + " --jobs 1 --shard 0/2 --out " + dir_ / "busy" + " --set train.steps=100000 " +
                           "--set train.checkpoint_every=100000 2>" + dir_ / "e3" + "; echo $?; kill -INT $pid; wait $pid)";
  EXPECT_EQ(testing::run_command("bash -c '" + busy + "'").out, "2\n");
  EXPECT_NE(read_file(dir_ / "e3").find("another normlab sweep is running shard 0/2 on this directory"),
            std::string::npos) << read_file(dir_ / "e3");
}

}  // namespace
}  // namespace normlab
