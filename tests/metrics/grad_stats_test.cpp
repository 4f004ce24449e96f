#include "metrics/grad_stats.h"

#include <gtest/gtest.h>

#include "metrics/probe.h"
#include "model/transformer.h"
#include "model/roles.h"
#include "optim/optimizer.h"
#include "train/step.h"

namespace normlab {
namespace {

Transformer model_with_grads(const std::string& layout, const std::string& residual = "add",
                             std::string vres = "none") {
  ModelConfig m;
  m.ctx = 8;
  m.d_model = 16;
  m.n_layers = 3;
  m.n_heads = 2;
  m.d_ff = 32;
  m.layout = layout;
  m.embed_norm = true;
  m.residual.type = residual;
  m.value_residual = vres;
  resolve_model_config(m);
  torch::manual_seed(0);
  Transformer t(m);
  init_weights(t, InitConfig{});
  auto tok = torch::randint(0, 256, {2, 8}, torch::kLong);
  auto logits = t->forward(tok);
  torch::nn::functional::cross_entropy(logits.reshape({-1, 256}), tok.reshape({-1})).backward();
  return t;
}

// The groups against sums written out here from the contract's tensor names (the test's own
// oracle; GradStats reads no name) and the declared roles: a block's mixing parameters (HC, mHC,
// AttnRes, value residual) are their own group, in neither the attention's nor the norms' series.
TEST(GradStatsTest, PartsSquareSumToTotalWithTiedWeightCountedOnceUnderEmbed) {
  struct Case {
    const char* layout;
    const char* residual;
    std::string vres;
  };
  for (const Case& c : {Case{"pre", "add", "none"}, Case{"sandwich", "add", "none"},
                        Case{"normformer", "add", "none"}, Case{"pre", "hc", "token"},
                        Case{"pre", "mhc", "scalar"}, Case{"lns", "attnres", "none"}}) {
    SCOPED_TRACE(std::string(c.layout) + " " + c.residual);
    auto t = model_with_grads(c.layout, c.residual, c.vres);
    std::vector<std::string> names;
    std::vector<torch::Tensor> params;
    for (auto& kv : t->named_parameters()) {
      names.push_back(kv.key());
      params.push_back(kv.value());
    }
    GradStats gs(param_places(*t, params), 3);
    GradNorms g = gs.unpack(gs.squared(params));
    // Manual computation over named_parameters().
    auto sq = [&](auto pred) {
      double s = 0;
      for (size_t i = 0; i < names.size(); ++i) {
        if (pred(names[i], *role_of(params[i]) == Role::kMixing)) s += params[i].grad().pow(2).sum().item<double>();
      }
      return std::sqrt(s);
    };
    auto starts = [](const std::string& n, const std::string& p) { return n.rfind(p, 0) == 0; };
    EXPECT_NEAR(g.total, sq([](auto&, bool) { return true; }), 1e-6);
    const bool mixing = std::string(c.residual) != "add" || c.vres != "none";
    EXPECT_EQ(g.has_mixing, mixing);
    for (int i = 0; i < 3; ++i) {
      const std::string b = "blocks." + std::to_string(i) + ".";
      EXPECT_NEAR(g.block[i], sq([&](auto& n, bool) { return starts(n, b); }), 1e-6);
      EXPECT_NEAR(g.attn[i], sq([&](auto& n, bool mix) { return starts(n, b + "attn.") && !mix; }), 1e-6);
      EXPECT_NEAR(g.ffn[i], sq([&](auto& n, bool mix) { return starts(n, b + "ffn.") && !mix; }), 1e-6);
      EXPECT_NEAR(g.norms[i], sq([&](auto& n, bool mix) {
                    return starts(n, b) && !starts(n, b + "attn.") && !starts(n, b + "ffn.") && !mix;
                  }), 1e-6);
      EXPECT_NEAR(g.mixing[i], sq([&](auto& n, bool mix) { return starts(n, b) && mix; }), 1e-6);
      if (mixing && i > 0) {
        EXPECT_GT(g.mixing[i], 0) << i;
      }
      EXPECT_NEAR(g.block[i] * g.block[i],
                  g.attn[i] * g.attn[i] + g.ffn[i] * g.ffn[i] + g.norms[i] * g.norms[i] + g.mixing[i] * g.mixing[i], 1e-6);
    }
    EXPECT_NEAR(g.embed, sq([&](auto& n, bool) { return starts(n, "tok_emb.") || starts(n, "pos_emb.") || starts(n, "embed_norm."); }), 1e-6);
    EXPECT_NEAR(g.head, sq([&](auto& n, bool) {
                  return !starts(n, "blocks.") && !starts(n, "tok_emb.") && !starts(n, "pos_emb.") && !starts(n, "embed_norm.");
                }), 1e-6);
    double parts = g.embed * g.embed + g.head * g.head;
    for (double b : g.block) parts += b * b;
    EXPECT_NEAR(std::sqrt(parts), g.total, 1e-6);
  }
}

TEST(UpdateProbeTest, UpdateRatioEqualsHandComputedNormOfDeltaOverNorm) {
  auto t = model_with_grads("pre");
  std::vector<std::string> names;
  std::vector<torch::Tensor> params;
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (auto& kv : t->named_parameters()) {
    names.push_back(kv.key());
    params.push_back(kv.value());
    named.emplace_back(kv.key(), kv.value());
  }
  GradStats gs(param_places(*t, params), 3);
  Optimizer opt(named, OptimConfig{});
  std::vector<torch::Tensor> before;
  for (auto& p : params) before.push_back(p.detach().clone());
  UpdateProbe probe;
  probe.before(params);
  opt.step(1e-2);
  auto ratio = probe.update_ratio(params, gs, 3);
  for (int i = 0; i < 3; ++i) {
    double d2 = 0, w2 = 0;
    const std::string b = "blocks." + std::to_string(i) + ".";
    for (size_t k = 0; k < names.size(); ++k) {
      if (names[k].rfind(b, 0) != 0) continue;
      d2 += (params[k].detach() - before[k]).pow(2).sum().item<double>();
      w2 += before[k].pow(2).sum().item<double>();
    }
    EXPECT_NEAR(ratio[i].item<double>(), std::sqrt(d2 / w2), 1e-6);
    EXPECT_GT(ratio[i].item<double>(), 0);
  }
}

TEST(FlatTest, ReadsBackEachPartInOrder) {
  Flat f;
  auto a = f.add(torch::tensor(2.5));
  auto b = f.add(std::vector<torch::Tensor>{torch::tensor(1.0f), torch::tensor(3.0f)});
  auto c = f.add(torch::arange(3, torch::kLong));
  f.fetch();
  EXPECT_EQ(f.scalar(a), 2.5);
  EXPECT_EQ(f.get(b), (std::vector<double>{1, 3}));
  EXPECT_EQ(f.get(c), (std::vector<double>{0, 1, 2}));
}

}  // namespace
}  // namespace normlab
