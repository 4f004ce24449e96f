// The parametrization (src/model/README.md, "Parametrization"): every role's init std, learning rate
// and decay under mup and completep against the formulas at several width and depth multipliers,
// the forward's score scale and readout multiplier against scores and logits written out here, the
// branch multiplier, the scope errors, and (ParametrizationRunTest, integration tier) every mode
// training bit for bit as sp at the base shape.
#include "model/parametrization.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "config/load.h"
#include "core/errors.h"
#include "core/torch_compat.h"
#include "model/roles.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "optim/registry.h"
#include "test_util.h"
#include "train/run_config.h"
#include "train/step.h"
#include "train/trainer.h"

namespace normlab {
namespace {

// A small model at width d (4 heads) and depth L, its param section with the given base shape.
Config shaped(const std::string& type, int64_t d, int64_t L, double base_width, double base_depth) {
  Config c;
  c.model.ctx = 16;
  c.model.d_model = d;
  c.model.n_heads = 4;
  c.model.d_ff = 4 * d;
  c.model.n_layers = L;
  c.model.bias = true;
  c.model.tie_embeddings = false;
  c.param.type = type;
  c.param.base_width = base_width;
  if (type == "completep") c.param.base_depth = base_depth;
  c.param.alpha = type == "completep" ? 0.5 : 1.0;
  resolve_model_config(c.model);
  resolve_param_config(c.param, c.model);
  return c;
}

bool is_residual_output(const std::string& name) {  // the test's own oracle, by the contract's names
  auto ends = [&](const char* s) {
    const std::string t(s);
    return name.size() >= t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0;
  };
  return ends("out_proj.weight") || ends("fc2.weight");
}

// Init: every matrix weight drawn by init.scheme normal has std 0.02 m_N^(-1/2) (times
// 1/sqrt(2 depth) for out_proj and fc2, depth = base_depth under completep, L otherwise);
// embeddings and the untied head keep 0.02.
TEST(ParametrizationTest, InitStdOfEveryRoleFollowsTheFormula) {
  for (const std::string type : {"mup", "completep"}) {
    for (const double m_n : {0.5, 2.0, 4.0}) {
      for (const double m_l : {2.0, 3.0}) {
        const int64_t d = static_cast<int64_t>(64 * m_n), L = static_cast<int64_t>(2 * m_l);
        Config c = shaped(type, d, L, 64, 2);
        SCOPED_TRACE(fmt::format("{} m_N {} m_L {}", type, m_n, m_l));
        torch::manual_seed(3);
        Transformer t(c.model, c.param);
        init_weights(t, c.init);
        const double depth = type == "completep" ? 2.0 : static_cast<double>(L);
        int checked = 0;
        for (const auto& kv : t->named_parameters()) {
          const Role r = *role_of(kv.value());
          double want = 0;
          if (r == Role::kMatrix) {
            want = 0.02 / std::sqrt(m_n) / (is_residual_output(kv.key()) ? std::sqrt(2 * depth) : 1.0);
          } else if (r == Role::kEmbedding || r == Role::kHead) {
            want = 0.02;
          } else {
            continue;
          }
          const double got = kv.value().std().item<double>();
          // The sample std of n >= 512 normal draws is within 10 % of sigma with overwhelming odds.
          EXPECT_NEAR(got / want, 1.0, 0.1) << kv.key();
          ++checked;
        }
        EXPECT_GT(checked, 6 * L);
      }
    }
  }
}

// Rates: under AdamW, matrix lr x 1/m_N x m_L^(alpha-1) (completep) and decay x m_N; gains and biases
// in blocks x m_L^(alpha-1) under completep, outside the blocks x 1; embeddings and head x 1. Under
// Muon (width-aware matrices) the matrix keeps its rate and decay but for the depth factor.
TEST(ParametrizationTest, EveryRolesRateAndDecayFollowTheFormula) {
  for (const std::string type : {"mup", "completep"}) {
    for (const std::string optimizer : {"adamw", "muon"}) {
      for (const double m_n : {0.5, 2.0, 4.0}) {
        for (const double m_l : {2.0, 3.0}) {
          const int64_t d = static_cast<int64_t>(64 * m_n), L = static_cast<int64_t>(2 * m_l);
          Config c = shaped(type, d, L, 64, 2);
          c.model.embed_norm = true;
          c.optim.type = optimizer;
          c.optim.lr_mult.gain = 0.5;
          SCOPED_TRACE(fmt::format("{} {} m_N {} m_L {}", type, optimizer, m_n, m_l));
          const double alpha = c.param.alpha;
          const double depth = type == "completep" ? std::pow(m_l, alpha - 1) : 1.0;
          const bool muon = optimizer != "adamw";
          Transformer t(c.model, c.param);
          std::vector<torch::Tensor> params;
          NamedTensors named;
          for (const auto& kv : t->named_parameters()) {
            named.emplace_back(kv.key(), kv.value());
            params.push_back(kv.value());
          }
          std::vector<bool> in_block;
          for (const auto& kv : named) in_block.push_back(kv.first.rfind("blocks.", 0) == 0);
          const Optimizer opt(named, c.optim, RoleRates::of(c), in_block);
          for (const auto& rule : opt.rules()) {
            for (const RatedParam& p : rule->params()) {
              const bool inside = p.name.rfind("blocks.", 0) == 0;
              double lr = 1, wd = 0;
              switch (p.role) {
                case Role::kMatrix:
                  lr = (muon ? 1.0 : 1.0 / m_n) * depth;
                  wd = 0.1 * (muon ? 1.0 : m_n);
                  break;
                case Role::kGain: lr = 0.5 * (inside ? depth : 1.0); break;
                case Role::kBias: lr = inside ? depth : 1.0; break;
                case Role::kEmbedding:
                case Role::kHead: wd = 0.1; break;
                case Role::kMixing: break;
              }
              EXPECT_NEAR(p.lr_mult, lr, 1e-12 * lr) << p.name;
              EXPECT_NEAR(p.weight_decay, wd, 1e-12) << p.name;
            }
          }
        }
      }
    }
  }
}

// The forward: the attention scores are q k^T sqrt(base_head_dim) / dh (checked through block 0's
// largest score, written out here from its weights), and the head reads its input times
// output_mult / m_N (the logits against the head's matrix product written out here).
TEST(ParametrizationTest, ScoreScaleAndReadoutMultiplierAreTheFormulas) {
  for (const double m_n : {0.5, 2.0, 4.0}) {
    Config c = shaped("mup", static_cast<int64_t>(64 * m_n), 2, 64, 2);
    c.param.output_mult = 3.0;
    c.param.base_head_dim = 24;  // not base_width / heads: the formula, not a coincidence
    SCOPED_TRACE(m_n);
    torch::manual_seed(5);
    Transformer t(c.model, c.param);
    init_weights(t, c.init);
    t->eval();
    torch::NoGradGuard ng;
    const auto tokens = torch::randint(0, 256, {2, 16}, torch::kLong);
    t->set_capture(true);
    const auto hidden = t->hidden(tokens);
    const auto logits = t->head(hidden);
    t->set_capture(false);
    const double d = static_cast<double>(c.model.d_model), dh = d / 4;
    const auto want_logits = torch::matmul(hidden * (3.0 / m_n), t->lm_head->weight.t());
    EXPECT_TRUE(torch::allclose(logits, want_logits, 1e-5, 1e-6)) << (logits - want_logits).abs().max();
    // Block 0 (pre): q, k from norm1 of the embedding.
    auto& b = t->block(0);
    const auto x = t->tok_emb(tokens) + t->pos_emb->weight.narrow(0, 0, 16);
    const auto z = b->norm_module("norm1")->forward(x);
    auto& attn = b->attention();
    const auto q = attn->q_proj(z).view({2, 16, 4, -1}).transpose(1, 2);
    const auto k = attn->k_proj(z).view({2, 16, 4, -1}).transpose(1, 2);
    auto s = torch::matmul(q, k.transpose(-2, -1)) * (std::sqrt(24.0) / dh);
    const auto mask = torch::ones({16, 16}, torch::kBool).triu(1);
    s = s.masked_fill(mask, -std::numeric_limits<double>::infinity());
    const double want_max = s.max().item<double>();
    const double got_max = t->stats().get("attn_logit_max").at(0).item<double>();
    EXPECT_NEAR(got_max, want_max, 1e-4 * std::abs(want_max)) << "the score scale";
  }
}

// Under bf16 autocast (the trainer's bf16 precision; on the CPU the bf16 attention kernels) the
// score scale and the readout multiplier still apply: the bf16 logits stay 5x closer to the fp32
// logits of the same weights than the fp32 logits of either multiplier left out are (a path that
// dropped one would sit at that distance). q and k are scaled up so that the attention is peaked
// and the score scale shows in the logits.
TEST(ParametrizationTest, Bf16AutocastKeepsTheScoreScaleAndTheReadoutMultiplier) {
  Config c = shaped("mup", 128, 2, 64, 2);  // m_N = 2, dh = 32
  c.param.output_mult = 3.0;                          // readout 3 / 2
  c.param.base_head_dim = 128;                        // scores sqrt(128) / 32, twice 1/sqrt(dh)
  torch::manual_seed(8);
  Transformer src(c.model, c.param);
  init_weights(src, c.init);
  torch::NoGradGuard ng;
  for (auto& kv : src->named_parameters()) {
    if (kv.key().find("q_proj") != std::string::npos || kv.key().find("k_proj") != std::string::npos) kv.value().mul_(6.0);
  }
  const auto tokens = torch::randint(0, 256, {2, 16}, torch::kLong);
  auto logits_of = [&](const Config& cfg, bool bf16) {
    Transformer m(cfg.model, cfg.param);
    auto from = src->named_parameters();
    for (auto& kv : m->named_parameters()) kv.value().copy_(from[kv.key()]);
    m->eval();
    AutocastGuard g(torch::kCPU, bf16 ? torch::kBFloat16 : torch::kFloat);
    return m->head(m->hidden(tokens)).to(torch::kFloat);
  };
  const auto fp32 = logits_of(c, false);
  const double bf16_error = (logits_of(c, true) - fp32).abs().max().item<double>();
  Config plain_scores = c, plain_readout = c;
  plain_scores.param.base_head_dim = 32;  // 1/sqrt(dh): sp's score scale
  plain_readout.param.output_mult = 2.0;  // readout 1: sp's
  const double scores_gap = (logits_of(plain_scores, false) - fp32).abs().max().item<double>();
  const double readout_gap = (logits_of(plain_readout, false) - fp32).abs().max().item<double>();
  std::printf("bf16 against fp32: %.3g; without the score scale: %.3g; without the readout: %.3g\n", bf16_error,
              scores_gap, readout_gap);
  EXPECT_LT(5 * bf16_error, scores_gap) << "bf16 " << bf16_error;
  EXPECT_LT(5 * bf16_error, readout_gap) << "bf16 " << bf16_error;
}

// CompleteP's branch multiplier: a block's output is x + m_L^-alpha G1 then + m_L^-alpha G2 (G from
// BlockImpl::term of the same block, which carries the multiplier).
TEST(ParametrizationTest, BranchMultiplierScalesEverySublayerTerm) {
  Config c = shaped("completep", 64, 6, 64, 2);
  const double mult = std::pow(3.0, -0.5);
  torch::manual_seed(6);
  Transformer t(c.model, c.param);
  init_weights(t, c.init);
  EXPECT_NEAR(t->parametrization().branch_mult(), mult, 1e-15);
  torch::NoGradGuard ng;
  auto& b = t->block(1);
  const auto x = torch::randn({2, 16, 64});
  // The unscaled terms, through the sublayers directly (pre: G = F(norm(x))).
  const auto g1 = b->attn(b->norm("norm1", x));
  const auto h = x + mult * g1;
  const auto g2 = b->ffn(b->norm("norm2", h));
  const auto want = h + mult * g2;
  EXPECT_TRUE(torch::allclose(b->forward(x), want, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(b->term(1, x), mult * g1, 1e-6, 1e-7));
}

// Every scope rule and value rule of section param is one line naming its key.
TEST(ParametrizationTest, EveryScopeErrorIsOneLine) {
  struct Case {
    std::string yaml, key, text;
  };
  const std::vector<Case> cases = {
      {"param: {type: mup}\nmodel: {layout: ngpt, pos: rope, ffn: swiglu, tie_embeddings: false}\noptim: {weight_decay: 0}",
       "param.type", "own parametrization"},
      {"param: {type: mup}\nmodel: {residual: {type: hc}}", "param.type", "model.residual.type: add"},
      {"param: {type: completep}\nmodel: {value_residual: token}", "param.type", "value_residual: token"},
      {"param: {type: mup}\nmodel: {attn_gate: head}", "param.type", "attn_gate: head"},
      {"param: {type: completep}\nmodel: {layout: post}", "param.type", "completep needs a layout"},
      {"param: {type: completep}\nmodel: {layout: deepnorm}", "param.type", "pre, sandwich"},
      {"param: {base_width: 64}", "param.base_width", "belongs to param.type mup and completep"},
      {"param: {type: mup, base_depth: 2}", "param.base_depth", "belongs to param.type completep"},
      {"param: {type: mup, alpha: 0.5}", "param.alpha", "belongs to param.type completep"},
      {"param: {output_mult: 2}", "param.output_mult", "belongs to param.type mup and completep"},
      {"param: {type: completep, alpha: 0.3}", "param.alpha", "[0.5, 1]"},
      {"param: {type: mup, base_width: -4}", "param.base_width", "> 0"},
      {"param: {type: mup, output_mult: 0}", "param.output_mult", "> 0"},
      {"param: {type: umup}", "param.type", "sp"},
  };
  for (const Case& c : cases) {
    const auto p = testing::config_problems(c.yaml);
    ASSERT_EQ(p.size(), 1u) << c.yaml << (p.empty() ? "" : "\n" + p[0]);
    EXPECT_NE(p[0].find(c.key), std::string::npos) << p[0];
    EXPECT_NE(p[0].find(c.text), std::string::npos) << p[0];
    EXPECT_EQ(p[0].find('\n'), std::string::npos) << p[0];
  }
  // An unknown type does not hide the value rules: all problems at once.
  EXPECT_EQ(testing::config_problems("param: {type: umup, alpha: 2}").size(), 2u);
  // In scope: the additive layouts under completep, a base equal to the run's own under sp (what a
  // resolved config.yaml records).
  for (const char* layout : {"pre", "sandwich", "normformer", "reordered", "subln", "lns"}) {
    EXPECT_TRUE(testing::config_problems(std::string("param: {type: completep, base_depth: 2}\nmodel: {layout: ") + layout + "}").empty())
        << layout;
  }
  EXPECT_TRUE(testing::config_problems("param: {base_width: 128, base_depth: 4, base_head_dim: 32}").empty());
}

// Registry-wide: every entry reads only base-shape keys of `param`, and at the base shape gives
// exactly 1 for every factor (and init.scaled_residual's depth n_layers), for both kinds of matrix
// rule, so that it trains bit for bit as sp there (ParametrizationRunTest trains them).
TEST(ParametrizationTest, EveryEntryIsExactlyOneAtTheBaseShape) {
  const auto& keys = param_base_keys();
  std::set<std::string> names;
  for (const auto& entry : parametrization_registry()) {
    SCOPED_TRACE(entry.name);
    EXPECT_TRUE(names.insert(entry.name).second) << "registered twice";
    EXPECT_FALSE(entry.summary.empty());
    for (const auto& k : entry.reads) EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
    // The model at width d and depth L under this entry, its base shape auto (resolved).
    auto at_auto_base = [&](int64_t d, int64_t L) {
      Config c = shaped("sp", d, L, d, L);
      c.param = ParamConfig{};
      c.param.type = entry.name;
      resolve_param_config(c.param, c.model);
      return c;
    };
    const Config c = at_auto_base(64, 3);
    EXPECT_TRUE(testing::config_problems("param: {type: " + entry.name + "}").empty());
    const Parametrization pz = Parametrization::of(c.model, c.param);
    EXPECT_EQ(pz.matrix_init_mult(), 1.0);
    EXPECT_EQ(pz.residual_init_depth(), 3.0);
    EXPECT_EQ(pz.score_q_mult(), 1.0);
    EXPECT_EQ(pz.readout_mult(), 1.0);
    EXPECT_EQ(pz.branch_mult(), 1.0);
    for (const auto& r : ChoiceTable<Role>::entries) {
      for (const bool aware : {false, true}) {
        EXPECT_EQ(pz.decay_mult(r.value, aware), 1.0) << r.name;
        for (const bool in_block : {false, true}) EXPECT_EQ(pz.lr_mult(r.value, in_block, aware), 1.0) << r.name;
      }
    }
    // The keys it reads resolve to numbers, the others stay auto.
    const Config off = at_auto_base(128, 6);
    EXPECT_EQ(off.param.base_width.has_value(), entry.reads_key("base_width"));
    EXPECT_EQ(off.param.base_depth.has_value(), entry.reads_key("base_depth"));
    EXPECT_EQ(off.param.base_head_dim.has_value(), entry.reads_key("base_head_dim"));
  }
  EXPECT_EQ(names.count(ParamConfig{}.type), 1u) << "the default param.type is not registered";
}

// The resolved config records numbers, never auto, and reloads to itself.
TEST(ParametrizationTest, ResolvedConfigRecordsTheBaseShape) {
  auto loaded = parse_config_text("param: {type: completep}\nmodel: {d_model: 96, n_layers: 3, n_heads: 4}", "cfg.yaml");
  const Config c = check_and_resolve(loaded, /*check_data_files=*/false);
  ASSERT_TRUE(c.param.base_width && c.param.base_depth && c.param.base_head_dim);
  EXPECT_EQ(*c.param.base_width, 96);
  EXPECT_EQ(*c.param.base_depth, 3);
  EXPECT_EQ(*c.param.base_head_dim, 24);
  const std::string dumped = dump_config(c);
  for (const char* line : {"base_width: 96", "base_depth: 3", "base_head_dim: 24"}) {
    EXPECT_NE(dumped.find(line), std::string::npos) << line << " in\n" << dumped;
  }
  EXPECT_EQ(dump_config(check_and_resolve(parse_config_text(dumped, "config.yaml"), false)), dumped);
}

// At the base shape (m_N = m_L = 1, base_head_dim = dh, output_mult 1) every registered mode trains
// bit for bit as sp, under AdamW and Muon, for a layout in completep's scope.
TEST(ParametrizationRunTest, EveryModeAtTheBaseShapeTrainsBitForBitAsSp) {
  for (const std::string optimizer : {"adamw", "muon"}) {
    std::vector<std::string> losses, names;
    for (const auto& entry : parametrization_registry()) {
      const std::string& type = entry.name;
      names.push_back(type);
      testing::TempDir dir;
      Config c = testing::tiny_config(dir / "run");
      c.train.steps = 8;
      c.eval.every = 4;
      c.optim.type = optimizer;
      c.model.layout = "sandwich";
      c.param.type = type;
      ASSERT_EQ(train(check_and_resolve(LoadedConfig{c, {}}, true), {}), 0);
      std::string all;
      for (const auto& r : testing::records(dir / "run", "train")) all += r["loss"].as<std::string>() + " " + r["grad_norm"].as<std::string>() + "\n";
      for (const auto& r : testing::records(dir / "run", "eval")) all += r["val_loss"].as<std::string>() + "\n";
      losses.push_back(all);
    }
    ASSERT_EQ(names[0], "sp");
    for (size_t i = 1; i < losses.size(); ++i)
      EXPECT_EQ(losses[i], losses[0]) << optimizer << ": " << names[i] << " differs from sp at the base shape";
  }
}

}  // namespace
}  // namespace normlab
