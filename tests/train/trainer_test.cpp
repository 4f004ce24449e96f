#include "train/trainer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

#include <signal.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "config/load.h"
#include "core/errors.h"
#include "core/fs.h"
#include "metrics/records.h"
#include "metrics/report.h"
#include "optim/optimizer.h"
#include "optim/registry.h"
#include "train/checkpoint.h"
#include "train/inference.h"
#include "train/safetensors.h"
#include "train/run_config.h"
#include "test_util.h"

namespace normlab {
namespace {


// Every optimizer of the registry (and variants with keys set): its state (moments, momentum,
// NorMuon's row moments) goes through the checkpoint.
// `param`: the run's parametrization, off its base shape (m_N = 2; completep also m_L = 2).
void resume_is_bitwise_identical(const std::string& type, const std::vector<std::pair<std::string, KeyValue>>& keys = {},
                                 std::string param = "sp") {
  SCOPED_TRACE(type + " under " + param);
  testing::TempDir dir;
  Config full = testing::tiny_config(dir / "full");
  full.train.accum = 2;  // data position must count micro-batches
  full.optim.type = type;
  testing::off_base_shape(full, param);
  for (const auto& [key, value] : keys) full.optim.keys.set(key, value);
  ASSERT_EQ(train(testing::resolved(full), {}), 0);

  // The same run interrupted (Ctrl-C) after its first update, then resumed to the end through
  // checkpoints at other steps: the later losses must not differ in a single bit.
  Config part = full;
  part.out_dir = dir / "part";
  part.train.checkpoint_every = 7;
  std::atomic<bool> stop{true};
  TrainOptions first;
  first.stop = &stop;
  EXPECT_EQ(train(testing::resolved(part), first), kInterrupted);
  EXPECT_EQ(find_checkpoint(part.out_dir, std::nullopt), part.out_dir + "/checkpoints/step_00000001");
  TrainOptions rest;
  rest.resume = true;
  EXPECT_EQ(train(testing::resolved(part), rest), 0);

  auto a = testing::records(dir / "full", "train"), b = testing::records(dir / "part", "train");
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 20u);  // no duplicated step records after the resume
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["step"].as<int64_t>(), b[i]["step"].as<int64_t>());
    EXPECT_EQ(a[i]["loss"].as<std::string>(), b[i]["loss"].as<std::string>()) << "step " << i;
    EXPECT_EQ(a[i]["grad_norm"].as<std::string>(), b[i]["grad_norm"].as<std::string>()) << "step " << i;
  }
  auto ea = testing::records(dir / "full", "eval"), eb = testing::records(dir / "part", "eval");
  ASSERT_FALSE(ea.empty());
  EXPECT_EQ(ea.back()["val_loss"].as<std::string>(), eb.back()["val_loss"].as<std::string>());

  // Final weights equal bit for bit.
  Config cfg = testing::resolved(full);
  Transformer ma(cfg.model), mb(cfg.model);
  load_model_weights(find_checkpoint(dir / "full", std::nullopt), ma);
  load_model_weights(find_checkpoint(dir / "part", std::nullopt), mb);
  auto ta = model_tensors(ma), tb = model_tensors(mb);
  for (size_t i = 0; i < ta.size(); ++i) EXPECT_TRUE(torch::equal(ta[i].second, tb[i].second)) << ta[i].first;
  // Every tensor of the optimizer's state is in trainer.safetensors, under its rule's name for it
  // (exp_avg.<p>, exp_avg_sq.<p>, <p>.muon_momentum, <p>.normuon_v, ...), one per parameter of the rule.
  const auto st = read_safetensors(find_checkpoint(dir / "full", std::nullopt) + "/trainer.safetensors");
  std::set<std::string> saved;
  for (const auto& [name, t] : st.tensors) saved.insert(name);
  NamedTensors named;
  for (auto& kv : ma->named_parameters()) named.emplace_back(kv.key(), kv.value());
  const Optimizer fresh(named, cfg.optim);
  for (const auto& rule : fresh.rules()) {
    const auto state = rule->state();
    EXPECT_EQ(state.size() % std::max<size_t>(1, rule->params().size()), 0u) << rule->name();
    for (const auto& [name, t] : state) EXPECT_TRUE(saved.count(name)) << rule->name() << ": " << name;
  }
}

