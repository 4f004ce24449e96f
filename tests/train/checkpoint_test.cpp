#include "train/checkpoint.h"

#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

#include <cstring>
#include <filesystem>

#include "config/load.h"
#include "core/errors.h"
#include "core/fs.h"
#include "test_util.h"

namespace normlab {
namespace {

TEST(SafetensorsTest, FileLayoutIsLengthHeaderThenLittleEndianF32) {
  auto a = torch::arange(6, torch::kFloat).reshape({2, 3});
  auto b = torch::tensor({-1.5f});
  const std::string bytes = safetensors_bytes({{"a", a}, {"b", b}}, {{"format", "normlab"}});
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  ASSERT_EQ(bytes.size(), 8 + n + 7 * sizeof(float));
  EXPECT_EQ((8 + n) % 8, 0u);
  YAML::Node h = YAML::Load(bytes.substr(8, n));
  EXPECT_EQ(h["__metadata__"]["format"].as<std::string>(), "normlab");
  EXPECT_EQ(h["a"]["dtype"].as<std::string>(), "F32");
  EXPECT_EQ(h["a"]["shape"][1].as<int>(), 3);
  EXPECT_EQ(h["b"]["data_offsets"][0].as<int>(), 24);
  EXPECT_EQ(h["b"]["data_offsets"][1].as<int>(), 28);
  float v;
  std::memcpy(&v, bytes.data() + 8 + n + 24, 4);
  EXPECT_EQ(v, -1.5f);
}

TEST(SafetensorsTest, RoundTripAndCorruptionIsReported) {
  testing::TempDir dir;
  auto a = torch::randn({4, 5});
  const std::string cfg = "model:\n  d_model: \"x\\ny\"\n";
  write_file_atomic(dir / "t.safetensors", safetensors_bytes({{"w.x", a}}, {{"config", cfg}}));
  auto f = read_safetensors(dir / "t.safetensors");
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].first, "w.x");
  EXPECT_TRUE(torch::equal(f.tensors[0].second, a));
  EXPECT_EQ(f.metadata["config"], cfg);
  write_file_atomic(dir / "bad.safetensors", std::string("\xff\xff\xff\xff\0\0\0\0{}", 10));
  EXPECT_THROW(read_safetensors(dir / "bad.safetensors"), RuntimeFailure);
}

TEST(CheckpointTest, SaveLoadRoundTripWithContractLayout) {
  testing::TempDir dir;
  Config c = testing::tiny_config(dir.path());
  c.model.norm.type = "batchnorm";  // has buffers, which must be saved too
  resolve_model_config(c.model);
  torch::manual_seed(1);
  Transformer m(c.model);
  init_weights(m, c.init);
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (auto& kv : m->named_parameters()) named.emplace_back(kv.key(), kv.value());
  AdamW opt(named, c.optim);
  for (auto& [n, p] : named) p.mutable_grad() = torch::randn_like(p);
  opt.step(1e-3);
  {
    torch::NoGradGuard ng;
    m->block(0)->norm_module("norm1")->named_buffers()["running_mean"].fill_(0.25);
  }
  TrainState st;
  st.step = 7;
  st.micro_batches = 7;
  st.tokens = 896;
  st.best_val = 2.5;
  st.torch_rng = torch_rng_state_hex();
  save_checkpoint(c.out_dir, m, &opt, st, dump_config(c));

  namespace fs = std::filesystem;
  const fs::path ck = fs::path(c.out_dir) / "checkpoints" / "step_00000007";
  EXPECT_TRUE(fs::exists(ck / "model.safetensors"));
  EXPECT_TRUE(fs::exists(ck / "trainer.safetensors"));
  EXPECT_TRUE(fs::exists(ck / "state.json"));
  EXPECT_EQ(read_file((fs::path(c.out_dir) / "checkpoints" / "LATEST").string()), "step_00000007\n");
  for (const auto& e : fs::directory_iterator(fs::path(c.out_dir) / "checkpoints")) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
  EXPECT_EQ(find_checkpoint(c.out_dir, std::nullopt), ck.string());
  EXPECT_THROW(find_checkpoint(c.out_dir, 8), UsageError);

  auto cfg2 = parse_config_text(checkpoint_config(ck.string()), "ckpt").config;
  Transformer m2(cfg2.model);
  load_model_weights(ck.string(), m2);
  auto t1 = model_tensors(m), t2 = model_tensors(m2);
  ASSERT_EQ(t1.size(), t2.size());
  for (size_t i = 0; i < t1.size(); ++i) {
    EXPECT_EQ(t1[i].first, t2[i].first);
    EXPECT_TRUE(torch::equal(t1[i].second, t2[i].second)) << t1[i].first;
  }
  std::vector<std::pair<std::string, torch::Tensor>> named2;
  for (auto& kv : m2->named_parameters()) named2.emplace_back(kv.key(), kv.value());
  AdamW opt2(named2, c.optim);
  TrainState st2;
  load_trainer_state(ck.string(), opt2, st2);
  EXPECT_EQ(st2.step, 7);
  EXPECT_EQ(st2.tokens, 896);
  EXPECT_DOUBLE_EQ(st2.best_val, 2.5);
  EXPECT_EQ(st2.torch_rng, st.torch_rng);
  EXPECT_EQ(opt2.steps_taken(), 1);
  for (size_t i = 0; i < opt.state().size(); ++i) {
    EXPECT_TRUE(torch::equal(opt.state()[i].second, opt2.state()[i].second));
  }

  // A model of another shape is refused with the tensor's name.
  Config other = c;
  other.model.d_model = 64;
  Transformer m3(other.model);
  EXPECT_THROW(load_model_weights(ck.string(), m3), RuntimeFailure);
}

}  // namespace
}  // namespace normlab
