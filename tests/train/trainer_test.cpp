#include "train/trainer.h"

#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

#include <fstream>

#include "config/load.h"
#include "core/errors.h"
#include "core/fs.h"
#include "train/checkpoint.h"
#include "train/run_config.h"
#include "test_util.h"

namespace normlab {
namespace {

Config resolved(Config c) { return check_and_resolve(LoadedConfig{c, {}}, true); }

TEST(TrainerTest, ResumedRunIsBitwiseIdenticalToUninterrupted) {
  testing::TempDir dir;
  Config full = testing::tiny_config(dir / "full");
  full.train.accum = 2;  // data position must count micro-batches
  ASSERT_EQ(train(resolved(full), {}), 0);

  // The same run interrupted (Ctrl-C) after its first update, then resumed to the end through
  // checkpoints at other steps: the later losses must not differ in a single bit.
  Config part = full;
  part.out_dir = dir / "part";
  part.train.checkpoint_every = 7;
  std::atomic<bool> stop{true};
  TrainOptions first;
  first.stop = &stop;
  EXPECT_EQ(train(resolved(part), first), kInterrupted);
  EXPECT_EQ(find_checkpoint(part.out_dir, std::nullopt), part.out_dir + "/checkpoints/step_00000001");
  TrainOptions rest;
  rest.resume = true;
  EXPECT_EQ(train(resolved(part), rest), 0);

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
  Config cfg = resolved(full);
  Transformer ma(cfg.model), mb(cfg.model);
  load_model_weights(find_checkpoint(dir / "full", std::nullopt), ma);
  load_model_weights(find_checkpoint(dir / "part", std::nullopt), mb);
  auto ta = model_tensors(ma), tb = model_tensors(mb);
  for (size_t i = 0; i < ta.size(); ++i) EXPECT_TRUE(torch::equal(ta[i].second, tb[i].second)) << ta[i].first;
}

TEST(TrainerTest, RunDirectoryFollowsTheContract) {
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "run");
  c.train.steps = 12;
  c.train.save_init = true;
  c.train.log_every = 5;
  ASSERT_EQ(train(resolved(c), {}), 0);
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
  EXPECT_THROW(train(resolved(c), {}), UsageError);
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
  ASSERT_EQ(train(resolved(c), {}), 0);
  auto ev = testing::records(c.out_dir, "eval");
  ASSERT_EQ(ev.size(), 2u);
  const double unigram = 3.6659;  // data/toy/floor.json, val
  EXPECT_GT(ev[0]["val_loss"].as<double>(), 5.0);  // ~ln 256 at init
  EXPECT_LT(ev[1]["val_loss"].as<double>(), unigram - 1.0) << "val loss " << ev[1]["val_loss"].as<double>();
}

}  // namespace
}  // namespace normlab