// configure_threads flushes subnormals on the calling thread and on every intra-op worker: a
// product whose result is subnormal (FTZ) and a subnormal input (DAZ) give 0, in a loop of each
// thread and in a LibTorch kernel. IEEE behaviour (a nonzero result) is restored at the end.
TEST(ThreadSetupTest, SubnormalsAreFlushedOnEveryThread) {
  const int before = torch::get_num_threads();
  if (!at::globalContext().setFlushDenormal(false)) GTEST_SKIP() << "no FTZ/DAZ on this CPU";
  auto per_thread = [](int64_t n) {
    std::vector<float> out(static_cast<size_t>(2 * n), -1.0f);
    at::parallel_for(0, n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        volatile float normal = 1e-37f, sub = 1e-39f, scale = 0.01f, one = 1.0f;
        out[static_cast<size_t>(2 * i)] = normal * scale;  // 1e-39: subnormal result
        out[static_cast<size_t>(2 * i + 1)] = sub * one;   // subnormal input
      }
    });
    return out;
  };
  torch::set_num_threads(1);
  for (float v : per_thread(1)) EXPECT_NE(v, 0.0f);  // IEEE before: subnormals kept
  configure_threads(2);
  for (float v : per_thread(2)) EXPECT_EQ(v, 0.0f);
  auto t = torch::full({4096}, 1e-37f) * 0.01f;
  EXPECT_EQ(t.abs().max().item<float>(), 0.0f);
  at::parallel_for(0, 2, 1, [](int64_t, int64_t) { at::globalContext().setFlushDenormal(false); });
  at::globalContext().setFlushDenormal(false);
  torch::set_num_threads(before);
  EXPECT_GT((torch::full({8}, 1e-37f) * 0.01f).abs().min().item<float>(), 0.0f);
}

TEST(TrainerTest, ResumedRunIsBitwiseIdenticalToUninterrupted) {
  for (const auto& entry : optimizer_registry()) resume_is_bitwise_identical(entry.name);
  resume_is_bitwise_identical("normuon", {{"muon.ns", std::string("polar_express")}, {"muon.cautious_wd", true}});
}

// Under every parametrization but sp (mup, completep) off the base shape (every multiplier live) a
// resumed run is the uninterrupted one, bit for bit, under AdamW and Muon.
TEST(TrainerTest, ResumedRunUnderEveryParametrizationIsBitwiseIdentical) {
  for (const std::string& p : testing::non_default_parametrizations()) {
    for (const char* type : {"adamw", "muon"}) resume_is_bitwise_identical(type, {}, p);
  }
}

TEST(TrainerTest, RunDirectoryFollowsTheContract) {
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "run");
  c.train.steps = 12;
  c.train.save_init = true;
  c.train.log_every = 5;
  ASSERT_EQ(train(testing::resolved(c), {}), 0);
  namespace fs = std::filesystem;
  const fs::path run(c.out_dir);
  for (const char* f : {"config.yaml", "metrics.jsonl", "train.log", "checkpoints/LATEST",
                        "checkpoints/step_00000000/model.safetensors", "checkpoints/step_00000010/model.safetensors",
                        "checkpoints/step_00000012/model.safetensors", "checkpoints/step_00000012/trainer.safetensors",
                        "checkpoints/step_00000012/state.json"}) {
    EXPECT_TRUE(fs::exists(run / f)) << f;
  }
  // The resolved config reloads as is, to the same config.
  auto again = parse_config_file((run / "config.yaml").string()).config;
  EXPECT_EQ(dump_config(again), read_file((run / "config.yaml").string()));

  auto tr = testing::records(c.out_dir, "train");
  ASSERT_EQ(tr.size(), 4u);  // steps 0, 5, 10 and the last, 11
  EXPECT_EQ(tr[3]["step"].as<int>(), 11);
  const auto& r = tr[1];
  for (const char* k : {"loss", "lr", "grad_norm", "tokens", "tok_per_s", "grad_norm_embed", "grad_norm_head"}) {
    EXPECT_TRUE(r[k].IsDefined()) << k;
  }
  EXPECT_EQ(r["tokens"].as<int64_t>(), 6 * 4 * 32);  // after update 5: 6 updates of B*T tokens
  EXPECT_EQ(r["layers"]["grad_norm"].size(), 2u);
  // Per-block norms square-sum with embed and head to the total.
  double sq = std::pow(r["grad_norm_embed"].as<double>(), 2) + std::pow(r["grad_norm_head"].as<double>(), 2);
  for (const auto& g : r["layers"]["grad_norm"]) sq += std::pow(g.as<double>(), 2);
  EXPECT_NEAR(std::sqrt(sq), r["grad_norm"].as<double>(), 1e-5 * r["grad_norm"].as<double>());
  auto ev = testing::records(c.out_dir, "eval");
  ASSERT_EQ(ev.size(), 3u);  // steps 0, 10, 12
  EXPECT_EQ(ev[2]["step"].as<int>(), 12);
  EXPECT_TRUE(ev[2]["val_excess"].IsDefined());

  // A second run into the same directory is refused; nothing is overwritten.
  const std::string before = read_file((run / "metrics.jsonl").string());
  EXPECT_THROW(train(testing::resolved(c), {}), UsageError);
  EXPECT_EQ(read_file((run / "metrics.jsonl").string()), before);
}

