// Data parallel on the CPU (src/parallel/README.md): c10d Gloo over loopback, ranks started by
// `normlab train --nproc 2` or by hand with torchrun's variables. W ranks x batch B must train as
// one process with batch W*B; every rank must take the same decisions; a lost rank must stop the
// others with a one-line error naming it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "config/load.h"
#include "core/errors.h"
#include "core/fs.h"
#include "parallel/comm.h"
#include "parallel/launch.h"
#include "model/transformer.h"
#include "test_util.h"
#include "train/checkpoint.h"

namespace normlab {
namespace {

using testing::TempDir;

Config dp_config(const std::string& out, const std::string& layout, int64_t batch) {
  Config c = testing::tiny_config(out);
  c.model.layout = layout;
  c.train.steps = 50;
  c.train.batch_size = batch;
  c.train.checkpoint_every = 50;
  c.train.threads = 1;
  c.eval.every = 0;
  c.diag.every = 10;
  c.train.dist_timeout = 60;
  return c;
}

std::string write_config(const TempDir& dir, const std::string& name, const Config& c) {
  const std::string path = dir / (name + ".yaml");
  std::ofstream(path) << dump_config(c);
  return path;
}

int train_cli(const std::string& cfg, const std::string& extra, const std::string& err,
              const std::string& env = "") {
  return testing::run_command(env + " " + testing::normlab_binary() + " train -c " + cfg + " " + extra, err).status;
}

std::vector<double> losses(const std::string& run) {
  std::vector<double> v;
  for (const auto& r : testing::records(run, "train")) v.push_back(r["loss"].as<double>());
  return v;
}

// Every train loss agrees to 1e-5 relative, and so do the final weights as a whole (the norm of the
// difference of all weights over the norm of all weights). Each tensor alone is held to 5e-5 of its
// norm: that is the float noise floor of the computation itself, since after these 50 AdamW steps
// one process on 1 and on 2 threads already differs by up to 8e-6 in a single tensor
// (normformer's fc2), and summing the batch in two halves is such a reordering too.
constexpr double weight_rtol = 5e-5, all_weights_rtol = 1e-5;
void expect_same_run(const std::string& got_run, const std::string& want_run, const Config& c, double rtol,
                     const std::string& what) {
  const auto got = losses(got_run), want = losses(want_run);
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], rtol * std::abs(want[i])) << what << ": train loss of step " << i;
  }
  const auto wg = testing::final_weights(got_run, c), ww = testing::final_weights(want_run, c);
  ASSERT_EQ(wg.size(), ww.size());
  double all_diff2 = 0, all_w2 = 0, worst = 0;
  std::string worst_name;
  for (size_t i = 0; i < ww.size(); ++i) {
    ASSERT_EQ(wg[i].first, ww[i].first);
    const double scale = ww[i].second.norm().item<double>();
    const double diff = (wg[i].second - ww[i].second).norm().item<double>();
    // HC's and mHC's mixing tensors start at 0 (alpha_fn, beta_fn, base) or at 0.01 and get
    // gradients that nearly cancel over positions: AdamW divides such a gradient by its own small
    // RMS, so the float reordering of summing the batch in two halves moves them by a visible part
    // of a step (measured: up to 1.3e-3 of mhc base's norm after 50 steps). They stay in the
    // all-weights bound and the losses below.
    const std::string& n = ww[i].first;
    const bool adam_noise = n.find(".hc") != std::string::npos || n.find("mhc") != std::string::npos;
    if (!adam_noise) {
      EXPECT_LE(diff, weight_rtol * scale) << what << ": " << n;
    }
    if (diff > worst * scale) {
      worst = diff / scale;
      worst_name = ww[i].first;
    }
    all_diff2 += diff * diff;
    all_w2 += scale * scale;
  }
  EXPECT_LE(std::sqrt(all_diff2), all_weights_rtol * std::sqrt(all_w2)) << what << ": all weights";
  std::printf("%s: all weights differ by %.3g of their norm; the most, %s, by %.3g of its own\n", what.c_str(),
              std::sqrt(all_diff2 / all_w2), worst_name.c_str(), worst);
}

