// Every residual-stream method and value-residual mode trains through the trainer: finite losses
// that go down, a run interrupted after its first update and resumed equals the uninterrupted one
// bit for bit, checkpoints hold the method's tensors under their contract names, the diagnostics
// records carry the method's series, and bf16 autocast trains.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "config/load.h"
#include "model/transformer.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/run_config.h"
#include "train/trainer.h"

namespace normlab {
namespace {


struct Method {
  std::string name, residual;
  std::string vres = "none";
  int64_t attnres_block = 1;
  std::vector<std::string> series;  // layers.<series> on diagnostics steps
  std::string tensor;               // one tensor the checkpoint must hold
  std::string layout = "pre";
};

std::vector<Method> methods() {
  return {{"hc", "hc", "none", 1, {"res_gain_fwd", "res_gain_bwd"}, "blocks.1.hc2.alpha_fn"},
          {"mhc", "mhc", "none", 1, {"res_gain_fwd", "res_gain_bwd"}, "mhc_head.fn"},
          {"attnres_block", "attnres", "none", 2, {"act_rms"}, "final_attnres.query"},
          {"vres_token", "add", "token", 1, {"vres_lambda"}, "blocks.1.attn.vres_gate.weight"},
          {"vres_scalar_attnres", "attnres", "scalar", 1, {"vres_lambda"}, "blocks.1.attn.vres_lambda"},
          {"ngpt_vres_fixed", "add", "fixed", 1, {"ngpt_a1", "ngpt_a2", "vres_lambda"}, "s_z", "ngpt"},
          {"resi_dual", "add", "none", 1, {"act_rms"}, "final_norm.weight", "resi_dual"}};
}

Config method_config(const Method& m, const std::string& out) {
  Config c = testing::tiny_config(out);
  c.train.steps = 12;
  c.train.checkpoint_every = 5;
  c.diag.every = 4;
  c.model.residual.type = m.residual;
  c.model.value_residual = m.vres;
  c = fit_to_layout(*find_layout(m.layout), c);
  if (m.layout == "ngpt") c.optim.warmup = 0;
  if (m.residual == "attnres") c.model.residual.keys.set("residual.attnres_block", m.attnres_block);
  return c;
}

class ResidualTrainingTest : public ::testing::TestWithParam<Method> {};

TEST_P(ResidualTrainingTest, TrainsResumesBitForBitAndRecordsItsSeries) {
  const Method& m = GetParam();
  testing::TempDir dir;
  Config full = method_config(m, dir / "full");
  full.train.accum = 2;
  ASSERT_EQ(train(testing::resolved(full), {}), 0);
  Config part = full;
  part.out_dir = dir / "part";
  std::atomic<bool> stop{true};
  TrainOptions first;
  first.stop = &stop;
  EXPECT_EQ(train(testing::resolved(part), first), kInterrupted);
  TrainOptions rest;
  rest.resume = true;
  ASSERT_EQ(train(testing::resolved(part), rest), 0);

  auto a = testing::records(dir / "full", "train"), b = testing::records(dir / "part", "train");
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["loss"].as<std::string>(), b[i]["loss"].as<std::string>()) << m.name << " step " << i;
    EXPECT_TRUE(std::isfinite(a[i]["loss"].as<double>()));
  }
  EXPECT_LT(a.back()["loss"].as<double>(), a.front()["loss"].as<double>()) << m.name;
  for (const auto& s : m.series) {
    ASSERT_TRUE(a[4]["layers"][s]) << m.name << ": no layers." << s;
    EXPECT_EQ(a[4]["layers"][s].size(), s == "act_rms" ? 3u : 2u) << s;
  }
  Config cfg = testing::resolved(full);
  Transformer t(cfg.model);
  load_model_weights(find_checkpoint(full.out_dir, std::nullopt), t);
  bool found = false;
  for (const auto& kv : t->named_parameters()) found = found || kv.key() == m.tensor;
  EXPECT_TRUE(found) << m.tensor;
  if (m.layout != "ngpt") return;
  // nGPT: the listed matrices are unit-norm (over d) in every checkpoint, resumed run included.
  for (const std::string& run : {full.out_dir, part.out_dir}) {
    for (int64_t step : {int64_t{1}, int64_t{5}, int64_t{10}, int64_t{12}}) {
      const std::string ckpt = run + "/checkpoints/step_" + fmt::format("{:08d}", step);
      if (!std::filesystem::exists(ckpt)) continue;
      Transformer w(cfg.model);
      load_model_weights(ckpt, w);
      for (const auto& kv : w->named_parameters()) {
        const std::string& n = kv.key();
        if (kv.value().dim() != 2) continue;
        const bool cols = n.find("out_proj") != std::string::npos || n.find("fc2") != std::string::npos;
        const double off = (kv.value().norm(2, cols ? 0 : 1) - 1).abs().max().item<double>();
        EXPECT_LT(off, 1e-5) << ckpt << " " << n;
      }
    }
  }
}