TEST(TrainerTest, SmokeRunLearnsWellBelowUnigramEntropy) {
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "run");
  c.model.ctx = 64;
  c.model.d_model = 64;
  c.model.n_heads = 4;
  c.model.d_ff = 256;
  c.train.steps = 150;
  c.train.batch_size = 16;
  c.train.log_every = 50;
  c.train.checkpoint_every = 1000;
  c.eval.every = 0;
  c.eval.max_windows = 32;
  c.optim.lr = 3e-3;
  c.optim.warmup = 20;
  ASSERT_EQ(train(testing::resolved(c), {}), 0);
  auto ev = testing::records(c.out_dir, "eval");
  ASSERT_EQ(ev.size(), 2u);
  const double unigram = 3.6659;  // data/toy/floor.json, val
  EXPECT_GT(ev[0]["val_loss"].as<double>(), 5.0);  // ~ln 256 at init
  EXPECT_LT(ev[1]["val_loss"].as<double>(), unigram - 1.0) << "val loss " << ev[1]["val_loss"].as<double>();
}

// eval.by_task: every eval record carries the loss per task of the toy corpus's lines, the
// predicted tokens of each, and the task losses weighted by their tokens give the record's
// val_loss back; without it no record has the key. A corpus read as tokens is refused, naming the key.
TEST(TrainerTest, EvalByTaskRecordsTheLossPerTask) {
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "run");
  c.eval.by_task = true;
  ASSERT_EQ(train(testing::resolved(c), {}), 0);
  const auto ev = testing::records(c.out_dir, "eval");
  ASSERT_EQ(ev.size(), 3u);  // steps 0, 10, 20
  for (const auto& e : ev) {
    SCOPED_TRACE("step " + e["step"].as<std::string>());
    ASSERT_TRUE(e["by_task"] && e["by_task"].IsMap());
    for (const char* task : {"w", "c", "r", "b", "k"}) EXPECT_TRUE(e["by_task"][task]) << task;
    int64_t tokens = 0;
    double sum = 0;
    for (const auto& kv : e["by_task"]) {
      tokens += kv.second["tokens"].as<int64_t>();
      sum += kv.second["tokens"].as<int64_t>() * kv.second["loss"].as<double>();
    }
    EXPECT_EQ(tokens, c.eval.max_windows * c.model.ctx);  // every target of every window, once
    EXPECT_NEAR(sum / static_cast<double>(tokens), e["val_loss"].as<double>(), 1e-5 * e["val_loss"].as<double>());
  }
  // Read back as the report reads them.
  const RunRecords r = read_run(c.out_dir);
  ASSERT_EQ(r.eval.size(), 3u);
  EXPECT_EQ(r.eval[2].by_task.size(), ev[2]["by_task"].size());
  EXPECT_DOUBLE_EQ(r.eval[2].by_task.at("c").loss, ev[2]["by_task"]["c"]["loss"].as<double>());
  // `normlab report` prints the last evaluation's split; a run without it prints none.
  EXPECT_NE(report_text(c.out_dir).find(fmt::format("c {:.4f}", ev[2]["by_task"]["c"]["loss"].as<double>())),
            std::string::npos)
      << report_text(c.out_dir);
  // The last record's split is `normlab eval --by-task` of the step-20 checkpoint.
  const EvalResult again = evaluate_run(c.out_dir, 20, "", torch::kCPU, /*by_task=*/true);
  ASSERT_EQ(again.by_task.size(), ev[2]["by_task"].size());
  for (const auto& [name, t] : again.by_task) {
    EXPECT_EQ(ev[2]["by_task"][name]["tokens"].as<int64_t>(), t.tokens) << name;
    EXPECT_NEAR(ev[2]["by_task"][name]["loss"].as<double>(), t.loss, 1e-6 * t.loss) << name;
  }

  Config plain = testing::tiny_config(dir / "plain");
  plain.train.steps = 10;
  ASSERT_EQ(train(testing::resolved(plain), {}), 0);
  for (const auto& e : testing::records(plain.out_dir, "eval")) EXPECT_FALSE(e["by_task"]);
  EXPECT_EQ(report_text(plain.out_dir).find("by task"), std::string::npos);

  // Tokens, not bytes: two-byte tokens below 256, read as u16.
  std::vector<uint16_t> toks(4000);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<uint16_t>(i % 50);
  std::ofstream(dir / "t.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(toks.data()), static_cast<std::streamsize>(toks.size() * 2));
  Config tokens_cfg = testing::tiny_config(dir / "tokens");
  tokens_cfg.data.train = {dir / "t.bin"};
  tokens_cfg.data.val = {dir / "t.bin"};
  tokens_cfg.data.format = TokenFormat::kU16;
  tokens_cfg.eval.by_task = true;
  // The config check says so before anything runs (a sweep checks every point with it) ...
  try {
    testing::resolved(tokens_cfg);
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("eval.by_task: '"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("needs a byte-level corpus"), std::string::npos) << e.what();
  }
  // ... and a run whose data files were not checked stops where it takes its data.
  try {
    train(check_and_resolve(LoadedConfig{tokens_cfg, {}}, /*check_data_files=*/false), {});
    ADD_FAILURE() << "expected a UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("eval.by_task: "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("needs a byte-level corpus"), std::string::npos) << e.what();
  }
}

