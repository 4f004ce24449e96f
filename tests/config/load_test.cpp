#include "config/load.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "core/errors.h"
#include "data/corpus.h"
#include "model/residual/residual.h"
#include "model/transformer.h"
#include "train/run_config.h"
#include "test_util.h"

namespace normlab {
namespace {

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
  EXPECT_EQ(c.diag.spike.action, SpikeAction::kLog);
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
  auto p = testing::config_problems("seed: 1\nmodel:\n  d_modle: 64\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("cfg.yaml:3: model.d_modle: unknown key"), std::string::npos) << p[0];
  EXPECT_NE(p[0].find("d_model"), std::string::npos) << p[0];
}

TEST(ConfigTest, WrongTypeIsRejectedWithExpectation) {
  auto p = testing::config_problems("train:\n  steps: many\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "cfg.yaml:2: train.steps: expected an integer, got 'many'");
}

TEST(ConfigTest, AllProblemsAreReportedAtOnce) {
  // Unknown keys and wrong types are reported in the same pass as the value rules.
  auto p = testing::config_problems("model:\n  n_heads: 5\n  layout: upside_down\n  norm: {type: groupnorm}\n"
                       "optim: {schedule: wavy, lr: -1}\nbogus: 3\ntrain: {steps: many}\n");
  ASSERT_EQ(p.size(), 7u);
  std::string all;
  for (const auto& l : p) all += l + "\n";
  EXPECT_NE(all.find("cfg.yaml:2: model.n_heads: 5 does not divide d_model 128"), std::string::npos) << all;
  EXPECT_NE(all.find("cfg.yaml:3: model.layout: 'upside_down' is not a registered layout; expected one of: pre, post"), std::string::npos) << all;
  EXPECT_NE(all.find("model.norm.type: 'groupnorm' is not a registered norm; expected one of: layernorm, rmsnorm"), std::string::npos) << all;
  EXPECT_NE(all.find("cfg.yaml:5: optim.schedule: 'wavy' is not a registered schedule; expected one of: cosine, linear, constant"),
            std::string::npos) << all;
  EXPECT_NE(all.find("optim.lr: -1 must be > 0"), std::string::npos) << all;
  EXPECT_NE(all.find("cfg.yaml:6: bogus: unknown key"), std::string::npos) << all;
  EXPECT_NE(all.find("cfg.yaml:7: train.steps: expected an integer, got 'many'"), std::string::npos) << all;
}

TEST(ConfigTest, ATypeErrorAndAnotherKeysRuleAreReportedTogether) {
  // d_model: abc keeps the default 128, which 5 heads do not divide; only the type is reported
  // for d_model, and n_heads' own rule still is.
  auto p = testing::config_problems("model: {d_model: abc, n_heads: 5}\n");
  std::string all;
  for (const auto& l : p) all += l + "\n";
  EXPECT_NE(all.find("model.d_model: expected an integer, got 'abc'"), std::string::npos) << all;
  EXPECT_EQ(p.size(), 2u) << all;
}

TEST(ConfigStrictYamlTest, DuplicateKeysAreRejectedWithBothLines) {
  auto p = testing::config_problems("model:\n  d_model: 64\n  d_model: 96\noptim: {lr: 1}\noptim: {eps: 1}\n");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0], "cfg.yaml:3: model.d_model: duplicate key (first set on line 2)");
  EXPECT_EQ(p[1], "cfg.yaml:5: optim: duplicate key (first set on line 4)");
}

TEST(ConfigStrictYamlTest, ASecondDocumentIsRejected) {
  auto p = testing::config_problems("seed: 1\n---\nbogus: 2\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "cfg.yaml:2: a second YAML document; a config is one document");
  // An explicit start of the one document is fine.
  EXPECT_TRUE(testing::config_problems("---\nseed: 1\n").empty());
}

// Found by tests/fuzz/config_fuzz.cpp: yaml-cpp's LoadAll loops forever on a stray ',' after a
// document, and YAML::Load ignores it.
TEST(ConfigStrictYamlTest, StrayTextAfterTheDocumentIsRejectedAndDoesNotHang) {
  for (const char* text : {",", "{model: {d_model: 64}},", "[1, 2],"}) {
    auto p = testing::config_problems(text);
    ASSERT_EQ(p.size(), 1u) << text;
    EXPECT_NE(p[0].find("unexpected text after the end of the YAML document"), std::string::npos) << p[0];
  }
}

TEST(ConfigStrictYamlTest, AnUnterminatedQuoteIsRejected) {
  auto p = testing::config_problems("seed: 1\nout_dir: \"runs/x\nmodel: {d_model: 64}\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "cfg.yaml:2: out_dir: unterminated quoted string (missing closing \")");
  EXPECT_EQ(testing::config_problems("out_dir: 'runs/x\n").size(), 1u);
  // Closed quotes, escapes included, are fine.
  EXPECT_TRUE(testing::config_problems("out_dir: \"a\\\"b\"\ndata: {val: 'it''s'}\n").empty());
}

// Found by tests/fuzz/sweep_fuzz.cpp: a control byte or invalid UTF-8 in a path was accepted,
// and yaml-cpp writes such text back escaped or replaced, so config.yaml / sweep.yaml no longer
// named the same directory.
TEST(ConfigStrictYamlTest, TextThatIsNotPrintableUtf8IsRejectedWithItsLine) {
  auto p = testing::config_problems("seed: 1\nout_dir: runs/a\x0f\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "cfg.yaml:2: control character 0x0f; YAML text must be printable UTF-8");
  p = testing::config_problems("seed: 1\n\nout_dir: runs/\xff\xfe\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "cfg.yaml:3: invalid UTF-8 byte 0xff; YAML text must be printable UTF-8");
  EXPECT_EQ(testing::config_problems("seed: 1\r\nout_dir: runs/a\r\r \n")[0],
            "cfg.yaml:2: carriage return not followed by a line feed; YAML text must be printable UTF-8");
  // Overlong, surrogate, truncated sequences and C1 controls are not printable UTF-8 either.
  for (const char* bad : {"\xc0\xaf", "\xed\xa0\x80", "\xe2\x82", "\xc2\x80", "\xef\xbf\xbf"}) {
    EXPECT_EQ(testing::config_problems(std::string("out_dir: runs/") + bad + "\n").size(), 1u) << bad;
  }
  // Printable non-ASCII text, tabs and CRLF line ends are fine, and round-trip through config.yaml.
  const std::string name = "runs/\xc3\xa9t\xc3\xa9-\xe2\x88\x9a-\xf0\x9f\x98\x80";
  EXPECT_TRUE(testing::config_problems("seed:\t1\r\nout_dir: " + name + "\r\n").empty());
  const Config c = parse_config_text("out_dir: " + name + "\n").config;
  EXPECT_EQ(c.out_dir, name);
  EXPECT_EQ(parse_config_text(dump_config(c)).config.out_dir, name);
  // A --set line is held to the same rule.
  try {
    parse_config_text("", "cfg.yaml", {"out_dir=runs/\x01"});
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--set out_dir: control character 0x01; expected printable UTF-8 text");
  }
}

TEST(ConfigTest, NonFiniteNumbersAreRejectedEverywhere) {
  for (const char* key : {"optim.lr", "optim.min_lr", "optim.eps", "optim.weight_decay", "optim.z_loss",
                          "optim.grad_clip", "init.std", "init.embed_std", "model.logit_softcap",
                          "model.attn_softcap", "model.norm.eps", "model.norm.dyt_alpha",
                          "model.deepnorm.alpha", "model.embed_scale", "diag.spike.zscore"}) {
    for (const char* v : {".inf", "-.inf", ".nan"}) {
      auto p = testing::config_problems("", {std::string(key) + "=" + v});
      ASSERT_EQ(p.size(), 1u) << key << "=" << v;
      EXPECT_NE(p[0].find(std::string(key) + ": expected a finite number"), std::string::npos) << p[0];
    }
  }
  auto p = testing::config_problems("optim: {betas: [0.9, .inf]}\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("optim.betas: expected a list of two finite numbers"), std::string::npos) << p[0];
}

TEST(ConfigTest, AModelThatCannotFitIsOneProblemNamingTheEstimate) {
  const std::string data = testing::source_dir() + "/data/toy/";
  LoadedConfig l = parse_config_text("model: {d_model: 1048576, n_heads: 4, d_ff: 4096}\n", "cfg.yaml");
  l.config.data.train = {data + "train.txt"};
  l.config.data.val = {data + "val.txt"};
  try {
    check_and_resolve(l, /*check_data_files=*/true);
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 1u);
    EXPECT_NE(e.problems()[0].find("cfg.yaml:1: model: training needs at least"), std::string::npos)
        << e.problems()[0];
    EXPECT_NE(e.problems()[0].find("GiB"), std::string::npos) << e.problems()[0];
  }
  // The estimate grows with the model and the batch; the default config is far below any machine.
  Config c;
  const MemoryEstimate small = estimate_training_memory(c);
  c.model.d_model *= 2;
  EXPECT_GT(estimate_training_memory(c).state_bytes, 2 * small.state_bytes);
  c.train.batch_size *= 2;
  EXPECT_GT(estimate_training_memory(c).activation_bytes, 2 * small.activation_bytes);
  EXPECT_LT(small.total(), 1e9);
  EXPECT_NEAR(small.params, 0.84e6, 0.02e6);  // README: the default model has 0.84M parameters
}

// Absurd sizes are refused before anything is allocated or run, one line each: a stream count whose
// streams and mixing maps cannot fit (the residual type's own cost in the estimate), iteration
// counts past their bounds.
TEST(ConfigTest, AbsurdStreamCountsAndIterationCountsAreOneProblemEach) {
  const std::string data = testing::source_dir() + "/data/toy/";
  auto problems = [&](const std::string& yaml) -> std::vector<std::string> {
    LoadedConfig l = parse_config_text(yaml, "cfg.yaml");
    l.config.data.train = {data + "train.txt"};
    l.config.data.val = {data + "val.txt"};
    try {
      check_and_resolve(l, /*check_data_files=*/true);
    } catch (const ConfigError& e) {
      return e.problems();
    }
    return {};
  };
  for (const char* type : {"hc", "mhc"}) {
    const auto p = problems(fmt::format("model: {{residual: {{type: {}, streams: 100000000}}}}\n", type));
    ASSERT_EQ(p.size(), 1u) << type;
    EXPECT_NE(p[0].find("model: training needs at least"), std::string::npos) << p[0];
  }
  auto one = [&](const std::string& yaml, const std::string& what) {
    const auto p = problems(yaml);
    ASSERT_EQ(p.size(), 1u) << yaml;
    EXPECT_NE(p[0].find(what), std::string::npos) << p[0];
  };
  one("optim: {type: muon, muon: {ns_steps: 1000000}}\n", "optim.muon.ns_steps: 1000000 must be in [1, 100]");
  one("model: {residual: {type: mhc, sinkhorn_iters: 1000000}}\n", "model.residual.sinkhorn_iters: 1000000 must be in [1, 1000]");
  EXPECT_TRUE(problems("model: {residual: {type: mhc, streams: 8}}\n").empty());
}

// The estimate's parameter count follows every residual type's own parameters: within 10 % of the
// model's real count at a small width with many streams, where the streams' maps dominate.
TEST(ConfigTest, MemoryEstimateCountsEachResidualTypesParameters) {
  for (const auto& r : residual_registry()) {
    SCOPED_TRACE(r.name);
    Config c;
    c.model.d_model = 32;
    c.model.n_heads = 2;
    c.model.d_ff = 64;
    c.model.n_layers = 3;
    c.model.ctx = 16;
    c.model.residual.type = r.name;
    if (r.name == "hc" || r.name == "mhc") c.model.residual.keys.set("residual.streams", int64_t{8});
    resolve_model_config(c.model);
    Transformer t(c.model);
    double real = 0;
    for (const auto& p : t->parameters()) real += static_cast<double>(p.numel());
    EXPECT_NEAR(estimate_training_memory(c).params, real, 0.1 * real);
  }
}

TEST(ConfigTest, RelativeDataPathsAreStoredAbsoluteSoTheRunWorksFromAnyDirectory) {
  namespace fs = std::filesystem;
  const fs::path train = fs::path(testing::source_dir()) / "data/toy/train.txt";
  LoadedConfig l = parse_config_text("", "cfg.yaml");
  l.config.data.train = {fs::relative(train).string()};
  l.config.data.val = {fs::relative(fs::path(testing::source_dir()) / "data/toy/val.txt").string()};
  ASSERT_TRUE(fs::path(l.config.data.train[0]).is_relative());
  Config c = check_and_resolve(l, /*check_data_files=*/true);
  EXPECT_TRUE(fs::path(c.data.train[0]).is_absolute()) << c.data.train[0];
  EXPECT_TRUE(fs::equivalent(c.data.train[0], train));
  EXPECT_NE(dump_config(c).find("train: \"" + c.data.train[0] + "\""), std::string::npos);
}

TEST(ConfigTest, OnlyScheduleLoggingAndDiagnosticKeysMayChangeOnResume) {
  for (const char* k : {"optim.lr", "optim.warmup", "train.steps", "train.threads", "eval.every",
                        "diag.csv", "out_dir", "data.val"}) {
    EXPECT_TRUE(may_change_on_resume(k)) << k;
  }
  for (const char* k : {"model.d_model", "model.norm.type", "seed", "data.train", "data.shuffle",
                        "train.batch_size", "train.accum", "init.std", "diag.spike.window"}) {
    EXPECT_FALSE(may_change_on_resume(k)) << k;
  }
  // Every key is in the flat list, once, with its dumped value.
  Config c;
  c.model.d_model = 96;
  const auto flat = flat_values(c);
  std::set<std::string> keys;
  for (const auto& [k, v] : flat) {
    EXPECT_TRUE(keys.insert(k).second) << k;
    if (k == "model.d_model") {
      EXPECT_EQ(v, "96");
    }
  }
  EXPECT_TRUE(keys.count("diag.spike.action"));
}

TEST(ConfigTest, ValueRules) {
  struct Case {
    const char* yaml;
    const char* expect;
  } cases[] = {
      {"model: {vocab_size: 1}", "model.vocab_size: 1 must be in [2, 2147483647]"},
      {"model: {ctx: 0}", "model.ctx: 0 must be a positive integer"},
      {"model: {n_layers: -2}", "model.n_layers: -2 must be a positive integer"},
      {"model: {d_ff: 0}", "model.d_ff: 0 must be a positive integer"},
      {"model: {pos: alibi}", "model.pos: expected one of: learned, rope, none, got 'alibi'"},
      {"model: {ffn: relu}", "model.ffn: 'relu' is not a registered FFN; expected one of: gelu, swiglu"},
      {"model: {d_model: 12, n_heads: 4, pos: rope}", "model.pos: rope needs an even head size"},
      {"model: {norm: {eps: 0}}", "model.norm.eps: 0 must be > 0"},
      {"model: {qk_norm_type: foo}", "model.qk_norm_type: 'foo' is not a registered norm"},
      {"model: {attn_softcap: -1}", "model.attn_softcap: -1 must be >= 0"},
      {"model: {embed_scale: -2}", "model.embed_scale: -2 must be a finite number >= 0 (0 = off)"},
      {"model: {layout: ngpt, pos: rope, ffn: swiglu, tie_embeddings: false, embed_scale: 8}\noptim: {weight_decay: 0}",
       "model.embed_scale: has no effect under layout ngpt"},
      {"model: {layout: normformer, normformer: {resid_scale: some}}",
       "model.normformer.resid_scale: expected one of: none, ffn, all, got 'some'"},
      {"model: {layout: mix, mix: {post_layers: 9}}", "model.mix.post_layers: 9 must be in [0, n_layers 4]"},
      {"model: {layout: deepnorm, deepnorm: {alpha: 0}}", "model.deepnorm.alpha: 0 must be > 0"},
      {"model: {mix: {post_layers: 1}}", "model.mix.post_layers: belongs to layout mix (model.layout is pre)"},
      {"model: {norm: {dyt_alpha: 0.3}}", "model.norm.dyt_alpha: belongs to norm type dyt (model.norm.type is layernorm)"},
      {"model: {norm: {type: dyt, dyt_alpha: -1}}", "model.norm.dyt_alpha: -1 must be > 0"},
      // The q/k/v norm type's own keys do nothing while no q/k/v norm is on.
      {"model: {qk_norm_type: dyt, norm: {dyt_alpha: 0.3}}",
       "model.norm.dyt_alpha: belongs to norm type dyt (model.norm.type is layernorm, qk_norm_type dyt but no q/k/v norm is on"},
      {"model: {qk_norm: true, qk_norm_type: dyt, norm: {dyt_alpha: -1}}", "model.norm.dyt_alpha: -1 must be > 0"},
      {"model: {norm: {type: dyt, eps: 0.01}}", "model.norm.eps: norm type dyt has no eps; it would do nothing here"},
      {"init: {scheme: kaiming}", "init.scheme: expected one of: normal, xavier, got 'kaiming'"},
      {"init: {std: 0}", "init.std: 0 must be > 0"},
      {"optim: {betas: [0.9, 1.0]}", "optim.betas: [0.9, 1] must both be in [0, 1)"},
      {"optim: {warmup: -1}", "optim.warmup: -1 must be >= 0"},
      {"optim: {grad_clip: -1}", "optim.grad_clip: -1 must be >= 0"},
      {"train: {batch_size: 0}", "train.batch_size: 0 must be a positive integer"},
      {"train: {accum: 0}", "train.accum: 0 must be a positive integer"},
      {"train: {threads: -1}", "train.threads: -1 must be >= 0"},
      {"train: {device: tpu}", "train.device: expected one of: cpu, cuda, got 'tpu'"},
      {"eval: {max_windows: 0}", "eval.max_windows: 0 must be a positive integer"},
      {"diag: {spike: {action: panic}}", "diag.spike.action: expected one of: log, skip, stop, got 'panic'"},
      {"optim: {betas: 0.9}", "optim.betas: expected a list of two finite numbers, got '0.9'"},
      {"model: {qk_norm: maybe}", "model.qk_norm: expected true or false, got 'maybe'"},
      {"model: 3", "model: expected a mapping of keys, got '3'"},
  };
  for (const auto& c : cases) {
    auto p = testing::config_problems(c.yaml);
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

  auto p = testing::config_problems("", {"model.n_heads=5"});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "--set: model.n_heads: 5 does not divide d_model 128");
  p = testing::config_problems("", {"model.nope=1"});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].rfind("--set: model.nope: unknown key", 0), 0u) << p[0];
}

TEST(ConfigTest, MalformedOverrideIsAUsageError) {
  EXPECT_THROW(parse_config_text("", "cfg.yaml", {"model.d_model"}), UsageError);
  EXPECT_THROW(parse_config_text("", "cfg.yaml", {"=3"}), UsageError);
  EXPECT_THROW(parse_config_text("", "cfg.yaml", {"model..x=3"}), UsageError);
}

TEST(ConfigTest, YamlSyntaxErrorNamesLine) {
  auto p = testing::config_problems("model:\n  d_model: [1, 2\n");
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
  EXPECT_DOUBLE_EQ(again.model.norm.keys.number("norm.dyt_alpha"), 0.25);
  // The resolved config records DeepNorm's numbers, and leaves eps to the norm type.
  ASSERT_FALSE(again.model.keys.is_auto("deepnorm.alpha"));
  EXPECT_DOUBLE_EQ(again.model.keys.number("deepnorm.alpha"), std::pow(12.0, 0.25));
  EXPECT_DOUBLE_EQ(again.model.keys.number("deepnorm.beta"), std::pow(48.0, -0.25));
  // ...and only the layout's own: Mix-LN's split stays auto under deepnorm.
  EXPECT_TRUE(again.model.keys.is_auto("mix.post_layers"));
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

// The problems of a config whose data files are checked.
std::vector<std::string> data_problems(const std::string& yaml) {
  try {
    check_and_resolve(parse_config_text(yaml, "cfg.yaml"), /*check_data_files=*/true);
  } catch (const ConfigError& e) {
    return e.problems();
  }
  return {};
}

TEST(ConfigTest, DataFilesAreAListOrGlobsResolvedInSortedOrderAndDumpedAsAList) {
  testing::TempDir dir;
  const std::string toy = testing::source_dir() + "/data/toy/";
  for (const char* name : {"b.txt", "a.txt", "c.txt"}) std::filesystem::copy_file(toy + "val.txt", dir / name);
  const std::string yaml = "data: {train: ['" + dir / "[ab].txt" + "', '" + dir / "c.txt" + "'], val: " + toy +
                           "val.txt}\nmodel: {ctx: 16}\n";
  const Config c = check_and_resolve(parse_config_text(yaml, "cfg.yaml"), /*check_data_files=*/true);
  EXPECT_EQ(c.data.train, (PathList{dir / "a.txt", dir / "b.txt", dir / "c.txt"}));  // glob sorted, then the list
  ASSERT_EQ(c.data.val.size(), 1u);
  // The resolved config lists the files and reloads to the same list; one file stays a string.
  const std::string dumped = dump_config(c);
  EXPECT_NE(dumped.find("train: [\"" + dir / "a.txt" + "\", "), std::string::npos) << dumped;
  EXPECT_EQ(parse_config_text(dumped).config.data.train, c.data.train);
  EXPECT_NE(dumped.find("val: \"" + c.data.val[0] + "\""), std::string::npos);

  auto p = data_problems("data: {train: '" + dir / "*.nothing" + "'}\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("cfg.yaml:1: data.train: the pattern '" + dir / "*.nothing" + "' matches no file"),
            std::string::npos) << p[0];
  p = data_problems("data: {train: []}\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("data.train: expected a file name, a glob or a non-empty list of them, got a list"),
            std::string::npos) << p[0];
}

TEST(ConfigTest, TokenFileProblemsAreOneLineConfigErrorsNamingFileAndPosition) {
  testing::TempDir dir;
  const std::string toy = testing::source_dir() + "/data/toy/val.txt";
  std::vector<uint32_t> toks(200, 3);
  toks[150] = 300;
  write_llmc_shard(dir / "big.bin", toks);
  toks[150] = 3;
  write_llmc_shard(dir / "ok.bin", toks);
  {
    std::ofstream raw(dir / "raw.bin", std::ios::binary);
    raw << std::string(400, '\1');
  }
  auto p = data_problems("data: {train: [" + dir / "ok.bin" + ", " + dir / "big.bin" + "], val: " + toy +
                         "}\nmodel: {ctx: 16}\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("cfg.yaml:1: data.train: '" + dir / "big.bin" +
                      "' holds token 300 at position 150 (the first one) >= model.vocab_size 256"),
            std::string::npos) << p[0];
  p = data_problems("data: {train: " + dir / "raw.bin" + ", val: " + toy + "}\nmodel: {ctx: 16}\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("data.train: " + dir / "raw.bin" + ": a .bin file without an llm.c header"), std::string::npos)
      << p[0];
  // Named, the same file trains: 200 u16 tokens of value 257 = 0x0101 exceed 256 as they should.
  p = data_problems("data: {train: " + dir / "raw.bin" + ", format: u16, val: " + dir / "raw.bin" +
                    "}\nmodel: {ctx: 16, vocab_size: 300}\n");
  EXPECT_TRUE(p.empty()) << p[0];
  p = data_problems("data: {format: u24}\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("data.format: expected one of: auto, bytes, u16, u32, llmc"), std::string::npos) << p[0];
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
    o << "# comment\nbase: base.yaml\nmodel:\n  norm: {type: layernorm}\n  n_heads: 3\n";
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
  EXPECT_EQ(c.model.norm.type, "layernorm");  // overlay
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
  EXPECT_GE(n, 12);  // default, 10 layouts, qk_norm
}

}  // namespace
}  // namespace normlab
