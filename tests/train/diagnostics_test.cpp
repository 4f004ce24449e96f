// Diagnostics end to end: the train record's fields, spikes on a corpus with a block of random
// bytes, the skip / stop actions, non-finite protection, CSV sink and report.
#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "config/load.h"
#include "core/errors.h"
#include "core/fs.h"
#include "metrics/report.h"
#include "data/corpus.h"
#include "model/transformer.h"
#include "train/checkpoint.h"
#include "train/run_config.h"
#include "train/trainer.h"
#include "test_util.h"

namespace normlab {
namespace {
namespace fs = std::filesystem;


TEST(DiagnosticsTest, TrainRecordsCarryEveryContractField) {
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "run");
  c.model.n_layers = 3;
  c.train.steps = 6;
  c.train.log_every = 2;
  c.diag.every = 3;
  c.diag.per_param = true;
  c.diag.csv = true;
  ASSERT_EQ(train(testing::resolved(c), {}), 0);
  auto tr = testing::records(c.out_dir, "train");
  std::vector<int> steps;
  for (auto& r : tr) steps.push_back(r["step"].as<int>());
  EXPECT_EQ(steps, (std::vector<int>{0, 2, 3, 4, 5}));  // log_every 2, diag every 3, and the last
  const auto& d = tr[2];  // step 3: a diagnostics step
  for (const char* k : {"loss", "lr", "grad_norm", "param_norm", "tokens", "tok_per_s", "grad_norm_embed",
                        "grad_norm_head", "logit_max", "lse_mean", "params"}) {
    EXPECT_TRUE(d[k].IsDefined()) << k;
  }
  const auto& L = d["layers"];
  for (const char* k : {"grad_norm", "grad_norm_attn", "grad_norm_ffn", "grad_norm_norms", "update_ratio",
                        "attn_entropy", "attn_logit_max"}) {
    EXPECT_EQ(L[k].size(), 3u) << k;
  }
  EXPECT_EQ(L["act_rms"].size(), 4u);
  for (const auto& e : L["attn_entropy"]) {
    EXPECT_GE(e.as<double>(), 0.0);
    EXPECT_LE(e.as<double>(), std::log(32.0));
  }
  EXPECT_GT(d["lse_mean"].as<double>(), std::log(256.0) - 1.0);  // near-uniform early on
  EXPECT_NEAR(d["params"]["blocks.0.attn.q_proj.weight"].as<double>(), d["params"]["blocks.0.attn.q_proj.weight"].as<double>(), 0);
  EXPECT_FALSE(tr[1]["param_norm"].IsDefined());  // step 2: not a diagnostics step
  // Long-format CSV with one row per leaf.
  const std::string csv = read_file(c.out_dir + "/metrics.csv");
  EXPECT_EQ(csv.rfind("step,kind,key,value\n", 0), 0u);
  EXPECT_NE(csv.find("\n3,train,layers.act_rms.3,"), std::string::npos);
  EXPECT_NE(csv.find(",eval,val_loss,"), std::string::npos);
}

// Toy text with a block of random bytes at a known place, read in order (shuffle off).
std::string spiky_corpus(const testing::TempDir& dir, int64_t block_start, int64_t block_len) {
  const std::string text = read_file(testing::source_dir() + "/data/toy/train.txt").substr(0, 40000);
  std::string out = text.substr(0, block_start);
  std::mt19937 rng(7);
  for (int64_t i = 0; i < block_len; ++i) out += static_cast<char>(rng() % 256);
  out += text.substr(block_start);
  write_file_atomic(dir / "spiky.txt", out);
  return dir / "spiky.txt";
}

Config spiky_config(const testing::TempDir& dir, const std::string& action) {
  Config c = testing::tiny_config(dir / ("run_" + action));
  // Each step reads B*ctx = 128 tokens in order; the random block covers steps 60 and 61.
  c.data.train = {spiky_corpus(dir, 60 * 128, 256)};
  c.data.shuffle = false;
  c.train.steps = 66;
  c.train.log_every = 1;
  c.train.checkpoint_every = 1;
  c.eval.every = 0;
  c.optim.lr = 3e-3;
  c.diag.every = 1000;
  c.diag.spike.window = 24;
  c.diag.spike.zscore = 6;
  c.diag.spike.action = *parse_choice<SpikeAction>(action);
  return c;
}

TEST(DiagnosticsTest, RandomByteBlockProducesSpikeRecordsAndForensics) {
  testing::TempDir dir;
  Config c = spiky_config(dir, "log");
  ASSERT_EQ(train(testing::resolved(c), {}), 0);
  auto spikes = testing::records(c.out_dir, "spike");
  ASSERT_FALSE(spikes.empty());
  std::set<int> steps;
  for (auto& s : spikes) {
    steps.insert(s["step"].as<int>());
    EXPECT_GT(s["z"].as<double>(), 6.0);
    EXPECT_EQ(s["action"].as<std::string>(), "log");
  }
  EXPECT_TRUE(steps.count(60)) << "spike steps: " << *steps.begin();
  for (int s : steps) EXPECT_TRUE(s >= 60 && s <= 62) << s;  // no false positives elsewhere
  const std::string f = c.out_dir + "/spikes/step_00000060.json";
  ASSERT_TRUE(file_exists(f));
  YAML::Node j = YAML::Load(read_file(f));
  EXPECT_GT(j["loss"]["z"].as<double>(), 6.0);
  EXPECT_EQ(j["batch"]["micro_batches"][0]["offsets"][0].as<int64_t>(), 60 * 128);  // replayable
  EXPECT_EQ(j["layers"].size(), 4u);  // 2 blocks, embed, head
  EXPECT_EQ(j["layers_by_jump"].size(), 4u);
  EXPECT_GE(j["layers_by_jump"][0]["relative_jump"].as<double>(), j["layers_by_jump"][1]["relative_jump"].as<double>());
  auto tr = testing::records(c.out_dir, "train");
  EXPECT_TRUE(tr[60]["loss_z"].IsDefined());
  EXPECT_FALSE(tr[10]["loss_z"].IsDefined());  // baseline of 24 not full yet
  EXPECT_NE(report_text(c.out_dir).find("step     60"), std::string::npos) << report_text(c.out_dir);
}

TEST(DiagnosticsTest, SkipLeavesWeightsAndOptimizerStateBitwiseUnchanged) {
  testing::TempDir dir;
  Config c = spiky_config(dir, "skip");
  ASSERT_EQ(train(testing::resolved(c), {}), 0);
  auto tr = testing::records(c.out_dir, "train");
  ASSERT_TRUE(tr[60]["skipped"].IsDefined());
  // Checkpoint after 60 iterations vs after 61 (step 60 skipped): identical bytes.
  const std::string a = c.out_dir + "/checkpoints/step_00000060/", b = c.out_dir + "/checkpoints/step_00000061/";
  EXPECT_EQ(read_file(a + "model.safetensors"), read_file(b + "model.safetensors"));
  EXPECT_EQ(read_file(a + "trainer.safetensors"), read_file(b + "trainer.safetensors"));
  YAML::Node sa = YAML::Load(read_file(a + "state.json")), sb = YAML::Load(read_file(b + "state.json"));
  EXPECT_EQ(sa["optimizer_steps"].as<int>(), sb["optimizer_steps"].as<int>());
  EXPECT_EQ(sb["skipped"].as<int>(), sa["skipped"].as<int>() + 1);
  EXPECT_NE(report_text(c.out_dir).find("skipped updates"), std::string::npos);
}

TEST(DiagnosticsTest, StopCheckpointsTheWeightsBeforeTheSpikeAndEndsWithAMessage) {
  testing::TempDir dir;
  Config c = spiky_config(dir, "stop");
  try {
    train(testing::resolved(c), {});
    FAIL() << "expected the run to stop";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("stopped at step 60 by a loss spike"), std::string::npos) << e.what();
  }
  EXPECT_EQ(find_checkpoint(c.out_dir, std::nullopt), c.out_dir + "/checkpoints/step_00000060");
  EXPECT_TRUE(file_exists(c.out_dir + "/spikes/step_00000060.json"));
}