namespace fs = std::filesystem;

// A run of the tiny config that wrote its checkpoints at steps 10 and 20.
Config finished_run(const testing::TempDir& dir) {
  Config c = testing::tiny_config(dir / "run");
  EXPECT_EQ(train(testing::resolved(c), {}), 0);
  return c;
}

TEST(TrainerRunDirTest, ASecondWriterIsRefusedWhileTheFirstRuns) {
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "run");
  c.train.steps = 100000;  // runs until killed
  c.eval.every = 0;
  const std::string cfg_path = dir / "cfg.yaml";
  std::ofstream(cfg_path) << dump_config(testing::resolved(c));
  const std::string bin = testing::normlab_binary();
  const pid_t first = ::fork();
  ASSERT_GE(first, 0);
  if (first == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 2);
    ::execl(bin.c_str(), bin.c_str(), "train", "-c", cfg_path.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait until the first writer has started its steps.
  for (int i = 0; i < 600 && testing::records(c.out_dir, "train").size() < 2; ++i) ::usleep(50000);
  ASSERT_GE(testing::records(c.out_dir, "train").size(), 2u);
  for (const char* extra : {"", " --resume"}) {
    // Bounded: a second writer that is let in trains toward 100000 steps; killed after 30 s it
    // fails this test at once instead of holding it until the test runner's timeout.
    auto r = testing::run_command("timeout -s KILL 30 " + bin + " train -c " + cfg_path + extra, dir / "err.txt");
    EXPECT_EQ(r.status, 2) << extra;
    const std::string err = read_file(dir / "err.txt");
    EXPECT_EQ(err, "error: " + c.out_dir + ": another normlab train is writing to this run directory "
                   "(run.lock is held)\n") << extra;
  }
  ::kill(first, SIGKILL);
  int status = 0;
  ::waitpid(first, &status, 0);
}

TEST(TrainerRunDirTest, ARunThatStoppedBeforeItsFirstCheckpointStartsOver) {
  for (bool resume : {false, true}) {
    testing::TempDir dir;
    Config c = testing::tiny_config(dir / "run");
    // What a start killed before its first checkpoint leaves: config, log, some records, a
    // half-written checkpoint directory and an atomic write's temporary.
    fs::create_directories(dir / "run/checkpoints/.step_00000010.tmp");
    std::ofstream(dir / "run/config.yaml") << dump_config(testing::resolved(c));
    std::ofstream(dir / "run/metrics.jsonl") << "{\"kind\":\"eval\",\"step\":0,\"val_loss\":5.5}\n"
                                             << "{\"kind\":\"train\",\"step\":0,\"loss\":5.5}\n{\"kind";
    std::ofstream(dir / "run/checkpoints/LATEST.tmp.99999") << "step_00000010\n";
    TrainOptions o;
    o.resume = resume;
    ASSERT_EQ(train(testing::resolved(c), o), 0) << "resume " << resume;
    auto tr = testing::records(c.out_dir, "train");
    ASSERT_EQ(tr.size(), 20u);
    EXPECT_EQ(testing::records(c.out_dir, "eval").size(), 3u);  // 0, 10, 20: none left over
    EXPECT_FALSE(fs::exists(dir / "run/checkpoints/.step_00000010.tmp"));
    EXPECT_FALSE(fs::exists(dir / "run/checkpoints/LATEST.tmp.99999"));
    EXPECT_EQ(find_checkpoint(c.out_dir, std::nullopt), c.out_dir + "/checkpoints/step_00000020");
  }
}

