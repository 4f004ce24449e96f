// nGPT and ResiDual as whole models: nGPT's forward against its equations written out (RoPE, unit
// q and k, the sqrt(dh) scale, the steps toward each sublayer's output, SwiGLU with s_u / s_v, the
// s_z logit scale), its renormalisation (rows and columns over d, after init), its stored init
// and its config scope; ResiDual's head input x + final_norm(dual).
#include <gtest/gtest.h>

#include <cmath>

#include "config/load.h"
#include "core/errors.h"
#include "model/transformer.h"
#include "train/run_config.h"
#include "test_util.h"

namespace normlab {
namespace {

ModelConfig ngpt_config() {
  ModelConfig m;
  m.vocab_size = 13;
  m.ctx = 6;
  m.d_model = 8;
  m.n_layers = 2;
  m.n_heads = 2;
  m.d_ff = 12;
  m.layout = "ngpt";
  m.pos = Position::kRope;
  m.ffn = "swiglu";
  m.tie_embeddings = false;
  resolve_model_config(m);
  return m;
}

torch::Tensor N(const torch::Tensor& z) { return z / z.norm(2, -1, true); }

// RoPE of (B, T, H, dh) by the contract: dimension j < dh/2 rotates with j + dh/2 by angle
// t * 10000^(-2j/dh).
torch::Tensor rope(const torch::Tensor& x) {
  auto out = x.clone();
  const int64_t T = x.size(1), dh = x.size(3), half = dh / 2;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < half; ++j) {
      const double a = t * std::pow(10000.0, -2.0 * j / dh), c = std::cos(a), s = std::sin(a);
      auto x1 = x.select(1, t).select(-1, j), x2 = x.select(1, t).select(-1, j + half);
      out.select(1, t).select(-1, j).copy_(x1 * c - x2 * s);
      out.select(1, t).select(-1, j + half).copy_(x2 * c + x1 * s);
    }
  }
  return out;
}

TEST(NgptTest, ForwardEqualsItsEquationsWrittenOut) {
  ModelConfig m = ngpt_config();
  torch::manual_seed(4);
  Transformer t(m);
  init_weights(t, InitConfig{});
  t->to(torch::kDouble);
  {  // away from init: the scales and steps must each show
    torch::NoGradGuard ng;
    for (auto& kv : t->named_parameters()) {
      if (kv.value().dim() == 1) kv.value().mul_(1.0 + 0.5 * torch::rand_like(kv.value()));
    }
  }
  auto tokens = torch::randint(0, m.vocab_size, {2, m.ctx}, torch::kLong);
  torch::NoGradGuard ng;
  auto got = t->forward(tokens);

  auto p = t->named_parameters();
  const int64_t B = 2, T = m.ctx, H = 2, dh = 4, d = 8;
  const double sd = std::sqrt(8.0), alpha_init = 0.05;
  auto h = p["tok_emb.weight"].index_select(0, tokens.view({-1})).view({B, T, d});
  auto mask = torch::ones({T, T}, torch::kBool).triu(1);
  for (int64_t i = 0; i < 2; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    auto heads = [&](const torch::Tensor& z) { return z.view({B, T, H, dh}); };
    auto Q = (sd * p[b + "attn.s_qk"]).view({1, 1, H, dh});
    auto q = Q * N(rope(heads(torch::matmul(h, p[b + "attn.q_proj.weight"].t()))));
    auto k = Q * N(rope(heads(torch::matmul(h, p[b + "attn.k_proj.weight"].t()))));
    auto v = heads(torch::matmul(h, p[b + "attn.v_proj.weight"].t()));
    auto s = std::sqrt(static_cast<double>(dh)) * torch::matmul(q.transpose(1, 2), k.transpose(1, 2).transpose(-2, -1));
    auto P = torch::softmax(s.masked_fill(mask, -INFINITY), -1);
    auto o = torch::matmul(P, v.transpose(1, 2)).transpose(1, 2).reshape({B, T, d});
    auto hA = torch::matmul(o, p[b + "attn.out_proj.weight"].t());
    auto a1 = (alpha_init * sd * p[b + "alpha1"]).abs();
    h = N(N(h) + a1 * (N(hA) - N(h)));
    auto u = (sd * p[b + "ffn.s_u"]) * torch::matmul(h, p[b + "ffn.fc1.weight"].t());
    auto g = (sd * p[b + "ffn.s_v"]) * torch::matmul(h, p[b + "ffn.gate.weight"].t());
    auto hM = torch::matmul(u * torch::silu(g), p[b + "ffn.fc2.weight"].t());
    auto a2 = (alpha_init * sd * p[b + "alpha2"]).abs();
    h = N(N(h) + a2 * (N(hM) - N(h)));
  }
  auto want = (sd * p["s_z"]) * torch::matmul(h, p["lm_head.weight"].t());
  EXPECT_TRUE(torch::allclose(got, want, 1e-10, 1e-12)) << (got - want).abs().max().item<double>();
}