TEST(DiagnosticsTest, AbsurdLearningRateEndsClearlyAndNeverSavesNonFiniteWeights) {
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "run");
  c.optim.lr = 1e6;
  c.optim.warmup = 0;
  c.optim.grad_clip = 0;
  c.train.steps = 40;
  c.train.checkpoint_every = 1;
  c.model.norm.type = "none";
  try {
    train(testing::resolved(c), {});
    FAIL() << "expected a non-finite stop";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("not finite"), std::string::npos) << e.what();
  }
  int checked = 0;
  for (const auto& e : fs::directory_iterator(c.out_dir + "/checkpoints")) {
    if (!e.is_directory()) continue;
    Config cfg = testing::resolved(c);
    Transformer m(cfg.model);
    load_model_weights(e.path().string(), m);
    for (auto& [n, t] : model_tensors(m)) EXPECT_TRUE(torch::isfinite(t).all().item<bool>()) << e.path() << " " << n;
    ++checked;
  }
  EXPECT_GT(checked, 0);
  // skip mode carries on past non-finite steps instead.
  Config s = c;
  s.out_dir = dir / "skip";
  s.diag.nonfinite = NonFinitePolicy::kSkip;
  s.train.steps = 12;
  EXPECT_EQ(train(testing::resolved(s), {}), 0);
}

