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
  Optimizer opt(named, c.optim);
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
  Optimizer opt2(named2, c.optim);
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

// A saved checkpoint of a tiny model, with the objects to load it back into.
struct Saved {
  testing::TempDir dir;
  Config c;
  Transformer model{nullptr};
  std::unique_ptr<Optimizer> opt;
  std::string ckpt;

  explicit Saved(int64_t step = 7) {
    c = testing::tiny_config(dir.path());
    resolve_model_config(c.model);
    torch::manual_seed(1);
    model = Transformer(c.model);
    init_weights(model, c.init);
    opt = std::make_unique<Optimizer>(named(), c.optim);
    TrainState st;
    st.step = step;
    st.micro_batches = step;
    st.torch_rng = torch_rng_state_hex();
    save_checkpoint(c.out_dir, model, opt.get(), st, dump_config(c));
    ckpt = find_checkpoint(c.out_dir, std::nullopt);
  }
  std::vector<std::pair<std::string, torch::Tensor>> named() {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (auto& kv : model->named_parameters()) out.emplace_back(kv.key(), kv.value());
    return out;
  }
  // The RuntimeFailure message of loading the trainer state after replacing `from` by `to` in
  // state.json ("" when it loads).
  std::string load_state_with(const std::string& from, const std::string& to) {
    const std::string path = ckpt + "/state.json";
    std::string text = read_file(path);
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from << " not in " << text;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    write_file_atomic(path, text);
    TrainState st;
    try {
      load_trainer_state(ckpt, *opt, st);
    } catch (const RuntimeFailure& e) {
      return e.what();
    }
    return "";
  }
};

TEST(CheckpointTest, StateJsonValuesAreChecked) {
  struct Case {
    const char* from;
    const char* to;
    const char* error;
  };
  for (const Case& k : {Case{"\"step\":7", "\"step\":-5", "step -5 is negative"},
                        Case{"\"micro_batches\":7", "\"micro_batches\":-1", "data.micro_batches -1 is negative"},
                        Case{"\"step\":7", "\"step\":8", "step 8 does not match the directory step_00000007"},
                        Case{"\"skipped\":0", "\"skipped\":9", "skipped 9 is not in [0, step 7]"},
                        Case{"\"torch_cpu\":\"", "\"torch_cpu\":\"zz", "RNG state: expected"}}) {
    Saved s;
    const std::string e = s.load_state_with(k.from, k.to);
    EXPECT_NE(e.find(k.error), std::string::npos) << k.to << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  Saved ok;
  EXPECT_EQ(ok.load_state_with("\"step\":7", "\"step\":7"), "");
}

TEST(CheckpointTest, BadRngStateIsOneLineNotALibTorchTrace) {
  try {
    set_torch_rng_state_hex("00ff");
    FAIL() << "accepted";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("RNG state: expected"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
  const std::string good = torch_rng_state_hex();
  EXPECT_NO_THROW(set_torch_rng_state_hex(good));
}

TEST(CheckpointTest, NonFiniteWeightsAreRejectedOnLoad) {
  Saved s;
  auto f = read_safetensors(s.ckpt + "/model.safetensors");
  f.tensors[1].second.view(-1)[0] = std::nanf("");
  write_file_atomic(s.ckpt + "/model.safetensors", safetensors_bytes(f.tensors, f.metadata));
  Transformer m(s.c.model);
  try {
    load_model_weights(s.ckpt, m);
    FAIL() << "NaN weights loaded";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("tensor " + f.tensors[1].first + " holds NaN or infinite values"),
              std::string::npos) << e.what();
  }
}

TEST(CheckpointTest, AWrongShapeNamesBothShapes) {
  Saved s;
  Config other = s.c;
  other.model.d_model = 64;
  Transformer m(other.model);
  try {
    load_model_weights(s.ckpt, m);
    FAIL() << "loaded";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("has shape 256x32 but the config gives 256x64"), std::string::npos)
        << e.what();
  }
}

// Re-saving the step LATEST names (a stop right after a checkpoint) replaces it whole.
TEST(CheckpointTest, ResavingTheLatestStepReplacesItWhole) {
  Saved s;
  TrainState st;
  st.step = 7;
  st.micro_batches = 9;  // the stop consumed two more micro-batches
  st.torch_rng = torch_rng_state_hex();
  save_checkpoint(s.c.out_dir, s.model, s.opt.get(), st, dump_config(s.c));
  EXPECT_EQ(find_checkpoint(s.c.out_dir, std::nullopt), s.ckpt);
  TrainState back;
  load_trainer_state(s.ckpt, *s.opt, back);
  EXPECT_EQ(back.micro_batches, 9);
  for (const auto& e : std::filesystem::directory_iterator(s.c.out_dir + "/checkpoints")) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
}

// Tensors whose data_offsets share bytes (or leave bytes to no tensor) are not a valid file.
TEST(SafetensorsTest, OverlappingOrHoleyDataOffsetsAreRejected) {
  testing::TempDir dir;
  auto header_file = [&](const std::string& header, size_t data_bytes) {
    std::string h = header;
    while (h.size() % 8) h += ' ';
    const uint64_t n = h.size();
    std::string bytes(reinterpret_cast<const char*>(&n), 8);
    bytes += h + std::string(data_bytes, '\0');
    write_file_atomic(dir / "t.safetensors", bytes);
    try {
      read_safetensors(dir / "t.safetensors");
    } catch (const RuntimeFailure& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(header_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16), "");
  EXPECT_NE(header_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 16)
                .find("data_offsets overlap another tensor's"), std::string::npos);
  EXPECT_NE(header_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8)
                .find("overlap"), std::string::npos);
  EXPECT_NE(header_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8)
                .find("bytes 0..4 of the data belong to no tensor"), std::string::npos);
  EXPECT_NE(header_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4)
                .find("negative dimension"), std::string::npos);
  EXPECT_NE(header_file(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,4]}})", 4)
                .find("bad data_offsets"), std::string::npos);
}

}  // namespace
}  // namespace normlab