TEST(NgptTest, InitStoresTheContractValuesAndUnitNormMatrices) {
  ModelConfig m = ngpt_config();
  torch::manual_seed(1);
  Transformer t(m);
  init_weights(t, InitConfig{});
  auto p = t->named_parameters();
  const double isd = 1.0 / std::sqrt(8.0);
  EXPECT_TRUE(torch::allclose(p["blocks.1.alpha1"], torch::full({8}, isd)));
  EXPECT_TRUE(torch::allclose(p["blocks.0.attn.s_qk"], torch::full({8}, isd)));
  EXPECT_TRUE(torch::equal(p["blocks.0.ffn.s_u"], torch::ones({12})));
  EXPECT_TRUE(torch::allclose(p["s_z"], torch::full({13}, isd)));
  EXPECT_FALSE(p.contains("pos_emb.weight"));
  EXPECT_FALSE(p.contains("final_norm.weight"));
  auto unit = [](const torch::Tensor& w, int64_t dim) { return (w.norm(2, dim) - 1).abs().max().item<double>(); };
  for (const auto& kv : p) {
    const std::string& n = kv.key();
    const bool rows = n == "tok_emb.weight" || n == "lm_head.weight" || n.find("q_proj") != std::string::npos ||
                      n.find("k_proj") != std::string::npos || n.find("v_proj") != std::string::npos ||
                      n.find("fc1") != std::string::npos || n.find("ffn.gate") != std::string::npos;
    const bool cols = n.find("out_proj") != std::string::npos || n.find("fc2") != std::string::npos;
    if (rows) {
      EXPECT_LT(unit(kv.value(), 1), 1e-6) << n;
    }
    if (cols) {
      EXPECT_LT(unit(kv.value(), 0), 1e-6) << n;
    }
    if (kv.value().dim() == 2) {
      EXPECT_TRUE(rows || cols) << n << " is a matrix the renormalisation misses";
    }
  }
  // after_update renormalises whatever an update did.
  {
    torch::NoGradGuard ng;
    p["blocks.1.attn.out_proj.weight"].mul_(3.0);
    p["tok_emb.weight"].add_(0.5);
  }
  t->after_update();
  EXPECT_LT(unit(p["blocks.1.attn.out_proj.weight"], 0), 1e-6);
  EXPECT_LT(unit(p["tok_emb.weight"], 1), 1e-6);
}

TEST(NgptTest, ScopeRulesAreOneLineConfigErrors) {
  const std::vector<std::string> ok = {"model.layout=ngpt", "model.pos=rope", "model.ffn=swiglu",
                                       "model.tie_embeddings=false", "optim.weight_decay=0"};
  EXPECT_TRUE(testing::config_problems("", ok).empty()) << testing::config_problems("", ok)[0];
  struct Case {
    std::string set, key;
  };
  for (const Case& c : std::vector<Case>{{"model.pos=learned", "model.pos"},
                                         {"model.ffn=gelu", "model.ffn"},
                                         {"model.tie_embeddings=true", "model.tie_embeddings"},
                                         {"model.bias=true", "model.bias"},
                                         {"optim.weight_decay=0.1", "optim.weight_decay"},
                                         {"model.norm.type=rmsnorm", "model.norm.type"},
                                         {"model.norm.eps=1e-5", "model.norm.eps"},
                                         {"model.qk_norm=true", "model.qk_norm"},
                                         {"model.v_norm=true", "model.v_norm"},
                                         {"model.embed_norm=true", "model.embed_norm"},
                                         {"model.layerscale=0.1", "model.layerscale"},
                                         {"optim.qk_clip=50", "optim.qk_clip"},
                                         {"model.residual.type=hc", "model.residual.type"}}) {
    auto set = ok;
    set.push_back(c.set);
    const auto p = testing::config_problems("", set);
    ASSERT_EQ(p.size(), 1u) << c.set << (p.size() > 1 ? ": " + p[0] + " | " + p[1] : "");
    EXPECT_NE(p[0].find(c.key), std::string::npos) << p[0];
  }
  EXPECT_NE(testing::config_problems("", {"model.ngpt.alpha_init=0.1"})[0].find("belongs to layout ngpt"), std::string::npos);
}

TEST(ResiDualTest, HeadReadsThePostLnStreamPlusTheNormalisedDualStream) {
  ModelConfig m = ngpt_config();
  m.layout = "resi_dual";
  m.pos = Position::kLearned;
  torch::manual_seed(2);
  Transformer t(m);
  init_weights(t, InitConfig{});
  t->to(torch::kDouble);
  auto tokens = torch::randint(0, m.vocab_size, {2, m.ctx}, torch::kLong);
  torch::NoGradGuard ng;
  auto got = t->hidden(tokens);
  auto e = t->tok_emb(tokens) + t->pos_emb->weight.narrow(0, 0, m.ctx);
  auto x = e, dual = e;
  for (int64_t i = 0; i < m.n_layers; ++i) {
    auto& b = t->block(i);
    auto y = b->attn(x);
    dual = dual + y;
    x = b->norm("norm1", x + y);
    y = b->ffn(x);
    dual = dual + y;
    x = b->norm("norm2", x + y);
  }
  auto want = x + t->final_norm->forward(dual);
  EXPECT_TRUE(torch::allclose(got, want, 1e-12, 1e-12));
  // The statistics read the Post-LN x: act_rms of block 1's entry.
  t->set_capture(true);
  t->hidden(tokens);
  EXPECT_EQ(t->stats().get("act_rms").size(), 3u);
}

}  // namespace
}  // namespace normlab