struct DpCase {
  std::string layout;
  int64_t accum;
  std::string residual = "add";
  std::string value_residual = "none";
  std::string optim = "adamw";
  // The parametrization, off its base shape (base width d/2: m_N = 2; completep also base depth
  // L/2: m_L = 2), so every per-role multiplier, the readout's and the branches' are live.
  std::string param = "sp";
};
void PrintTo(const DpCase& c, std::ostream* os) {
  *os << c.layout << " accum " << c.accum << " residual " << c.residual << " value_residual "
      << c.value_residual << " optim " << c.optim << " param " << c.param;
}

class DataParallelEquivalenceTest : public ::testing::TestWithParam<DpCase> {};

TEST_P(DataParallelEquivalenceTest, TwoRanksOfBatch4TrainAsOneProcessOfBatch8) {
  const DpCase p = GetParam();
  TempDir dir;
  Config one = dp_config(dir / "one", p.layout, 8), two = dp_config(dir / "two", p.layout, 4);
  one.train.accum = two.train.accum = p.accum;
  for (Config* c : {&one, &two}) {
    c->model.residual.type = p.residual;
    c->model.value_residual = p.value_residual;
    c->optim.type = p.optim;
    // Newton-Schulz in float32: with bf16 products, the float reordering of summing the batch in two
    // halves flips bf16 roundings that five iterations amplify (measured: the weights 1.2e-2 apart
    // after 50 steps, the losses 2e-5 relative); in float32 that noise stays at AdamW's level.
    if (p.optim != "adamw") c->optim.keys.set("muon.ns_dtype", std::string("fp32"));
    testing::off_base_shape(*c, p.param);
    *c = fit_to_layout(*find_layout(p.layout), *c);
  }
  ASSERT_EQ(train_cli(write_config(dir, "one", one), "", dir / "err1"), 0) << read_file(dir / "err1");
  ASSERT_EQ(train_cli(write_config(dir, "two", two), "--nproc 2", dir / "err2"), 0) << read_file(dir / "err2");
  expect_same_run(two.out_dir, one.out_dir, one, 1e-5, p.layout);
  // One record per step, written by rank 0 alone, counting the global batch's tokens.
  const auto tr = testing::records(two.out_dir, "train");
  ASSERT_EQ(tr.size(), 50u);
  EXPECT_EQ(tr.back()["tokens"].as<int64_t>(), 50 * 8 * p.accum * one.model.ctx);
  EXPECT_EQ(read_file(find_checkpoint(two.out_dir, std::nullopt) + "/state.json").find("\"world_size\":2") !=
                std::string::npos, true);
}

INSTANTIATE_TEST_SUITE_P(Layouts, DataParallelEquivalenceTest,
                         ::testing::Values(DpCase{"pre", 1}, DpCase{"post", 1}, DpCase{"deepnorm", 1},
                                           DpCase{"normformer", 1}, DpCase{"pre", 2},
                                           DpCase{"sandwich", 1, "hc", "token"}, DpCase{"pre", 2, "mhc"},
                                           DpCase{"lns", 1, "attnres", "scalar"},
                                           DpCase{"ngpt", 2, "add", "token"}, DpCase{"resi_dual", 1},
                                           DpCase{"pre", 2, "add", "none", "muon"},
                                           DpCase{"ngpt", 1, "add", "none", "normuon"},
                                           DpCase{"pre", 1, "add", "none", "adamw", "mup"},
                                           DpCase{"pre", 2, "add", "none", "muon", "completep"}),
                         [](const auto& info) {
                           return info.param.layout + (info.param.accum > 1 ? "_accum2" : "") +
                                  (info.param.residual != "add" ? "_" + info.param.residual : "") +
                                  (info.param.value_residual != "none"
                                       ? "_vres_" + info.param.value_residual : "") +
                                  (info.param.optim != "adamw" ? "_" + info.param.optim : "") +
                                  (info.param.param != "sp" ? std::string("_") + info.param.param : std::string());
                         });