TEST(TrainerRunDirTest, AFailedResumeChangesNothingAndNamesEveryRefusedKey) {
  testing::TempDir dir;
  Config c = finished_run(dir);
  const std::string cfg_before = read_file(dir / "run/config.yaml");
  const std::string metrics_before = read_file(dir / "run/metrics.jsonl");
  Config changed = c;
  changed.train.steps = 30;
  changed.model.d_model = 64;
  changed.train.batch_size = 8;
  TrainOptions o;
  o.resume = true;
  try {
    train(testing::resolved(changed), o);
    FAIL() << "resume accepted";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 2u);
    EXPECT_NE(e.problems()[0].find(": --resume: model.d_model: is 64 but the run has 32 "
                                   "(checkpoints/step_00000020); only these keys may change on resume: "
                                   "out_dir, data.val, data.format, data.tokenizer, optim.*, train.steps"), std::string::npos)
        << e.problems()[0];
    EXPECT_NE(e.problems()[1].find("train.batch_size: is 8 but the run has 4"), std::string::npos)
        << e.problems()[1];
  }
  EXPECT_EQ(read_file(dir / "run/config.yaml"), cfg_before);
  EXPECT_EQ(read_file(dir / "run/metrics.jsonl"), metrics_before);

  // Keys of the schedule and its length may change: the run continues to step 30.
  Config longer = c;
  longer.train.steps = 30;
  longer.optim.lr = 1e-3;
  longer.train.log_every = 2;
  EXPECT_EQ(train(testing::resolved(longer), o), 0);
  EXPECT_EQ(find_checkpoint(c.out_dir, std::nullopt), c.out_dir + "/checkpoints/step_00000030");
  EXPECT_NE(read_file(dir / "run/config.yaml").find("steps: 30"), std::string::npos);
}

TEST(TrainerRunDirTest, ResumingNothingCreatesNothing) {
  testing::TempDir dir;
  TrainOptions o;
  o.resume = true;
  try {
    train(testing::resolved(testing::tiny_config(dir / "none")), o);
    FAIL() << "resumed nothing";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("nothing to resume"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "none"));
}

TEST(TrainerRunDirTest, ResumingAFinishedRunWritesNothing) {
  testing::TempDir dir;
  Config c = finished_run(dir);
  const std::string metrics = read_file(dir / "run/metrics.jsonl"), log = read_file(dir / "run/train.log");
  TrainOptions o;
  o.resume = true;
  EXPECT_EQ(train(testing::resolved(c), o), 0);
  EXPECT_EQ(read_file(dir / "run/metrics.jsonl"), metrics);
  EXPECT_EQ(read_file(dir / "run/train.log"), log);
}

TEST(TrainerRunDirTest, AFullDiskStopsTheRunWithOneLineAndNoTornRecord) {
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "run");
  c.train.steps = 200;
  c.train.checkpoint_every = 1000;  // the first checkpoint would come at the end
  const std::string cfg_path = dir / "cfg.yaml";
  std::ofstream(cfg_path) << dump_config(testing::resolved(c));
  // A 16 KiB file size limit: metrics.jsonl outgrows it after a few dozen records.
  auto r = testing::run_command("bash -c 'ulimit -f 16; trap \"\" XFSZ; exec " + testing::normlab_binary() +
                                    " train -c " + cfg_path + "'",
                                dir / "err.txt");
  const std::string err = read_file(dir / "err.txt");
  EXPECT_EQ(r.status, 1) << err;
  const std::string last = err.substr(err.rfind('\n', err.size() - 2) + 1);
  EXPECT_EQ(last, "error: cannot write " + c.out_dir + "/metrics.jsonl: File too large\n") << err;
  const std::string text = read_file(dir / "run/metrics.jsonl");
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  for (const auto& rec : testing::records(c.out_dir, "train")) EXPECT_TRUE(rec["loss"].IsDefined());
  EXPECT_EQ(err.find("done:"), std::string::npos) << err;
}

}  // namespace
}  // namespace normlab
