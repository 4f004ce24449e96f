// The normlab binary as a user runs it: exit codes, stdout carrying results only.
#include <gtest/gtest.h>

#include <regex>

#include <yaml-cpp/yaml.h>

#include <fstream>

#include <fmt/format.h>

#include "core/fs.h"
#include "core/torch_compat.h"
#include "test_util.h"

namespace normlab {
namespace {

using testing::run_command;

TEST(CliTest, HelpExitsZeroForEveryCommand) {
  for (const char* c : {"--help", "train --help", "eval --help", "sample --help"}) {
    auto r = run_command(testing::normlab_binary() + " " + c);
    EXPECT_EQ(r.status, 0) << c;
    EXPECT_NE(r.out.find("--"), std::string::npos) << c;
  }
  auto k = run_command(testing::normlab_binary() + " keys");
  EXPECT_EQ(k.status, 0);
  EXPECT_NE(k.out.find("model.norm.type"), std::string::npos);
  EXPECT_NE(k.out.find("rmsnorm_1p"), std::string::npos);
}

TEST(CliTest, BadUsageAndBadConfigsExitTwoWithOneLinePerProblem) {
  testing::TempDir dir;
  EXPECT_EQ(run_command(testing::normlab_binary()).status, 2);
  EXPECT_EQ(run_command(testing::normlab_binary() + " train").status, 2);
  EXPECT_EQ(run_command(testing::normlab_binary() + " frobnicate").status, 2);
  auto missing = run_command(testing::normlab_binary() + " train -c " + dir / "nope.yaml", dir / "err");
  EXPECT_EQ(missing.status, 2);
  EXPECT_EQ(read_file(dir / "err"), "error: " + dir / "nope.yaml" + ": config file not found\n");

  {
    std::ofstream f(dir / "bad.yaml");
    f << "model:\n  n_heads: 5\n  norm: {type: groupnorm}\ntrain: {steps: 10}\n";
  }
  auto bad = run_command("cd " + testing::source_dir() + " && " + testing::normlab_binary() + " train -c " + dir / "bad.yaml" +
                             " --out " + dir / "run",
                         dir / "err");
  EXPECT_EQ(bad.status, 2);
  EXPECT_TRUE(bad.out.empty());
  const std::string err = read_file(dir / "err");
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 2) << err;
  EXPECT_NE(err.find(dir / "bad.yaml" + ":2: model.n_heads: 5 does not divide d_model 128"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(dir / "run"));  // nothing half-written

  auto badset = run_command(testing::normlab_binary() + " train -c " + dir / "bad.yaml" + " --set model.n_heads", dir / "err");
  EXPECT_EQ(badset.status, 2);
  auto empty_out = run_command("cd " + testing::source_dir() + " && " + testing::normlab_binary() +
                                   " train -c configs/default.yaml --out ''", dir / "err");
  EXPECT_EQ(empty_out.status, 2);
  EXPECT_EQ(read_file(dir / "err"), "error: --out: must name a directory, got an empty string\n");
  EXPECT_EQ(run_command(testing::normlab_binary() + " eval --run " + dir / "norun").status, 2);
}

// The bf16 start-up check times the model's own gradient pass in both precisions. With
// NORMLAB_NO_ONEDNN=1 LibTorch takes the path it takes on a CPU without AVX-512 (bf16 matmuls in
// its slow native loops), so the warning must appear on any machine.
TEST(CliTest, Bf16StartupCheckWarnsWhereBf16TrainsSlowerThanFp32) {
  testing::TempDir dir;
  const std::string cmd = "cd " + testing::source_dir() + " && NORMLAB_NO_ONEDNN=1 " + testing::normlab_binary() +
                          " train -c configs/default.yaml --out " + (dir / "run") +
                          " --set train.steps=1 --set model.n_layers=1 --set model.d_model=64 --set model.ctx=64"
                          " --set train.batch_size=4 --set eval.max_windows=2 --set train.threads=1"
                          " --set train.precision=bf16";
  const auto r = run_command(cmd, dir / "err");
  ASSERT_EQ(r.status, 0) << read_file(dir / "err");
  const std::string err = read_file(dir / "err");
  // The measured times, always logged; the warning appears exactly when bf16 was the slower.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(err, m, std::regex(R"(bf16 check: .*, ([0-9.]+) ms in bf16, ([0-9.]+) ms in fp32)"))) << err;
  const double bf16 = std::stod(m[1]), fp32 = std::stod(m[2]);
  const bool warned =
      err.find("warning: train.precision bf16 on this CPU: a forward and backward of one micro-batch takes") != std::string::npos;
  EXPECT_EQ(warned, bf16 > fp32) << err;
#if !NORMLAB_TORCH_AT_LEAST(2, 0)
  // Debian's LibTorch 1.13 without oneDNN runs a bf16 matmul in its native loops: far slower (6.4x
  // measured on the 2-core Xeon VM, 2026-11-27). A check that timed one precision twice, or the
  // same pass for both, would print two equal-ish times and warn by chance: the times themselves
  // must show the gap, not only agree with the warning.
  EXPECT_TRUE(warned) << err;
  EXPECT_GT(bf16, 2 * fp32) << err;
#endif
}

// One tiny training run shared by the eval and sample tests.
class CliRunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    const std::string cmd = "cd " + testing::source_dir() + " && " + testing::normlab_binary() +
                            " train -c configs/default.yaml --out " + (*dir_ / "run") +
                            " --set train.steps=6 --set model.n_layers=1 --set model.d_model=32"
                            " --set model.ctx=32 --set train.batch_size=4 --set train.checkpoint_every=3"
                            " --set eval.max_windows=4 --set train.threads=1";
    status_ = run_command(cmd, *dir_ / "train_err").status;
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string run() { return *dir_ / "run"; }
  static testing::TempDir* dir_;
  static int status_;
};
testing::TempDir* CliRunTest::dir_ = nullptr;
int CliRunTest::status_ = -1;

TEST_F(CliRunTest, TrainPrintsNothingOnStdoutAndSaysWhereTheRunWent) {
  ASSERT_EQ(status_, 0) << read_file(*dir_ / "train_err");
  EXPECT_NE(read_file(*dir_ / "train_err").find(run()), std::string::npos);
}

TEST_F(CliRunTest, EvalPrintsOneJsonLine) {
  ASSERT_EQ(status_, 0);
  auto r = run_command("cd " + testing::source_dir() + " && " + testing::normlab_binary() + " eval --run " + run());
  ASSERT_EQ(r.status, 0);
  ASSERT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1);
  YAML::Node j = YAML::Load(r.out);
  EXPECT_EQ(j["windows"].as<int>(), 4);
  EXPECT_EQ(j["tokens"].as<int>(), 4 * 32);
  EXPECT_GT(j["loss"].as<double>(), 0.5);
  // The last eval record of the run is the same number for the same checkpoint.
  auto at3 = run_command("cd " + testing::source_dir() + " && " + testing::normlab_binary() + " eval --run " + run() + " --step 3");
  EXPECT_EQ(at3.status, 0);
  EXPECT_NE(at3.out, r.out);
  EXPECT_EQ(run_command(testing::normlab_binary() + " eval --run " + run() + " --step 4").status, 2);
  EXPECT_EQ(run_command(testing::normlab_binary() + " eval --run " + run() + " --data /nonexistent.txt").status, 2);
}

