#include "config/load.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/errors.h"
#include "train/run_config.h"
#include "test_util.h"

namespace normlab {
namespace {

std::vector<std::string> problems_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    auto loaded = parse_config_text(yaml, "cfg.yaml", overrides);
    check_and_resolve(loaded, /*check_data_files=*/false);
  } catch (const ConfigError& e) {
    return e.problems();
  }
  return {};
}

TEST(ConfigTest, EmptyFileGivesContractDefaults) {
  auto c = parse_config_text("", "cfg.yaml").config;
  EXPECT_EQ(c.seed, 1337);
  EXPECT_EQ(c.model.d_model, 128);
  EXPECT_EQ(c.model.layout, "pre");
  EXPECT_EQ(c.model.norm.type, "layernorm");
  EXPECT_FALSE(c.model.norm.eps.has_value());
  EXPECT_DOUBLE_EQ(c.optim.betas[1], 0.95);
  EXPECT_EQ(c.train.steps, 2000);
  EXPECT_EQ(c.diag.spike.window, 128);
  EXPECT_EQ(c.diag.spike.action, "log");
}

TEST(ConfigTest, ParsesNestedValuesOfEveryType) {
  auto c = parse_config_text(
               "model: {d_model: 64, n_heads: 2, norm: {type: rmsnorm, eps: 1.0e-4}, qk_norm: true}\n"
               "optim: {betas: [0.8, 0.99], lr: 3.0e-4}\n",
               "cfg.yaml")
               .config;
  EXPECT_EQ(c.model.d_model, 64);
  EXPECT_EQ(c.model.norm.type, "rmsnorm");
  ASSERT_TRUE(c.model.norm.eps.has_value());
  EXPECT_DOUBLE_EQ(*c.model.norm.eps, 1e-4);
  EXPECT_TRUE(c.model.qk_norm);
  EXPECT_DOUBLE_EQ(c.optim.betas[0], 0.8);
  EXPECT_DOUBLE_EQ(c.optim.lr, 3e-4);
}