TEST(DataParallelTest, ARankKilledDuringACheckpointStopsTheOtherAndOneProcessResumesTheRun) {
  TempDir dir;
  Config one = dp_config(dir / "one", "pre", 8), two = dp_config(dir / "two", "pre", 4);
  one.train.checkpoint_every = two.train.checkpoint_every = 10;
  ASSERT_EQ(train_cli(write_config(dir, "one", one), "", dir / "err1"), 0) << read_file(dir / "err1");
  // Rank 0 dies (SIGKILL) inside its third checkpoint (step 30): LATEST still names step 20.
  const int st = train_cli(write_config(dir, "two", two), "--nproc 2", dir / "err2",
                           "NORMLAB_CRASH_AT=checkpoint.before_swap:3");
  const std::string err = read_file(dir / "err2");
  EXPECT_NE(st, 0) << err;
  EXPECT_NE(err.find("rank 1 of 2: lost rank 0"), std::string::npos) << err;
  EXPECT_NE(err.find("rank 0 failed first (killed by signal 9"), std::string::npos) << err;
  EXPECT_EQ(read_file(two.out_dir + "/checkpoints/LATEST"), "step_00000020\n");
  // One process with the doubled batch continues the same run: the same global batch.
  two.train.batch_size = 8;
  ASSERT_EQ(train_cli(write_config(dir, "two", two), "--resume", dir / "err3"), 0) << read_file(dir / "err3");
  expect_same_run(two.out_dir, one.out_dir, one, 1e-5, "resumed");
  // A world size that changes the global batch is refused, naming both products.
  two.train.batch_size = 4;
  two.train.steps = 60;
  EXPECT_EQ(train_cli(write_config(dir, "two", two), "--resume", dir / "err4"), 2);
  EXPECT_NE(read_file(dir / "err4").find("train.batch_size: is 4 but the run has 8 (checkpoints/step_00000050): the global batch "
                                          "(batch_size x processes) would be 4 x 1 = 4 instead of 8 x 1 = 8"), std::string::npos)
      << read_file(dir / "err4");
}

// grad_noise_scale from per-rank gradients equals the one from micro-batch gradients over the same
// rows: 2 ranks x batch 4 against 1 process x batch 4 x accum 2 (shuffle off: the same 8 rows).
TEST(DataParallelTest, GradNoiseScaleFromRanksEqualsTheOneFromMicroBatches) {
  TempDir dir;
  Config acc = dp_config(dir / "acc", "pre", 4), two = dp_config(dir / "two", "pre", 4);
  acc.train.accum = 2;
  for (Config* c : {&acc, &two}) {
    c->data.shuffle = false;
    c->train.steps = 5;
    c->diag.every = 1;
  }
  ASSERT_EQ(train_cli(write_config(dir, "acc", acc), "", dir / "err1"), 0) << read_file(dir / "err1");
  ASSERT_EQ(train_cli(write_config(dir, "two", two), "--nproc 2", dir / "err2"), 0) << read_file(dir / "err2");
  const auto a = testing::records(acc.out_dir, "train"), b = testing::records(two.out_dir, "train");
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(b.size(), 5u);
  for (size_t s = 0; s < a.size(); ++s) {
    ASSERT_TRUE(a[s]["grad_noise_scale"].IsDefined()) << s;
    const double want = a[s]["grad_noise_scale"].as<double>(), got = b[s]["grad_noise_scale"].as<double>();
    EXPECT_NEAR(got, want, 1e-3 * std::abs(want)) << "step " << s;
  }
}

// Toy text whose random-byte block lands in rank 1's rows of one update only (shuffle off: update k
// reads global rows k*8 .. k*8+7 of 32 tokens; rank 1 takes rows 4..7).
std::string corpus_with_noise_in_rank1_rows(const TempDir& dir, int64_t step) {
  const std::string text = read_file(testing::source_dir() + "/data/toy/train.txt").substr(0, 40000);
  const int64_t start = (step * 8 + 4) * 32, len = 4 * 32;
  std::string out = text.substr(0, start);
  std::mt19937 rng(7);
  for (int64_t i = 0; i < len; ++i) out += static_cast<char>(rng() % 256);
  out += text.substr(start + len);
  write_file_atomic(dir / "noisy.txt", out);
  return dir / "noisy.txt";
}