TEST(ReportTest, SummarisesLossesAndGradientProfilesAsTextAndJson) {
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "run");
  c.train.steps = 10;
  ASSERT_EQ(train(testing::resolved(c), {}), 0);
  const std::string t = report_text(c.out_dir);
  for (const char* k : {"val loss", "best", "excess over floor", "per-layer gradient norm", "blocks.1", "first/last"}) {
    EXPECT_NE(t.find(k), std::string::npos) << k << "\n" << t;
  }
  YAML::Node j = YAML::Load(report_json(c.out_dir));
  EXPECT_EQ(j["grad_norm_profiles"].size(), 3u);
  EXPECT_EQ(j["grad_norm_profiles"][0]["step"].as<int>(), 0);
  EXPECT_EQ(j["grad_norm_profiles"][2]["step"].as<int>(), 9);
  EXPECT_EQ(j["last_step"].as<int>(), 9);
  auto ev = testing::records(c.out_dir, "eval");
  EXPECT_EQ(j["final_val_loss"].as<std::string>(), ev.back()["val_loss"].as<std::string>());
  EXPECT_THROW(report_text(dir / "nope"), UsageError);
}

}  // namespace
}  // namespace normlab

namespace normlab {
namespace {

// The step-0 record's per-layer gradient norms are those of a direct computation: the saved
// initial weights, the first batch, one backward, norms over named_parameters().
TEST(DiagnosticsTest, StepZeroProfileEqualsDirectComputationForPreAndPost) {
  for (const char* layout : {"pre", "post"}) {
    testing::TempDir dir;
    Config c = testing::tiny_config(dir / "run");
    c.model.layout = layout;
    c.model.n_layers = 4;
    c.train.steps = 1;
    c.train.save_init = true;
    Config r = check_and_resolve(LoadedConfig{c, {}}, true);
    ASSERT_EQ(train(r, {}), 0);
    auto rec = testing::records(c.out_dir, "train").at(0);

    Transformer m(r.model);
    load_model_weights(c.out_dir + "/checkpoints/step_00000000", m);
    m->train();
    Corpus data = Corpus::load(r.data.train);
    auto w = data.windows(batch_offsets(data.size(), r.model.ctx, r.train.batch_size, 0, true, r.seed), r.model.ctx);
    auto logits = m->forward(w.narrow(1, 0, r.model.ctx));
    torch::nn::functional::cross_entropy(logits.reshape({-1, 256}), w.narrow(1, 1, r.model.ctx).reshape({-1})).backward();
    for (int i = 0; i < 4; ++i) {
      double sq = 0;
      for (auto& kv : m->named_parameters()) {
        if (kv.key().rfind("blocks." + std::to_string(i) + ".", 0) == 0) sq += kv.value().grad().pow(2).sum().item<double>();
      }
      EXPECT_NEAR(rec["layers"]["grad_norm"][i].as<double>(), std::sqrt(sq), 1e-5 * std::sqrt(sq)) << layout << " block " << i;
    }
  }
}

}  // namespace
}  // namespace normlab