TEST_F(CliRunTest, GreedySampleIsDeterministicAndPrintsOnlyNewBytes) {
  ASSERT_EQ(status_, 0);
  const std::string base = testing::normlab_binary() + " sample --run " + run() + " --prompt 'k: a=1' --max-new 20";
  auto a = run_command(base + " --temperature 0");
  auto b = run_command(base + " --temperature 0 --seed 9");
  ASSERT_EQ(a.status, 0);
  EXPECT_EQ(a.out.size(), 20u);
  EXPECT_EQ(a.out, b.out);  // greedy ignores the seed
  auto s1 = run_command(base + " --temperature 1 --seed 1");
  auto s2 = run_command(base + " --temperature 1 --seed 1");
  EXPECT_EQ(s1.out, s2.out);
  EXPECT_EQ(s1.out.size(), 20u);
  // Prompts longer than ctx are cropped to the last ctx tokens, not refused.
  auto longp = run_command(testing::normlab_binary() + " sample --run " + run() + " --prompt '" + std::string(100, 'w') +
                           "' --max-new 3 --temperature 0");
  EXPECT_EQ(longp.status, 0);
  EXPECT_EQ(longp.out.size(), 3u);
  EXPECT_EQ(run_command(base + " --temperature -1").status, 2);
}

// eval and sample run on the device --device names; the checkpoint (CPU tensors) follows.
TEST_F(CliRunTest, EvalAndSampleTakeADevice) {
  ASSERT_EQ(status_, 0);
  const std::string eval = testing::normlab_binary() + " eval --run " + run();
  auto plain = run_command(eval), on_cpu = run_command(eval + " --device cpu");
  ASSERT_EQ(on_cpu.status, 0);
  EXPECT_EQ(on_cpu.out, plain.out);
  const std::string sample = testing::normlab_binary() + " sample --run " + run() + " --prompt 'k: a=1' --max-new 5 --temperature 0";
  EXPECT_EQ(run_command(sample + " --device cpu").out, run_command(sample).out);

  testing::TempDir dir;
  for (const std::string& cmd : {eval, sample}) {
    auto bad = run_command(cmd + " --device tpu", dir / "err");
    EXPECT_EQ(bad.status, 2);
    EXPECT_EQ(read_file(dir / "err"), "error: --device tpu: expected cpu, cuda or cuda:N\n");
    if (!torch::cuda::is_available()) {
      auto gpu = run_command(cmd + " --device cuda", dir / "err");
      EXPECT_EQ(gpu.status, 2);
      EXPECT_EQ(read_file(dir / "err"), "error: --device cuda: this LibTorch build sees no CUDA device\n");
    }
  }
}