TEST(DataParallelTest, ASpikeInOneRanksRowsIsSkippedByEveryRank) {
  TempDir dir;
  Config one = dp_config(dir / "one", "pre", 8), two = dp_config(dir / "two", "pre", 4);
  for (Config* c : {&one, &two}) {
    c->data.train = {corpus_with_noise_in_rank1_rows(dir, 40)};
    c->data.shuffle = false;
    c->diag.spike.window = 24;
    c->diag.spike.zscore = 4;
    c->diag.spike.action = SpikeAction::kSkip;
  }
  ASSERT_EQ(train_cli(write_config(dir, "one", one), "", dir / "err1"), 0) << read_file(dir / "err1");
  ASSERT_EQ(train_cli(write_config(dir, "two", two), "--nproc 2", dir / "err2"), 0) << read_file(dir / "err2");
  const auto tr = testing::records(two.out_dir, "train");
  ASSERT_EQ(tr.size(), 50u);
  for (size_t s = 0; s < tr.size(); ++s) {
    EXPECT_EQ(tr[s]["skipped"].IsDefined(), s == 40) << "step " << s << ": loss_z " << tr[s]["loss_z"]
                                                      << ", grad_norm_z " << tr[s]["grad_norm_z"];
  }
  // Identical final weights on rank 0 and in the one-process run mean rank 1 skipped the same step.
  expect_same_run(two.out_dir, one.out_dir, one, 1e-5, "spike");
}

TEST(DataParallelTest, ANonFiniteGradientOnOneRankStopsEveryRankCleanly) {
  TempDir dir;
  Config two = dp_config(dir / "two", "pre", 4);
  two.train.checkpoint_every = 10;
  const int st = train_cli(write_config(dir, "two", two), "--nproc 2", dir / "err", "NORMLAB_TEST_NAN_GRAD=1:13");
  const std::string err = read_file(dir / "err");
  EXPECT_EQ(st, 1) << err;
  EXPECT_NE(err.find("stopped at step 13: the loss or gradients are not finite"), std::string::npos) << err;
  EXPECT_EQ(err.find("lost rank"), std::string::npos) << "both ranks must stop on the decision, not on a lost peer:\n" << err;
  const auto tr = testing::records(two.out_dir, "train");
  ASSERT_EQ(tr.size(), 14u);
  EXPECT_TRUE(tr[13]["nonfinite"].IsDefined());
  EXPECT_EQ(read_file(two.out_dir + "/checkpoints/LATEST"), "step_00000013\n");  // the last good weights
}

// Child processes a test started: SIGKILLed when the test ends, whatever happened.
struct Children {
  std::vector<pid_t> pids;
  ~Children() {
    for (pid_t p : pids) {
      if (::kill(p, SIGKILL) == 0) ::waitpid(p, nullptr, 0);
    }
  }
};

// `normlab ARGS` with extra environment variables and stderr to a file; everything is prepared
// before the fork (the child only calls async-signal-safe functions).
pid_t start_normlab(const std::vector<std::string>& args, const std::vector<std::string>& env_extra,
                    const std::string& err) {
  std::vector<std::string> env(env_extra);
  for (char** e = ::environ; *e; ++e) env.push_back(*e);
  std::vector<std::string> argv{testing::normlab_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> av, ev;
  for (auto& a : argv) av.push_back(a.data());
  for (auto& e : env) ev.push_back(e.data());
  av.push_back(nullptr);
  ev.push_back(nullptr);
  const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fd, 2);
    ::execve(av[0], av.data(), ev.data());
    ::_exit(127);
  }
  ::close(fd);
  return pid;
}