TEST(ConfigTest, UnknownKeyNamesFileLineKeyAndExpectedKeys) {
  auto p = problems_of("seed: 1\nmodel:\n  d_modle: 64\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("cfg.yaml:3: model.d_modle: unknown key"), std::string::npos) << p[0];
  EXPECT_NE(p[0].find("d_model"), std::string::npos) << p[0];
}

TEST(ConfigTest, WrongTypeIsRejectedWithExpectation) {
  auto p = problems_of("train:\n  steps: many\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "cfg.yaml:2: train.steps: expected an integer, got 'many'");
}

TEST(ConfigTest, AllProblemsAreReportedAtOnce) {
  auto p = problems_of("model:\n  n_heads: 5\n  layout: upside_down\n  norm: {type: groupnorm}\n"
                       "optim: {schedule: wavy, lr: -1}\nbogus: 3\n");
  // unknown key is a parse problem and is reported alone first; fix it and the value rules appear
  ASSERT_EQ(p.size(), 1u);
  p = problems_of("model:\n  n_heads: 5\n  layout: upside_down\n  norm: {type: groupnorm}\n"
                  "optim: {schedule: wavy, lr: -1}\n");
  ASSERT_EQ(p.size(), 5u);
  std::string all;
  for (const auto& l : p) all += l + "\n";
  EXPECT_NE(all.find("cfg.yaml:2: model.n_heads: 5 does not divide d_model 128"), std::string::npos) << all;
  EXPECT_NE(all.find("cfg.yaml:3: model.layout: 'upside_down' is not a registered layout; expected one of: pre, post"), std::string::npos) << all;
  EXPECT_NE(all.find("model.norm.type: 'groupnorm' is not a registered norm; expected one of: layernorm, rmsnorm"), std::string::npos) << all;
  EXPECT_NE(all.find("optim.schedule: 'wavy' is not one of: cosine, linear, constant"), std::string::npos) << all;
  EXPECT_NE(all.find("optim.lr: -1 must be > 0"), std::string::npos) << all;
}

TEST(ConfigTest, ValueRules) {
  struct Case {
    const char* yaml;
    const char* expect;
  } cases[] = {
      {"model: {vocab_size: 70000}", "model.vocab_size: 70000 must be in [2, 65536]"},
      {"model: {ctx: 0}", "model.ctx: 0 must be a positive integer"},
      {"model: {n_layers: -2}", "model.n_layers: -2 must be a positive integer"},
      {"model: {d_ff: 0}", "model.d_ff: 0 must be a positive integer"},
      {"model: {pos: alibi}", "model.pos: 'alibi' is not one of: learned, rope"},
      {"model: {ffn: relu}", "model.ffn: 'relu' is not one of: gelu, swiglu"},
      {"model: {d_model: 12, n_heads: 4, pos: rope}", "model.pos: rope needs an even head size"},
      {"model: {norm: {eps: 0}}", "model.norm.eps: 0 must be > 0"},
      {"model: {qk_norm_type: foo}", "model.qk_norm_type: 'foo' is not a registered norm"},
      {"model: {attn_softcap: -1}", "model.attn_softcap: -1 must be >= 0"},
      {"model: {normformer: {resid_scale: some}}", "model.normformer.resid_scale: 'some' is not one of"},
      {"model: {mix: {post_layers: 9}}", "model.mix.post_layers: 9 must be in [0, n_layers 4]"},
      {"model: {deepnorm: {alpha: 0}}", "model.deepnorm.alpha: 0 must be > 0"},
      {"init: {scheme: kaiming}", "init.scheme: 'kaiming' is not one of: normal, xavier"},
      {"init: {std: 0}", "init.std: 0 must be > 0"},
      {"optim: {betas: [0.9, 1.0]}", "optim.betas: [0.9, 1] must both be in [0, 1)"},
      {"optim: {warmup: -1}", "optim.warmup: -1 must be >= 0"},
      {"optim: {grad_clip: -1}", "optim.grad_clip: -1 must be >= 0"},
      {"train: {batch_size: 0}", "train.batch_size: 0 must be a positive integer"},
      {"train: {accum: 0}", "train.accum: 0 must be a positive integer"},
      {"train: {threads: -1}", "train.threads: -1 must be >= 0"},
      {"train: {device: tpu}", "train.device: 'tpu' is not one of: cpu, cuda"},
      {"eval: {max_windows: 0}", "eval.max_windows: 0 must be a positive integer"},
      {"diag: {spike: {action: panic}}", "diag.spike.action: 'panic' is not one of: log, skip, stop"},
      {"optim: {betas: 0.9}", "optim.betas: expected a list of two numbers, got '0.9'"},
      {"model: {qk_norm: maybe}", "model.qk_norm: expected true or false, got 'maybe'"},
      {"model: 3", "model: expected a mapping of keys, got '3'"},
  };
  for (const auto& c : cases) {
    auto p = problems_of(c.yaml);
    ASSERT_EQ(p.size(), 1u) << c.yaml;
    EXPECT_NE(p[0].find(c.expect), std::string::npos) << c.yaml << " -> " << p[0];
    EXPECT_EQ(p[0].rfind("cfg.yaml:1: ", 0), 0u) << p[0];
  }
}

TEST(ConfigTest, OverridesParseValuesAsYamlAndNameTheirSource) {
  auto c = parse_config_text("model: {d_model: 64}\n", "cfg.yaml",
                             {"model.d_model=256", "model.norm.type=rmsnorm", "optim.betas=[0.5, 0.6]",
                              "model.qk_norm=true", "train.steps=7"})
               .config;
  EXPECT_EQ(c.model.d_model, 256);
  EXPECT_EQ(c.model.norm.type, "rmsnorm");
  EXPECT_DOUBLE_EQ(c.optim.betas[1], 0.6);
  EXPECT_TRUE(c.model.qk_norm);
  EXPECT_EQ(c.train.steps, 7);

  auto p = problems_of("", {"model.n_heads=5"});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "--set: model.n_heads: 5 does not divide d_model 128");
  p = problems_of("", {"model.nope=1"});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].rfind("--set: model.nope: unknown key", 0), 0u) << p[0];
}

TEST(ConfigTest, MalformedOverrideIsAUsageError) {
  EXPECT_THROW(parse_config_text("", "cfg.yaml", {"model.d_model"}), UsageError);
  EXPECT_THROW(parse_config_text("", "cfg.yaml", {"=3"}), UsageError);
  EXPECT_THROW(parse_config_text("", "cfg.yaml", {"model..x=3"}), UsageError);
}

