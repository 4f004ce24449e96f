#include "model/transformer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"

namespace normlab {
namespace {

ModelConfig small_model(const std::string& layout = "pre") {
  ModelConfig m;
  m.ctx = 16;
  m.d_model = 32;
  m.n_layers = 3;
  m.n_heads = 4;
  m.d_ff = 64;
  m.layout = layout;
  resolve_model_config(m);
  return m;
}

std::set<std::string> names(Transformer& t) {
  std::set<std::string> out;
  for (auto& kv : t->named_parameters()) out.insert(kv.key());
  return out;
}

TEST(TransformerTest, PreLayoutHasExactlyTheContractTensorNames) {
  Transformer t(small_model());
  std::set<std::string> expect = {"tok_emb.weight", "pos_emb.weight", "final_norm.weight", "final_norm.bias"};
  for (int i = 0; i < 3; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    for (const char* p : {"attn.q_proj.weight", "attn.k_proj.weight", "attn.v_proj.weight",
                          "attn.out_proj.weight", "ffn.fc1.weight", "ffn.fc2.weight", "norm1.weight",
                          "norm1.bias", "norm2.weight", "norm2.bias"}) {
      expect.insert(b + p);
    }
  }
  EXPECT_EQ(names(t), expect);
  auto p = t->named_parameters();
  EXPECT_EQ(p["blocks.0.ffn.fc1.weight"].sizes(), (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(p["blocks.0.ffn.fc2.weight"].sizes(), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(p["pos_emb.weight"].sizes(), (std::vector<int64_t>{16, 32}));
}

// The checkpoint's order is named_parameters()' (src/model/README.md, Tensor names): a module's
// own tensors before its submodules', submodules in registration order. Checked on configs that
// have the tensors whose place the README states.
void expect_in_order(Transformer& t, const std::vector<std::string>& want, const std::string& what) {
  std::vector<std::string> all;
  for (auto& kv : t->named_parameters()) all.push_back(kv.key());
  int64_t last = -1;
  for (const auto& n : want) {
    const auto it = std::find(all.begin(), all.end(), n);
    ASSERT_NE(it, all.end()) << what << ": no " << n;
    const int64_t at = it - all.begin();
    EXPECT_GT(at, last) << what << ": " << n << " comes before the tensor listed ahead of it";
    last = at;
  }
}

TEST(TransformerTest, CheckpointOrderIsTheReadmesOrder) {
  ModelConfig m = small_model("normformer");
  m.keys.set("normformer.resid_scale", std::string("all"));
  m.layerscale = 0.1;
  m.embed_norm = true;
  m.embed_scale = 3.0;
  m.tie_embeddings = false;
  m.value_residual = "scalar";
  resolve_model_config(m);
  Transformer t(m);
  expect_in_order(t, {"embed_scale", "tok_emb.weight", "pos_emb.weight", "embed_norm.weight",
                      "blocks.1.resid_scale1", "blocks.1.resid_scale2", "blocks.1.ls1", "blocks.1.ls2",
                      "blocks.1.norm1.weight", "blocks.1.attn.head_scale", "blocks.1.attn.vres_lambda",
                      "blocks.1.attn.q_proj.weight", "blocks.1.attn.out_proj.weight", "blocks.1.norm1_out.weight",
                      "blocks.1.norm2.weight", "blocks.1.ffn.fc1.weight", "blocks.1.ffn.fc2.weight",
                      "blocks.1.ffn.mid_norm.weight", "blocks.2.resid_scale1", "final_norm.weight", "lm_head.weight"},
                  "normformer");
  ModelConfig h = small_model("pre");
  h.residual.type = "mhc";
  resolve_model_config(h);
  Transformer th(h);
  expect_in_order(th, {"tok_emb.weight", "blocks.0.norm1.weight", "blocks.0.norm2.weight", "blocks.0.ffn.fc2.weight",
                       "blocks.0.mhc1.fn", "blocks.0.mhc2.fn", "blocks.1.norm1.weight", "final_norm.weight", "mhc_head.fn"},
                  "mhc");
  ModelConfig g = fit_to_layout(*find_layout("ngpt"), small_model("ngpt"));
  resolve_model_config(g);
  Transformer tg(g);
  expect_in_order(tg, {"s_z", "tok_emb.weight", "blocks.0.alpha1", "blocks.0.alpha2", "blocks.0.attn.s_qk",
                       "blocks.0.attn.q_proj.weight", "blocks.0.ffn.s_u", "blocks.0.ffn.s_v", "blocks.0.ffn.fc1.weight",
                       "lm_head.weight"},
                  "ngpt");
}

TEST(TransformerTest, UntiedHeadAndBiasOptionsAddTheirTensors) {
  auto m = small_model();
  m.tie_embeddings = false;
  m.bias = true;
  m.norm.keys.set("norm.bias", false);
  Transformer t(m);
  auto n = names(t);
  EXPECT_TRUE(n.count("lm_head.weight"));
  EXPECT_TRUE(n.count("blocks.0.attn.q_proj.bias"));
  EXPECT_TRUE(n.count("blocks.2.attn.out_proj.bias"));
  // src/model/README.md, Tensor names: with model.bias, attention biases only.
  EXPECT_FALSE(n.count("blocks.2.ffn.fc2.bias"));
  EXPECT_FALSE(n.count("blocks.0.norm1.bias"));
  EXPECT_FALSE(n.count("final_norm.bias"));
}

TEST(TransformerTest, LogitsShapeAndTiedHeadIsTokEmbTransposed) {
  torch::manual_seed(0);
  Transformer t(small_model());
  init_weights(t, InitConfig{});
  auto tok = torch::randint(0, 256, {2, 10}, torch::kLong);
  auto logits = t->forward(tok);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 10, 256}));
  EXPECT_THROW(t->forward(torch::zeros({1, 17}, torch::kLong)), c10::Error);
}

TEST(TransformerTest, ChangingALaterTokenNeverChangesEarlierLogits) {
  torch::manual_seed(0);
  Transformer t(small_model());
  init_weights(t, InitConfig{});
  t->eval();
  auto a = torch::randint(0, 256, {1, 12}, torch::kLong);
  auto b = a.clone();
  b[0][7] = (a[0][7].item<int64_t>() + 1) % 256;
  auto la = t->forward(a), lb = t->forward(b);
  EXPECT_TRUE(torch::equal(la.narrow(1, 0, 7), lb.narrow(1, 0, 7)));
  EXPECT_FALSE(torch::allclose(la.narrow(1, 7, 1), lb.narrow(1, 7, 1)));
}

// model.pos none (NoPE): no position tensor, and the causal mask the only source of order. In one
// block the last position attends to the keys and values of tokens 0..t, each computed from its own
// token alone, so its logits are unchanged by any permutation of tokens 0..t-1 (deeper blocks see
// hidden states that carry each position's own prefix, which is how NoPE learns order); learned
// positions and RoPE each change them.
TEST(TransformerTest, WithoutPositionsTheLastLogitsIgnoreThePrefixOrder) {
  for (const Position pos : {Position::kNone, Position::kLearned, Position::kRope}) {
    SCOPED_TRACE(choice_name(pos));
    torch::manual_seed(0);
    ModelConfig m = small_model();
    m.pos = pos;
    m.n_layers = 1;
    Transformer t(m);
    InitConfig init;
    init.std = init.embed_std = 0.3;  // scores far from 0, so that where positions act they show
    init_weights(t, init);
    t->eval();
    EXPECT_EQ(names(t).count("pos_emb.weight"), pos == Position::kLearned ? 1u : 0u);
    const auto a = torch::randint(0, 256, {1, 10}, torch::kLong).to(torch::kLong);
    auto b = a.clone();
    b.narrow(1, 0, 9).copy_(a.narrow(1, 0, 9).flip(1));  // the prefix reversed, token 9 kept
    const auto la = t->forward(a).select(1, 9), lb = t->forward(b).select(1, 9);
    if (pos == Position::kNone) {
      EXPECT_LT((la - lb).abs().max().item<double>(), 1e-5 * la.abs().max().item<double>());
    } else {
      EXPECT_GT((la - lb).abs().max().item<double>(), 1e-3 * la.abs().max().item<double>());
    }
  }
}

TEST(TransformerTest, DefaultInitStdsFollowTheContract) {
  auto m = small_model();
  m.d_model = 256;
  m.n_heads = 4;
  m.d_ff = 1024;
  m.n_layers = 8;
  torch::manual_seed(3);
  Transformer t(m);
  init_weights(t, InitConfig{});
  auto p = t->named_parameters();
  EXPECT_NEAR(p["blocks.0.attn.q_proj.weight"].std().item<double>(), 0.02, 0.0005);
  EXPECT_NEAR(p["blocks.0.ffn.fc1.weight"].std().item<double>(), 0.02, 0.0005);
  EXPECT_NEAR(p["blocks.3.attn.out_proj.weight"].std().item<double>(), 0.02 / std::sqrt(16.0), 0.0002);
  EXPECT_NEAR(p["blocks.3.ffn.fc2.weight"].std().item<double>(), 0.02 / std::sqrt(16.0), 0.0002);
  EXPECT_NEAR(p["tok_emb.weight"].std().item<double>(), 0.02, 0.001);
  EXPECT_TRUE(torch::equal(p["blocks.0.norm1.weight"], torch::ones({256})));
  EXPECT_TRUE(torch::equal(p["blocks.0.norm1.bias"], torch::zeros({256})));
  // The seed fixes the init exactly.
  torch::manual_seed(3);
  Transformer t2(m);
  init_weights(t2, InitConfig{});
  EXPECT_TRUE(torch::equal(p["blocks.5.ffn.fc1.weight"], t2->named_parameters()["blocks.5.ffn.fc1.weight"]));
}

// init.zero_query: every block's q_proj weight is 0, every other tensor is drawn exactly as without
// it (the layouts' own rules included), and the first gradients reach q_proj.
TEST(TransformerTest, ZeroQueryZeroesTheQueriesAndDrawsEveryOtherTensorAsWithout) {
  for (const std::string layout : {"pre", "post", "deepnorm", "subln"}) {
    const auto m = small_model(layout);
    InitConfig plain, zq;
    zq.zero_query = true;
    torch::manual_seed(5);
    Transformer a(m);
    init_weights(a, plain);
    torch::manual_seed(5);
    Transformer b(m);
    init_weights(b, zq);
    auto pa = a->named_parameters(), pb = b->named_parameters();
    int zeroed = 0;
    for (const auto& kv : pb) {
      const bool query = kv.key().find(".attn.q_proj.weight") != std::string::npos;
      if (query) {
        ++zeroed;
        EXPECT_TRUE(torch::equal(kv.value(), torch::zeros_like(kv.value()))) << layout << " " << kv.key();
        EXPECT_GT(pa[kv.key()].abs().max().item<double>(), 0.0) << layout << " " << kv.key();
      } else {
        EXPECT_TRUE(torch::equal(kv.value(), pa[kv.key()])) << layout << " " << kv.key();
      }
    }
    EXPECT_EQ(zeroed, m.n_layers) << layout;
    // q = 0: every score 0; the loss's gradient still reaches every q_proj through the keys.
    const auto idx = torch::randint(0, m.vocab_size, {2, m.ctx});
    const auto logits = b->forward(idx);
    torch::nn::functional::cross_entropy(logits.reshape({-1, m.vocab_size}), idx.reshape({-1})).backward();
    for (int64_t i = 0; i < m.n_layers; ++i)
      EXPECT_GT(b->block(i)->attention()->q_proj->weight.grad().abs().max().item<double>(), 0.0) << layout << " " << i;
  }
}

// model.embed_scale c: a gain [1] initialised to c (drawn by no rule, so every other tensor is
// drawn as without it) that multiplies the embedding before the first block: with an untied head
// the logits are those of the model without it whose tok_emb and pos_emb are c times as large, in
// every layout that reads the embedding (nGPT, which normalises it, refuses the key); its gradient
// is the finite difference of the loss.
TEST(TransformerTest, EmbedScaleMultipliesTheEmbeddingAndIsDrawnByNoRule) {
  for (const std::string layout : {"pre", "post", "sandwich", "deepnorm"}) {
    ModelConfig plain = small_model(layout);
    plain.tie_embeddings = false;
    ModelConfig scaled = plain;
    scaled.embed_scale = 5.5;
    torch::manual_seed(11);
    Transformer a(plain);
    init_weights(a, InitConfig{});
    torch::manual_seed(11);
    Transformer b(scaled);
    init_weights(b, InitConfig{});
    auto pa = a->named_parameters(), pb = b->named_parameters();
    ASSERT_EQ(pb.size(), pa.size() + 1) << layout;
    ASSERT_TRUE(pb.contains("embed_scale")) << layout;
    EXPECT_EQ(role_of(pb["embed_scale"]), Role::kGain) << layout;
    EXPECT_TRUE(torch::equal(pb["embed_scale"], torch::full({1}, 5.5))) << layout;
    for (const auto& kv : pa) EXPECT_TRUE(torch::equal(kv.value(), pb[kv.key()])) << layout << " " << kv.key();
    {
      torch::NoGradGuard ng;
      a->tok_emb->weight.mul_(5.5);
      a->pos_emb->weight.mul_(5.5);
    }
    const auto idx = torch::randint(0, plain.vocab_size, {2, plain.ctx});
    const auto la = a->forward(idx), lb = b->forward(idx);
    EXPECT_TRUE(torch::allclose(la, lb, 1e-5, 1e-5)) << layout << " " << (la - lb).abs().max().item<double>();
    auto loss = [&] {
      return torch::nn::functional::cross_entropy(b->forward(idx).reshape({-1, plain.vocab_size}), idx.reshape({-1}));
    };
    b->zero_grad();
    loss().backward();
    const double g = pb["embed_scale"].grad().item<double>();
    double up, down;
    {
      torch::NoGradGuard ng;
      const double h = 1e-2;
      pb["embed_scale"].add_(h);
      up = loss().item<double>();
      pb["embed_scale"].sub_(2 * h);
      down = loss().item<double>();
      pb["embed_scale"].add_(h);
      EXPECT_NEAR(g, (up - down) / (2 * h), 2e-3 + 2e-2 * std::abs(g)) << layout;
    }
  }
}

// init.zero_query needs a query that reaches the scores unnormalised: one line naming the key for
// model.qk_norm and for the layouts that normalise q; any parametrization and the other layouts take it.
TEST(TransformerTest, ZeroQueryRefusesANormalisedQuery) {
  struct Case {
    std::string yaml, text;
  };
  const std::vector<Case> cases = {
      {"init: {zero_query: true}\nmodel: {qk_norm: true}", "model.qk_norm"},
      {"init: {zero_query: true}\nmodel: {layout: hybrid}", "layout hybrid"},
      {"init: {zero_query: true}\nmodel: {layout: ngpt, pos: rope, ffn: swiglu, tie_embeddings: false}\n"
       "optim: {weight_decay: 0}",
       "layout ngpt"},
  };
  for (const Case& c : cases) {
    const auto p = testing::config_problems(c.yaml);
    ASSERT_EQ(p.size(), 1u) << c.yaml << (p.empty() ? "" : "\n" + p[0]);
    EXPECT_NE(p[0].find("init.zero_query"), std::string::npos) << p[0];
    EXPECT_NE(p[0].find(c.text), std::string::npos) << p[0];
    EXPECT_EQ(p[0].find('\n'), std::string::npos) << p[0];
  }
  for (const char* layout : {"pre", "post", "deepnorm", "sandwich", "mix", "lns"}) {
    EXPECT_TRUE(testing::config_problems(std::string("init: {zero_query: true}\nmodel: {layout: ") + layout + "}").empty())
        << layout;
  }
  EXPECT_TRUE(testing::config_problems("init: {zero_query: true}\nparam: {type: mup, base_width: 64}").empty());
}

// ---- Named per-layer series (src/metrics/README.md): the stream statistics by their formulas.

double only(const LayerSeries& s, const std::string& name) { return s.get(name).at(0).item<double>(); }

TEST(LayerSeriesTest, StreamKurtosisIsMeanFourthPowerOverSquaredMeanSquare) {
  LayerSeries s;
  add_stream_stats(s, torch::tensor({1.0, -1.0, 1.0, -1.0}));  // m2 = 1, m4 = 1
  add_stream_stats(s, torch::tensor({0.0, 0.0, 0.0, 2.0}));    // m2 = 1, m4 = 4: one outlier
  ASSERT_EQ(s.get("act_kurtosis").size(), 2u);
  EXPECT_DOUBLE_EQ(s.get("act_kurtosis")[0].item<double>(), 1.0);
  EXPECT_DOUBLE_EQ(s.get("act_kurtosis")[1].item<double>(), 4.0);
  EXPECT_DOUBLE_EQ(s.get("act_rms")[1].item<double>(), 1.0);
  EXPECT_DOUBLE_EQ(s.get("act_max")[1].item<double>(), 2.0);
  // Kurtosis about zero is scale invariant and 3 for a Gaussian (standard error sqrt(96/n) here).
  torch::manual_seed(5);
  auto g = torch::randn({1 << 20});
  LayerSeries gs, gs7;
  add_stream_stats(gs, g);
  add_stream_stats(gs7, 7.0 * g);
  EXPECT_NEAR(only(gs, "act_kurtosis"), 3.0, 0.05);
  EXPECT_NEAR(only(gs7, "act_kurtosis"), only(gs, "act_kurtosis"), 1e-4);
}

TEST(LayerSeriesTest, SeriesKeepTheOrderTheyWereFirstAddedIn) {
  LayerSeries s;
  s.add("b", torch::tensor(1.0));
  s.add("a", torch::tensor(2.0));
  s.add("b", torch::tensor(3.0));
  ASSERT_EQ(s.all().size(), 2u);
  EXPECT_EQ(s.all()[0].first, "b");
  EXPECT_EQ(s.get("b").size(), 2u);
  EXPECT_TRUE(s.get("missing").empty());
}

TEST(LayerSeriesTest, CapturedStreamStatisticsMatchTheStreamRecomputedBlockByBlock) {
  for (const char* layout : {"pre", "post", "sandwich"}) {
    torch::manual_seed(11);
    Transformer t(small_model(layout));
    init_weights(t, InitConfig{});
    {
      // Spread the weights so the stream is far from Gaussian-like init noise.
      torch::NoGradGuard ng;
      for (auto& p : t->parameters()) p.add_(torch::randn_like(p) * 0.2);
    }
    auto tokens = torch::randint(0, 256, {3, 16}, torch::kLong);
    t->set_capture(true);
    torch::NoGradGuard ng;
    t->hidden(tokens);
    const LayerSeries& s = t->stats();
    const int64_t L = t->n_blocks();
    ASSERT_EQ(s.get("act_kurtosis").size(), static_cast<size_t>(L + 1)) << layout;
    auto x = t->tok_emb(tokens) + t->pos_emb->weight.narrow(0, 0, 16);
    for (int64_t j = 0; j <= L; ++j) {
      auto xd = x.to(torch::kDouble);
      const double m2 = xd.pow(2).mean().item<double>(), m4 = xd.pow(4).mean().item<double>();
      EXPECT_NEAR(s.get("act_kurtosis")[j].item<double>(), m4 / (m2 * m2), 1e-5 * m4 / (m2 * m2)) << layout << j;
      EXPECT_NEAR(s.get("act_rms")[j].item<double>(), std::sqrt(m2), 1e-5 * std::sqrt(m2)) << layout << j;
      EXPECT_NEAR(s.get("act_max")[j].item<double>(), xd.abs().max().item<double>(), 1e-6) << layout << j;
      if (j < L) x = t->block(j)->forward(x);
    }
  }
}

}  // namespace
}  // namespace normlab