// Ranks started by hand with torchrun's variables (as torchrun --no-python or srun would).
pid_t start_rank(const std::string& cfg, int rank, int port, const std::string& err) {
  return start_normlab({"train", "-c", cfg},
                       {"RANK=" + std::to_string(rank), "LOCAL_RANK=" + std::to_string(rank), "WORLD_SIZE=2",
                        "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port)},
                       err);
}

TEST(DataParallelTest, ARankKilledMidRunMakesTheOtherExitWithAnErrorNamingIt) {
  TempDir dir;
  Config c = dp_config(dir / "run", "pre", 4);
  c.train.steps = 100000;  // runs until killed
  c.train.checkpoint_every = 100000;
  c.train.dist_timeout = 20;
  const std::string cfg = write_config(dir, "run", c);
  const int port = free_local_port();
  const pid_t r0 = start_rank(cfg, 0, port, dir / "err0"), r1 = start_rank(cfg, 1, port, dir / "err1");
  Children guard{{r0, r1}};
  const auto t0 = std::chrono::steady_clock::now();
  while (testing::records(c.out_dir, "train").size() < 5) {
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(120)) << read_file(dir / "err0");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::kill(r1, SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  int st = 0;
  pid_t done = 0;
  while ((done = ::waitpid(r0, &st, WNOHANG)) == 0 && std::chrono::steady_clock::now() - killed < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(done, r0) << "rank 0 hung after rank 1 died";
  guard.pids = {r1};
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_LE(took, c.train.dist_timeout) << "rank 0 stopped only after " << took << " s";
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << st;
  const std::string err = read_file(dir / "err0");
  EXPECT_NE(err.find("error: rank 0 of 2: lost rank 1"), std::string::npos) << err;
}

TEST(DataParallelTest, CtrlCStopsEveryRankAtTheSameStepWithACheckpointThatResumes) {
  TempDir dir;
  Config c = dp_config(dir / "run", "pre", 4), whole = dp_config(dir / "whole", "pre", 4);
  c.train.steps = whole.train.steps = 200;
  c.train.checkpoint_every = whole.train.checkpoint_every = 1000;
  const std::string cfg = write_config(dir, "run", c);
  ASSERT_EQ(train_cli(write_config(dir, "whole", whole), "--nproc 2", dir / "err0"), 0) << read_file(dir / "err0");
  const pid_t launcher = start_normlab({"train", "-c", cfg, "--nproc", "2"}, {}, dir / "err");
  Children guard{{launcher}};
  const auto t0 = std::chrono::steady_clock::now();
  while (testing::records(c.out_dir, "train").size() < 5) {
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(120)) << read_file(dir / "err");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(launcher, SIGINT);  // what a terminal's Ctrl-C does to the launcher
  int st = 0;
  ASSERT_EQ(::waitpid(launcher, &st, 0), launcher);
  guard.pids.clear();
  ASSERT_TRUE(WIFEXITED(st)) << read_file(dir / "err");
  EXPECT_EQ(WEXITSTATUS(st), 130) << read_file(dir / "err");
  const std::string latest = read_file(c.out_dir + "/checkpoints/LATEST");
  const int64_t step = std::stoll(latest.substr(5));
  EXPECT_LT(step, 200);
  EXPECT_EQ(static_cast<int64_t>(testing::records(c.out_dir, "train").size()), step);
  // Both ranks stopped after the same update: the resumed run ends as the uninterrupted one.
  ASSERT_EQ(train_cli(cfg, "--nproc 2 --resume", dir / "err2"), 0) << read_file(dir / "err2");
  EXPECT_EQ(losses(c.out_dir), losses(whole.out_dir));
}

TEST(DistEnvTest, ReadsTorchrunsVariablesAndNamesTheBadOne) {
  auto with_env = [](std::vector<std::pair<const char*, const char*>> vars) {
    for (const char* k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) ::unsetenv(k);
    for (auto& [k, v] : vars) ::setenv(k, v, 1);
  };
  with_env({});
  EXPECT_FALSE(dist_env_from_environment().distributed());
  with_env({{"WORLD_SIZE", "4"}, {"RANK", "3"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
            {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "29500"}});
  const DistEnv e = dist_env_from_environment();
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.master_addr, "node7");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(threads_per_rank(0, e, 16), 8);  // the node's cores split between its 2 ranks
  EXPECT_EQ(threads_per_rank(3, e, 16), 3);  // train.threads wins
  auto message = [&]() -> std::string {
    try {
      dist_env_from_environment();
    } catch (const UsageError& err) {
      return err.what();
    }
    return "";
  };
  with_env({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
  EXPECT_NE(message().find("WORLD_SIZE=2 but RANK is not set"), std::string::npos) << message();
  with_env({{"WORLD_SIZE", "2"}, {"RANK", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
  EXPECT_NE(message().find("RANK=2 must be below WORLD_SIZE=2"), std::string::npos) << message();
  with_env({{"WORLD_SIZE", "two"}});
  EXPECT_NE(message().find("WORLD_SIZE=two is not an integer"), std::string::npos) << message();
  with_env({});
}

}  // namespace
}  // namespace normlab