TEST(ConfigTest, YamlSyntaxErrorNamesLine) {
  auto p = problems_of("model:\n  d_model: [1, 2\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("cfg.yaml:"), std::string::npos);
  EXPECT_NE(p[0].find("YAML syntax error"), std::string::npos) << p[0];
}

TEST(ConfigTest, DumpReloadsToTheSameConfig) {
  auto c = parse_config_text("model: {layout: deepnorm, n_layers: 6, norm: {type: dyt, dyt_alpha: 0.25}}\n"
                             "optim: {lr: 1.0e-3, eps: 1.0e-8, betas: [0.9, 0.95]}\nout_dir: 'a: b'\n",
                             "cfg.yaml")
               .config;
  c = check_and_resolve(LoadedConfig{c, {}}, false);
  const std::string yaml = dump_config(c);
  auto again = check_and_resolve(parse_config_text(yaml, "dump.yaml"), false);
  EXPECT_EQ(dump_config(again), yaml);
  EXPECT_EQ(again.out_dir, "a: b");
  EXPECT_DOUBLE_EQ(again.optim.eps, 1e-8);
  EXPECT_DOUBLE_EQ(again.model.norm.dyt_alpha, 0.25);
  // The resolved config records DeepNorm's numbers, and leaves eps to the norm type.
  ASSERT_TRUE(again.model.deepnorm.alpha.has_value());
  EXPECT_DOUBLE_EQ(*again.model.deepnorm.alpha, std::pow(12.0, 0.25));
  EXPECT_DOUBLE_EQ(*again.model.deepnorm.beta, std::pow(48.0, -0.25));
  EXPECT_EQ(*again.model.mix.post_layers, 1);
  EXPECT_FALSE(again.model.norm.eps.has_value());
  EXPECT_NE(yaml.find("eps: auto"), std::string::npos);
}

TEST(ConfigTest, DescribeKeysListsEveryLeafOnce) {
  const std::string keys = describe_keys();
  for (const char* k : {"seed", "model.norm.eps", "model.deepnorm.alpha", "optim.betas", "train.threads",
                        "diag.spike.action", "eval.max_windows"}) {
    EXPECT_NE(keys.find(std::string(k) + " "), std::string::npos) << k;
  }
}

TEST(ConfigTest, MissingDataFilesAreConfigProblems) {
  testing::TempDir dir;
  std::string yaml = "data: {train: " + dir / "nope.txt" + ", val: " + dir / "nope2.txt" + "}\n";
  try {
    check_and_resolve(parse_config_text(yaml, "cfg.yaml"), /*check_data_files=*/true);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 2u);
    EXPECT_NE(e.problems()[0].find("cfg.yaml:1: data.train: file '"), std::string::npos) << e.problems()[0];
    EXPECT_NE(e.problems()[0].find("not found"), std::string::npos);
  }
}

}  // namespace
}  // namespace normlab

namespace normlab {
namespace {

TEST(ConfigBaseTest, OverrideFilesMergeOverTheirBaseAndNameTheRightFile) {
  testing::TempDir dir;
  {
    std::ofstream b(dir / "base.yaml");
    b << "model:\n  d_model: 64\n  n_heads: 4\n  norm: {type: rmsnorm, eps: 1.0e-4}\ntrain: {steps: 9}\n";
    std::ofstream o(dir / "over.yaml");
    o << "# comment\nbase: base.yaml\nmodel:\n  norm: {type: dyt}\n  n_heads: 3\n";
  }
  try {
    check_and_resolve(parse_config_file(dir / "over.yaml"), false);
    FAIL() << "n_heads 3 does not divide 64";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 1u);
    EXPECT_EQ(e.problems()[0], dir / "over.yaml" + ":5: model.n_heads: 3 does not divide d_model 64");
  }
  auto c = parse_config_file(dir / "over.yaml", {"model.n_heads=8"}).config;
  EXPECT_EQ(c.model.d_model, 64);          // from base
  EXPECT_EQ(c.model.norm.type, "dyt");     // overlay
  EXPECT_DOUBLE_EQ(*c.model.norm.eps, 1e-4);  // merged key by key
  EXPECT_EQ(c.train.steps, 9);
  {
    std::ofstream o(dir / "bad.yaml");
    o << "base: nope.yaml\n";
  }
  EXPECT_THROW(parse_config_file(dir / "bad.yaml"), ConfigError);
}

TEST(ConfigBaseTest, ShippedConfigsAllLoadAndValidate) {
  namespace fs = std::filesystem;
  int n = 0;
  for (const auto& e : fs::recursive_directory_iterator(testing::source_dir() + "/configs")) {
    if (e.path().extension() != ".yaml" || e.path().string().find("/sweeps/") != std::string::npos) continue;
    auto loaded = parse_config_file(e.path().string());
    EXPECT_NO_THROW(check_and_resolve(loaded, false)) << e.path();
    ++n;
  }
  EXPECT_GE(n, 9);  // default, 7 layouts, qk_norm
}

}  // namespace
}  // namespace normlab