TEST_P(ResidualTrainingTest, TrainsUnderBf16Autocast) {
  const Method& m = GetParam();
  testing::TempDir dir;
  Config c = method_config(m, dir / "bf16");
  c.train.steps = 6;
  c.train.precision = Precision::kBf16;
  ASSERT_EQ(train(testing::resolved(c), {}), 0);
  const auto r = testing::records(dir / "bf16", "train");
  ASSERT_EQ(r.size(), 6u);
  for (const auto& x : r) EXPECT_TRUE(std::isfinite(x["loss"].as<double>())) << m.name;
  EXPECT_LT(r.back()["loss"].as<double>(), r.front()["loss"].as<double>()) << m.name;
}

INSTANTIATE_TEST_SUITE_P(Methods, ResidualTrainingTest, ::testing::ValuesIn(methods()),
                         [](const auto& info) { return info.param.name; });

// Registry-wide: every residual type trains 20 steps under every layout it can wrap (the additive
// ones; add under every layout), finite losses throughout. A new type or layout is covered by
// being registered.
TEST(ResidualGridTest, EveryTypeTrainsUnderEveryLayoutItAccepts) {
  int trained = 0;
  for (const auto& r : residual_registry()) {
    for (const auto& l : layout_registry()) {
      testing::TempDir dir;
      Config c = testing::tiny_config(dir / "run");
      c = fit_to_layout(l, c);
      c.model.residual.type = r.name;
      c.model.n_layers = 2;
      ModelConfig probe = c.model;
      resolve_model_config(probe);
      if (r.wraps_terms() && !layout_is_additive(probe)) continue;  // a config error (ResidualConfigTest)
      c.train.steps = 20;
      c.train.log_every = 1;
      c.eval.every = 0;
      c.train.checkpoint_every = 1000;
      ASSERT_EQ(train(testing::resolved(c), {}), 0) << r.name << " / " << l.name;
      const auto records = testing::records(c.out_dir, "train");
      ASSERT_EQ(records.size(), 20u) << r.name << " / " << l.name;
      for (const auto& rec : records) {
        EXPECT_TRUE(std::isfinite(rec["loss"].as<double>())) << r.name << " / " << l.name;
      }
      // Every block's sublayers are in the forward the loss is computed from: their gradients are
      // not zero (a type that dropped a sublayer's term would train the embeddings and the head
      // alone, and its losses would still be finite and falling).
      for (const char* series : {"grad_norm_attn", "grad_norm_ffn"}) {
        const auto& g = records.front()["layers"][series];
        ASSERT_EQ(g.size(), 2u) << series;
        for (size_t i = 0; i < g.size(); ++i) {
          EXPECT_GT(g[i].as<double>(), 1e-8) << r.name << " / " << l.name << ": " << series << "[" << i << "]";
        }
      }
      EXPECT_LT(records.back()["loss"].as<double>(), records.front()["loss"].as<double>() - 0.1)
          << r.name << " / " << l.name << ": 20 updates did not lower the loss";
      ++trained;
    }
  }
  EXPECT_GE(trained, 12 + 3 * 6);  // add under 12 layouts, three wrapping types under 6 additive ones
}

}  // namespace
}  // namespace normlab