TEST_F(CliRunTest, SampleRejectsNonFiniteTemperatureAndAbsurdLengths) {
  ASSERT_EQ(status_, 0);
  const std::string base = testing::normlab_binary() + " sample --run " + run() + " --prompt 'k: a=1'";
  for (const char* bad : {" --temperature nan", " --temperature inf", " --max-new 1000001",
                          " --max-new 99999999999999999"}) {
    auto r = run_command(base + bad, *dir_ / "err");
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_TRUE(r.out.empty()) << bad;
    const std::string err = read_file(*dir_ / "err");
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << bad << ": " << err;
  }
}

// A long generation shows its bytes as they come, and Ctrl-C keeps what was generated.
TEST_F(CliRunTest, SampleStreamsItsBytesAndStopsCleanlyOnCtrlC) {
  ASSERT_EQ(status_, 0);
  const std::string out = *dir_ / "sample_out", err = *dir_ / "sample_err";
  const std::string script = "(exec " + testing::normlab_binary() + " sample --run " + run() +
                             " --prompt k --max-new 1000000 --temperature 1 >" + out + " 2>" + err +
                             " & pid=$!; sleep 2; kill -INT $pid; wait $pid; echo $?)";
  auto r = run_command("bash -c '" + script + "'");
  EXPECT_EQ(r.out, "130\n");
  const auto n = std::filesystem::file_size(out);
  EXPECT_GT(n, 0u) << "nothing was written before Ctrl-C";
  EXPECT_LT(n, 1000000u);
  EXPECT_EQ(read_file(err), "");
}

// config.yaml stores the data paths absolute: eval finds data.val from any directory.
TEST_F(CliRunTest, EvalWorksFromAnyDirectory) {
  ASSERT_EQ(status_, 0);
  auto r = run_command("cd / && " + testing::normlab_binary() + " eval --run " + run(), *dir_ / "err");
  EXPECT_EQ(r.status, 0) << read_file(*dir_ / "err");
  EXPECT_NE(r.out.find("\"loss\""), std::string::npos);
}

}  // namespace
}  // namespace normlab

namespace normlab {
namespace {

// Ctrl-C (SIGINT) during training: the current update finishes, a checkpoint is written, the
// process exits 130, and --resume carries on to the end.
TEST(CliSignalTest, SigintCheckpointsAndResumeFinishes) {
  testing::TempDir dir;
  const std::string run = dir / "run";
  const std::string train = "cd " + testing::source_dir() + " && exec " + testing::normlab_binary() +
                            " train -c configs/default.yaml --out " + run +
                            " --set train.steps=4000 --set model.n_layers=1 --set model.d_model=32"
                            " --set model.ctx=32 --set train.batch_size=4 --set train.threads=1"
                            " --set eval.max_windows=2 --set train.checkpoint_every=100000";
  const std::string script = "(" + train + " 2>" + dir / "err" + " & pid=$!; sleep 3; kill -INT $pid; wait $pid; echo $?)";
  auto r = testing::run_command("bash -c '" + script + "'");
  EXPECT_EQ(r.out, "130\n") << read_file(dir / "err");
  const std::string err = read_file(dir / "err");
  EXPECT_NE(err.find("interrupted: checkpoint step_"), std::string::npos) << err;
  const std::string latest = read_file(run + "/checkpoints/LATEST");
  EXPECT_EQ(latest.rfind("step_", 0), 0u);
  const int64_t step = std::stoll(latest.substr(5));
  EXPECT_GT(step, 0);
  auto resumed = testing::run_command(train + " --resume --set train.steps=" + std::to_string(step + 3), dir / "err2");
  EXPECT_EQ(resumed.status, 0) << read_file(dir / "err2");
  EXPECT_EQ(read_file(run + "/checkpoints/LATEST"), fmt::format("step_{:08d}\n", step + 3));
}

}  // namespace
}  // namespace normlab
