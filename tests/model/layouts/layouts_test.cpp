// Every registered layout is pinned to its contract equation (src/model/README.md: its entry's
// reference equation, written apart from its plan's forward), its exact parameter names
// (src/model/README.md, Tensor names), and causality. A layout added to the registry is tested
// through its own entry: one without a reference equation fails
// LayoutTest.EveryRegisteredLayoutStatesItsEquation.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>

#include "config/load.h"
#include "train/run_config.h"
#include "model/transformer.h"

namespace normlab {
namespace {

ModelConfig small(const std::string& layout, const std::string& norm = "layernorm", int64_t L = 4) {
  ModelConfig m;
  m.ctx = 8;
  m.d_model = 16;
  m.n_layers = L;
  m.n_heads = 2;
  m.d_ff = 32;
  m.norm.type = norm;
  m = fit_to_layout(*find_layout(layout), m);
  resolve_model_config(m);
  return m;
}

// Deterministic stand-ins for the sublayers: nonlinear, so an equation with the wrong order of
// norm and sublayer cannot produce the same numbers.
torch::Tensor stub_attn(const torch::Tensor& x) { return torch::tanh(0.7 * x) + 0.1; }
torch::Tensor stub_ffn(const torch::Tensor& x) { return 0.3 * x * x - 0.2; }

// Randomise every norm parameter, so that a slot swap (norm1 for norm2) shows.
void randomise(torch::nn::Module& m) {
  torch::NoGradGuard ng;
  for (auto& p : m.parameters()) p.copy_(torch::randn_like(p) * 0.5 + 1.0);
}

// Block i of a model of config m against its layout's reference equation (LayoutType::reference,
// written apart from the plan's forward), on stub sublayers and randomised norms; block_layout is
// the per-block layout the plan must report (mix: post or pre); equation_of: the layout whose
// equation the block must follow (default m's).
void check_block_equation(const std::string& label, const std::string& block_layout, int64_t i,
                          ModelConfig m, const std::string& equation_of = "") {
  torch::manual_seed(10 + i);
  Transformer t(m);
  Block& b = t->block(i);
  randomise(*b);
  b->set_stubs(stub_attn, stub_ffn);
  auto x = torch::randn({2, 5, 16}, torch::kDouble);
  t->to(torch::kDouble);
  auto params = b->named_parameters();
  EXPECT_EQ(params.contains("ls1"), m.layerscale > 0);
  BlockReference r;
  r.norm = [&](const char* slot, const torch::Tensor& v) {
    const auto& n = b->norm_module(slot);
    EXPECT_TRUE(n) << label << " block " << i << " lacks slot " << slot;
    return n->forward(v);
  };
  r.attn = stub_attn;
  r.ffn = stub_ffn;
  r.param = [&params](const char* name) { return params[name]; };
  r.scaled = [&params](const char* name, const torch::Tensor& v) {
    return params.contains(name) ? v * params[name] : v;
  };
  r.layer = i;
  r.model = &m;
  const std::string of = equation_of.empty() ? m.layout : equation_of;
  const auto& reference = find_layout(of)->reference;
  ASSERT_TRUE(reference) << of << " states no reference equation";
  auto expect = reference(x, r);
  auto got = b->forward(x);
  EXPECT_TRUE(torch::allclose(got, expect, 1e-12, 1e-12)) << label << " block " << i;
  EXPECT_EQ(b->plan().layout, block_layout);
}

TEST(LayoutTest, EveryRegisteredLayoutStatesItsEquation) {
  for (const auto& l : layout_registry()) EXPECT_TRUE(l.reference) << l.name << " has no reference equation";
}

// What enumerating tests rely on: every layout's fit makes the default config valid under it, and
// a layout with scope rules of its own (a check) has a fit. Seen failing with nGPT's fit leaving
// the weight decay on.
TEST(LayoutTest, EveryLayoutsFitMakesTheDefaultConfigValid) {
  for (const auto& l : layout_registry()) {
    if (l.check) {
      EXPECT_TRUE(l.fit) << l.name << " has scope rules but no fit";
    }
    for (const bool options : {false, true}) {
      Config c;
      if (options) {  // options some layouts have no use for
        c.model.qk_norm = true;
        c.model.layerscale = 0.1;
        c.model.embed_norm = true;
        c.model.norm.type = "rmsnorm";
      }
      c = fit_to_layout(l, c);
      EXPECT_EQ(c.model.layout, l.name);
      try {
        check_and_resolve(LoadedConfig{c, {}}, /*check_data_files=*/false);
      } catch (const std::exception& e) {
        ADD_FAILURE() << l.name << (options ? " with options" : "") << ": " << e.what();
      }
    }
  }
}

TEST(LayoutTest, EachBlockEqualsItsContractEquation) {
  for (const auto& l : layout_registry()) {
    if (l.name == "mix") continue;  // MixIsPostBelowPostLayersThenPre
    for (int64_t i = 0; i < 2; ++i) check_block_equation(l.name, l.name, i, small(l.name));
  }
  auto nf = small("normformer");
  nf.keys.set("normformer.resid_scale", std::string("all"));
  check_block_equation("normformer(all)", "normformer", 1, nf);
  nf.keys.set("normformer.resid_scale", std::string("ffn"));
  check_block_equation("normformer(ffn)", "normformer", 1, nf);
}

TEST(LayoutTest, LayerScaleMultipliesTheBranchTermInEveryLayout) {
  for (const auto& l : layout_registry()) {
    auto m = small(l.name);
    m.layerscale = 0.3;  // randomise() then makes ls1 != ls2 != const
    for (int64_t i = 0; i < 2; ++i) {
      const std::string bl = l.name == "mix" ? (i < m.keys.integer("mix.post_layers") ? "post" : "pre") : l.name;
      check_block_equation(l.name + "(layerscale)", bl, i, m);
    }
  }
  Transformer t([] {
    auto m = small("pre");
    m.layerscale = 0.1;
    return m;
  }());
  auto p = t->named_parameters();
  EXPECT_TRUE(torch::equal(p["blocks.3.ls2"], torch::full({16}, 0.1f)));
}

TEST(LayoutTest, LnsScalesByInverseSqrtOfDepthAndHybridStarMakesBlockZeroPre) {
  auto lns = small("lns", "rmsnorm", 6);
  for (int64_t i : {0, 3, 5}) check_block_equation("lns", "lns", i, lns);
  auto hy = small("hybrid");
  hy.keys.set("hybrid.first_block_pre", true);
  Transformer t(hy);
  init_weights(t, InitConfig{});
  // block 0 is pre (norm1, norm2), the rest hybrid (norm2 only); q/k/v norms everywhere
  torch::manual_seed(3);
  auto x = torch::randn({2, 5, 16}, torch::kDouble);
  t->to(torch::kDouble);
  Block& b0 = t->block(0);
  b0->set_stubs(stub_attn, stub_ffn);
  auto N = [&](const char* s, const torch::Tensor& v) { return b0->norm_module(s)->forward(v); };
  auto h = x + stub_attn(N("norm1", x));
  EXPECT_TRUE(torch::allclose(b0->forward(x), h + stub_ffn(N("norm2", h)), 1e-12, 1e-12));
  check_block_equation("hybrid*", "hybrid", 0, hy);  // hybrid's equation, first_block_pre branch
  check_block_equation("hybrid*", "hybrid", 1, hy);
}

TEST(LayoutTest, MixIsPostBelowPostLayersThenPre) {
  auto m = small("mix", "layernorm", 8);  // auto post_layers = floor(8/4) = 2
  EXPECT_EQ(m.keys.integer("mix.post_layers"), 2);
  for (int64_t i = 0; i < 8; ++i) check_block_equation("mix", i < 2 ? "post" : "pre", i, m);
  m.keys.set("mix.post_layers", int64_t{5});
  for (int64_t i = 0; i < 8; ++i) check_block_equation("mix(5)", i < 5 ? "post" : "pre", i, m);
}

// Every layout's model has a final norm exactly when its entry says so; the documented layouts'
// entries say what src/model/README.md's table does (a new layout's entry is its own statement).
TEST(LayoutTest, FinalNormPresenceFollowsTheContract) {
  for (const auto& l : layout_registry()) {
    Transformer t(small(l.name));
    EXPECT_EQ(static_cast<bool>(t->final_norm), l.final_norm) << l.name;
  }
  const std::map<std::string, bool> documented = {{"pre", true},       {"post", false},     {"deepnorm", false},
                                                  {"sandwich", true},  {"normformer", true}, {"reordered", true},
                                                  {"mix", true},       {"subln", true},      {"hybrid", true},
                                                  {"lns", true},       {"ngpt", false},      {"resi_dual", true}};
  for (const auto& [name, has] : documented) {
    ASSERT_TRUE(find_layout(name)) << name;
    EXPECT_EQ(find_layout(name)->final_norm, has) << name;
  }
}

std::set<std::string> block_names(const ModelConfig& m, int64_t i) {
  Transformer t(m);
  std::set<std::string> out;
  const std::string prefix = "blocks." + std::to_string(i) + ".";
  for (auto& kv : t->named_parameters()) {
    if (kv.key().rfind(prefix, 0) == 0) out.insert(kv.key().substr(prefix.size()));
  }
  return out;
}

TEST(LayoutTest, ExactParameterNamesPerLayout) {
  const std::set<std::string> sub = {"attn.q_proj.weight", "attn.k_proj.weight", "attn.v_proj.weight",
                                     "attn.out_proj.weight", "ffn.fc1.weight", "ffn.fc2.weight"};
  auto with = [&](std::initializer_list<const char*> slots, std::initializer_list<const char*> extra = {}) {
    std::set<std::string> s = sub;
    for (const char* slot : slots) {
      s.insert(std::string(slot) + ".weight");
      s.insert(std::string(slot) + ".bias");
    }
    for (const char* e : extra) s.insert(e);
    return s;
  };
  EXPECT_EQ(block_names(small("pre"), 0), with({"norm1", "norm2"}));
  EXPECT_EQ(block_names(small("post"), 0), with({"norm1", "norm2"}));
  EXPECT_EQ(block_names(small("deepnorm"), 0), with({"norm1", "norm2"}));
  EXPECT_EQ(block_names(small("sandwich"), 0), with({"norm1", "norm1_out", "norm2", "norm2_out"}));
  EXPECT_EQ(block_names(small("reordered"), 0), with({"norm1_out", "norm2_out"}));
  EXPECT_EQ(block_names(small("normformer"), 0),
            with({"norm1", "norm1_out", "norm2"}, {"attn.head_scale", "ffn.mid_norm.weight", "ffn.mid_norm.bias"}));
  auto nf = small("normformer");
  nf.keys.set("normformer.resid_scale", std::string("all"));
  EXPECT_EQ(block_names(nf, 0), with({"norm1", "norm1_out", "norm2"},
                                     {"attn.head_scale", "ffn.mid_norm.weight", "ffn.mid_norm.bias",
                                      "resid_scale1", "resid_scale2"}));
  nf.keys.set("normformer.resid_scale", std::string("ffn"));
  EXPECT_EQ(block_names(nf, 0), with({"norm1", "norm1_out", "norm2"},
                                     {"attn.head_scale", "ffn.mid_norm.weight", "ffn.mid_norm.bias", "resid_scale2"}));
  EXPECT_EQ(block_names(small("subln"), 0),
            with({"norm1", "norm2", "attn.inner_norm", "ffn.mid_norm"}));
  EXPECT_EQ(block_names(small("lns"), 0), with({"norm1", "norm2"}));
  EXPECT_EQ(block_names(small("resi_dual"), 0), with({"norm1", "norm2"}));
  EXPECT_EQ(block_names(small("ngpt"), 1),
            with({}, {"alpha1", "alpha2", "attn.s_qk", "ffn.gate.weight", "ffn.s_u", "ffn.s_v"}));
  EXPECT_EQ(block_names(small("hybrid"), 0), with({"norm2", "attn.q_norm", "attn.k_norm", "attn.v_norm"}));
  auto hs = small("hybrid");
  hs.keys.set("hybrid.first_block_pre", true);
  EXPECT_EQ(block_names(hs, 0), with({"norm1", "norm2", "attn.q_norm", "attn.k_norm", "attn.v_norm"}));
  EXPECT_EQ(block_names(hs, 1), with({"norm2", "attn.q_norm", "attn.k_norm", "attn.v_norm"}));
  auto ls = small("post");
  ls.layerscale = 0.5;
  ls.attn_gate = AttnGate::kElementwise;
  ls.v_norm = true;
  EXPECT_EQ(block_names(ls, 2), with({"norm1", "norm2", "attn.v_norm"}, {"ls1", "ls2", "attn.gate.weight"}));
  Transformer t(nf);
  auto p = t->named_parameters();
  EXPECT_EQ(p["blocks.0.attn.head_scale"].sizes(), (std::vector<int64_t>{2}));
  EXPECT_EQ(p["blocks.0.ffn.mid_norm.weight"].sizes(), (std::vector<int64_t>{32}));
  EXPECT_EQ(p["blocks.0.resid_scale2"].sizes(), (std::vector<int64_t>{16}));
  // QK-norm, embed norm, swiglu, untied head.
  auto m = small("pre", "rmsnorm");
  m.qk_norm = true;
  m.qk_norm_type = "layernorm";
  m.embed_norm = true;
  m.ffn = "swiglu";
  m.tie_embeddings = false;
  m.pos = Position::kRope;
  Transformer q(m);
  auto qp = q->named_parameters();
  EXPECT_EQ(qp["blocks.1.attn.q_norm.weight"].sizes(), (std::vector<int64_t>{8}));
  EXPECT_TRUE(qp.contains("blocks.1.attn.k_norm.bias"));
  EXPECT_EQ(qp["blocks.1.ffn.gate.weight"].sizes(), (std::vector<int64_t>{32, 16}));
  EXPECT_TRUE(qp.contains("embed_norm.weight"));
  EXPECT_TRUE(qp.contains("lm_head.weight"));
  EXPECT_FALSE(qp.contains("pos_emb.weight"));
}

TEST(DeepNormTest, ResidualScaleIsFourthRootOf2LAndBetaIsInverseFourthRootOf8L) {
  for (int64_t L : {1, 2, 6, 12, 100}) {
    auto m = small("deepnorm", "layernorm", L);
    EXPECT_DOUBLE_EQ(m.keys.number("deepnorm.alpha"), std::pow(2.0 * L, 0.25)) << L;
    EXPECT_DOUBLE_EQ(m.keys.number("deepnorm.beta"), std::pow(8.0 * L, -0.25)) << L;
  }
  EXPECT_NEAR(small("deepnorm", "layernorm", 18).keys.number("deepnorm.alpha"), 2.449, 1e-3);  // (36)^(1/4)
}

TEST(DeepNormTest, InitIsXavierNormalWithBetaOnValueOutputAndFfn) {
  ModelConfig m;
  m.d_model = 256;
  m.n_heads = 4;
  m.d_ff = 1024;
  m.n_layers = 6;
  m.ctx = 8;
  m.layout = "deepnorm";
  resolve_model_config(m);
  const double beta = std::pow(48.0, -0.25);
  torch::manual_seed(0);
  Transformer t(m);
  init_weights(t, InitConfig{});
  auto p = t->named_parameters();
  auto xavier = [](int64_t fan_in, int64_t fan_out, double gain) { return gain * std::sqrt(2.0 / (fan_in + fan_out)); };
  auto near = [](double got, double want) { EXPECT_NEAR(got, want, 0.02 * want); };
  near(p["blocks.2.attn.v_proj.weight"].std().item<double>(), xavier(256, 256, beta));
  near(p["blocks.2.attn.out_proj.weight"].std().item<double>(), xavier(256, 256, beta));
  near(p["blocks.2.ffn.fc1.weight"].std().item<double>(), xavier(256, 1024, beta));
  near(p["blocks.2.ffn.fc2.weight"].std().item<double>(), xavier(1024, 256, beta));
  near(p["blocks.2.attn.q_proj.weight"].std().item<double>(), xavier(256, 256, 1.0));
  near(p["blocks.2.attn.k_proj.weight"].std().item<double>(), xavier(256, 256, 1.0));
  near(p["tok_emb.weight"].std().item<double>(), 0.02);  // embeddings as default
  // beta = 1 turns the init half off: v/out/fc are plain xavier (gain 1).
  m.keys.set("deepnorm.beta", 1.0);
  Transformer t1(m);
  init_weights(t1, InitConfig{});
  near(t1->named_parameters()["blocks.0.attn.v_proj.weight"].std().item<double>(), xavier(256, 256, 1.0));
  // alpha = 1 turns the residual scale off: the block is post's equation.
  m.keys.set("deepnorm.alpha", 1.0);
  m.d_model = 16;
  m.n_heads = 2;
  m.d_ff = 32;
  check_block_equation("deepnorm(alpha=1)", "deepnorm", 0, m, "post");
}

TEST(SubLnTest, InitMultipliesBranchWeightsByGammaAndAutoIsSqrtLog2L) {
  ModelConfig m;
  m.d_model = 256;
  m.n_heads = 4;
  m.d_ff = 1024;
  m.n_layers = 6;
  m.ctx = 8;
  m.ffn = "swiglu";
  m.attn_gate = AttnGate::kHead;
  m.layout = "subln";
  resolve_model_config(m);
  const double gamma = std::sqrt(std::log(12.0));
  EXPECT_DOUBLE_EQ(m.keys.number("subln.gamma"), gamma);
  torch::manual_seed(0);
  Transformer t(m);
  init_weights(t, InitConfig{});
  auto p = t->named_parameters();
  auto near = [](double got, double want) { EXPECT_NEAR(got, want, 0.03 * want); };
  const double res = 0.02 / std::sqrt(12.0);  // GPT-2's scaled residual, then gamma
  near(p["blocks.2.attn.v_proj.weight"].std().item<double>(), 0.02 * gamma);
  near(p["blocks.2.attn.out_proj.weight"].std().item<double>(), res * gamma);
  near(p["blocks.2.ffn.fc1.weight"].std().item<double>(), 0.02 * gamma);
  near(p["blocks.2.ffn.gate.weight"].std().item<double>(), 0.02 * gamma);
  near(p["blocks.2.ffn.fc2.weight"].std().item<double>(), res * gamma);
  near(p["blocks.2.attn.q_proj.weight"].std().item<double>(), 0.02);
  near(p["blocks.2.attn.gate.weight"].std().item<double>(), 0.02);  // not a branch weight
  EXPECT_EQ(p["blocks.2.attn.inner_norm.weight"].sizes(), (std::vector<int64_t>{256}));
  EXPECT_EQ(p["blocks.2.ffn.mid_norm.weight"].sizes(), (std::vector<int64_t>{1024}));
}

// A valid value other than the key's default, for every kind of owned key.
KeyValue other_value(const KeySpec& k) {
  switch (k.kind) {
    case KeyKind::kNumber:
      if (!std::holds_alternative<double>(k.default_value)) return 0.75;
      // Rates in [0, 1) (momenta, decays) stay there.
      return std::get<double>(k.default_value) < 1 ? std::get<double>(k.default_value) / 2
                                                   : std::get<double>(k.default_value) * 2 + 0.25;
    case KeyKind::kInteger:
      return std::holds_alternative<int64_t>(k.default_value) && std::get<int64_t>(k.default_value) == 1 ? int64_t{2}
                                                                                                         : int64_t{1};
    case KeyKind::kBoolean:
      return !std::get<bool>(k.default_value);
    case KeyKind::kName:
      return k.names.at(1);
  }
  return {};
}

// Owned keys never share a place with another kind's or with a plain field: a section belongs to one
// kind of owner (a schedule named like Muon's section `muon` or like a layout would mix two owners'
// values), and every key of the config, plain or owned, is listed once (an owned `optim.lr.x` or a
// norm key named `eps` would meet a plain field).
TEST(OwnedKeysTest, EverySectionBelongsToOneKindAndEveryKeyIsListedOnce) {
  std::map<std::string, OwnerKind> kind_of;
  for (const auto& o : key_owners()) {
    if (o.keys.empty()) continue;
    const bool optim = o.kind == OwnerKind::kOptim || o.kind == OwnerKind::kSchedule;
    const std::string section = (optim ? "optim." : "model.") + o.section;
    const auto [it, added] = kind_of.emplace(section, o.kind);
    EXPECT_TRUE(added || it->second == o.kind) << section << " is the section of two kinds of owner";
  }
  std::map<std::string, int> seen;
  for (const auto& [key, value] : flat_values(Config{})) ++seen[key];
  for (const auto& [key, n] : seen) EXPECT_EQ(n, 1) << key;
  for (const auto& [section, kind] : kind_of) EXPECT_EQ(seen.count(section), 0u) << section << " is also a plain key";
}

TEST(OwnedKeysTest, EveryOwnedKeyUnderAnEntryThatDoesNotOwnItIsOneErrorNamingTheOwner) {
  int checked = 0;
  for (const auto& o : key_owners()) {
    for (const auto& k : o.keys) {
      // Selected: the key's value is accepted. Not selected: one problem, naming key and owner.
      for (bool selected : {true, false}) {
        const std::string norm = o.kind == OwnerKind::kNorm && selected ? o.name
                                 : o.name == "rmsnorm" ? "layernorm" : (o.kind == OwnerKind::kNorm ? "rmsnorm" : "layernorm");
        const std::string layout = o.kind == OwnerKind::kLayout && selected ? o.name : (o.name == "pre" ? "post" : "pre");
        ModelConfig m = small(layout, norm);
        const std::string key = o.section + "." + k.name;
        if (o.kind == OwnerKind::kOptim || o.kind == OwnerKind::kSchedule) {
          // Selected: this optimizer (schedule); not selected: one that owns no key of this name
          // (muon.lr has two owners).
          const bool schedule = o.kind == OwnerKind::kSchedule;
          Config c;
          std::string& chosen = schedule ? c.optim.schedule : c.optim.type;
          chosen = o.name;
          if (!selected) {
            for (const auto& other : key_owners()) {
              bool owns = false;
              for (const auto& ok : other.keys) owns = owns || (other.section == o.section && ok.name == k.name);
              if (other.kind == o.kind && !owns) chosen = other.name;
            }
          }
          (schedule ? c.optim.schedule_keys : c.optim.keys).set(key, other_value(k));
          ConfigSource src;
          Problems p(src);
          validate_config(c, p);
          if (selected) {
            EXPECT_TRUE(p.empty()) << key << ": " << (p.empty() ? "" : p.lines()[0]);
            continue;
          }
          ASSERT_EQ(p.lines().size(), 1u) << key;
          EXPECT_TRUE(p.has("optim." + key)) << p.lines()[0];
          EXPECT_NE(p.lines()[0].find(schedule ? "belongs to optim.schedule" : "belongs to optim.type"), std::string::npos)
              << p.lines()[0];
          EXPECT_NE(p.lines()[0].find(o.name), std::string::npos) << p.lines()[0];
          ++checked;
          continue;
        }
        if (o.kind == OwnerKind::kResidual) {
          // Selected: this owner; not selected: a type that owns no key of this name (streams has two owners).
          m.residual.type = o.name;
          if (!selected) {
            for (const auto& r : residual_registry()) {
              bool owns = false;
              for (const auto& rk : r.keys) owns = owns || rk.name == k.name;
              if (!owns) m.residual.type = r.name;
            }
          }
        }
        (o.kind == OwnerKind::kNorm ? m.norm.keys : o.kind == OwnerKind::kResidual ? m.residual.keys : m.keys)
            .set(key, other_value(k));
        ConfigSource src;
        Problems p(src);
        check_model_config(m, p);
        if (selected) {
          EXPECT_TRUE(p.empty()) << key << ": " << (p.empty() ? "" : p.lines()[0]);
          continue;
        }
        ASSERT_EQ(p.lines().size(), 1u) << key;
        EXPECT_TRUE(p.has("model." + key)) << p.lines()[0];
        EXPECT_NE(p.lines()[0].find("belongs to " + std::string(o.kind == OwnerKind::kNorm       ? "norm type "
                                                                : o.kind == OwnerKind::kResidual ? "residual "
                                                                                                 : "layout ")),
                  std::string::npos)
            << p.lines()[0];
        EXPECT_NE(p.lines()[0].find(o.name), std::string::npos) << p.lines()[0];
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 14 + 17);  // bias, dyt_alpha, derf_alpha, deepnorm x2, mix, normformer, subln, hybrid,
                                // streams x2 (hc, mhc), dynamic, sinkhorn_iters, attnres_block; muon's
                                // 8 keys under muon and under normuon, beta2
}

TEST(OwnedKeysTest, DefaultValuesOfUnselectedEntriesAreNoProblem) {
  ModelConfig m = small("pre");
  m.keys.set("deepnorm.alpha", std::monostate{});
  m.norm.keys.set("norm.dyt_alpha", 0.5);
  ConfigSource src;
  Problems p(src);
  check_model_config(m, p);
  EXPECT_TRUE(p.empty()) << p.lines()[0];
}

TEST(InitTest, XavierSchemeHasNoResidualScaling) {
  ModelConfig m = small("pre");
  m.d_model = 256;
  m.n_heads = 4;
  m.d_ff = 1024;
  torch::manual_seed(0);
  Transformer t(m);
  InitConfig init;
  init.scheme = InitScheme::kXavier;
  init_weights(t, init);
  auto p = t->named_parameters();
  EXPECT_NEAR(p["blocks.1.attn.out_proj.weight"].std().item<double>(), std::sqrt(2.0 / 512), 0.002);
  EXPECT_NEAR(p["blocks.1.ffn.fc2.weight"].std().item<double>(), std::sqrt(2.0 / 1280), 0.002);
  EXPECT_NEAR(p["tok_emb.weight"].std().item<double>(), 0.02, 0.001);
}

class LayoutNormTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(LayoutNormTest, ChangingTokenTNeverChangesLogitsBeforeT) {
  const auto& [layout, norm] = GetParam();
  auto m = small(layout, norm);
  torch::manual_seed(1);
  Transformer t(m);
  init_weights(t, InitConfig{});
  auto a = torch::randint(0, 256, {3, 8}, torch::kLong);
  auto b = a.clone();
  b.select(1, 5).add_(1).remainder_(256);
  t->eval();
  auto la = t->forward(a), lb = t->forward(b);
  EXPECT_TRUE(torch::equal(la.narrow(1, 0, 5), lb.narrow(1, 0, 5))) << layout << "/" << norm;
  EXPECT_FALSE(torch::equal(la.narrow(1, 5, 1), lb.narrow(1, 5, 1)));
  t->train();
  auto ta = t->forward(a), tb = t->forward(b);
  const bool same = torch::equal(ta.narrow(1, 0, 5), tb.narrow(1, 0, 5));
  // BatchNorm's training statistics pool over time: the documented leak.
  EXPECT_EQ(same, norm != "batchnorm") << layout << "/" << norm;
}

std::vector<std::tuple<std::string, std::string>> all_pairs() {
  std::vector<std::tuple<std::string, std::string>> out;
  for (const auto& l : layout_registry()) {
    for (const auto& n : norm_registry()) {
      ModelConfig m;
      m.norm.type = n.name;
      // A layout that has no use for the norm type puts it back to the default: one pair for it.
      if (fit_to_layout(l, m).norm.type == n.name) out.emplace_back(l.name, n.name);
    }
  }
  return out;
}

// Causality of every new attention option and of LayerScale, on the layouts where they sit
// differently (pre-like, post-like, hybrid).
TEST(LayoutTest, NewAttentionOptionsStayCausal) {
  struct Opt {
    const char* layout;
    std::function<void(ModelConfig&)> set;
  };
  const std::vector<Opt> opts = {
      {"pre", [](ModelConfig& m) { m.qk_norm = true; m.qk_norm_axis = QkNormAxis::kAll; }},
      {"pre", [](ModelConfig& m) { m.qk_norm = true; m.pos = Position::kRope; m.qk_norm_position = QkNormPosition::kAfterRope; }},
      {"post", [](ModelConfig& m) { m.v_norm = true; m.qk_norm_type = "derf"; }},
      {"pre", [](ModelConfig& m) { m.attn_gate = AttnGate::kHead; m.layerscale = 0.1; }},
      {"deepnorm", [](ModelConfig& m) { m.attn_gate = AttnGate::kElementwise; m.layerscale = 0.5; }},
      {"subln", [](ModelConfig& m) { m.attn_gate = AttnGate::kElementwise; m.ffn = "swiglu"; }},
      {"hybrid", [](ModelConfig& m) { m.qk_norm_axis = QkNormAxis::kAll; m.pos = Position::kRope; m.qk_norm_position = QkNormPosition::kAfterRope; }},
      {"hybrid", [](ModelConfig& m) { m.keys.set("hybrid.first_block_pre", true); m.attn_gate = AttnGate::kHead; }},
      {"lns", [](ModelConfig& m) { m.norm.type = "derf"; m.layerscale = 0.2; }},
  };
  int n = 0;
  for (const auto& o : opts) {
    auto m = small(o.layout, "rmsnorm");
    o.set(m);
    torch::manual_seed(2);
    Transformer t(m);
    init_weights(t, InitConfig{});
    auto a = torch::randint(0, 256, {2, 8}, torch::kLong);
    auto b = a.clone();
    b.select(1, 4).add_(1).remainder_(256);
    auto la = t->forward(a), lb = t->forward(b);
    EXPECT_TRUE(torch::equal(la.narrow(1, 0, 4), lb.narrow(1, 0, 4))) << "option set " << n;
    EXPECT_FALSE(torch::equal(la.narrow(1, 4, 1), lb.narrow(1, 4, 1))) << "option set " << n;
    ++n;
  }
}

INSTANTIATE_TEST_SUITE_P(AllLayoutsAllNorms, LayoutNormTest, ::testing::ValuesIn(all_pairs()),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

}  // namespace
}  // namespace normlab
