#include "model/transformer.h"

#include <gtest/gtest.h>

#include <set>

namespace normlab {
namespace {

ModelConfig small(const std::string& layout = "pre") {
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
  Transformer t(small());
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

TEST(TransformerTest, UntiedHeadAndBiasOptionsAddTheirTensors) {
  auto m = small();
  m.tie_embeddings = false;
  m.bias = true;
  m.norm.keys.set("norm.bias", false);
  Transformer t(m);
  auto n = names(t);
  EXPECT_TRUE(n.count("lm_head.weight"));
  EXPECT_TRUE(n.count("blocks.0.attn.q_proj.bias"));
  EXPECT_TRUE(n.count("blocks.2.attn.out_proj.bias"));
  EXPECT_FALSE(n.count("blocks.2.ffn.fc2.bias"));  // contract section 5: attention biases only
  EXPECT_FALSE(n.count("blocks.0.norm1.bias"));
  EXPECT_FALSE(n.count("final_norm.bias"));
}

TEST(TransformerTest, LogitsShapeAndTiedHeadIsTokEmbTransposed) {
  torch::manual_seed(0);
  Transformer t(small());
  init_weights(t, InitConfig{});
  auto tok = torch::randint(0, 256, {2, 10}, torch::kLong);
  auto logits = t->forward(tok);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 10, 256}));
  EXPECT_THROW(t->forward(torch::zeros({1, 17}, torch::kLong)), c10::Error);
}

TEST(TransformerTest, ChangingALaterTokenNeverChangesEarlierLogits) {
  torch::manual_seed(0);
  Transformer t(small());
  init_weights(t, InitConfig{});
  t->eval();
  auto a = torch::randint(0, 256, {1, 12}, torch::kLong);
  auto b = a.clone();
  b[0][7] = (a[0][7].item<int64_t>() + 1) % 256;
  auto la = t->forward(a), lb = t->forward(b);
  EXPECT_TRUE(torch::equal(la.narrow(1, 0, 7), lb.narrow(1, 0, 7)));
  EXPECT_FALSE(torch::allclose(la.narrow(1, 7, 1), lb.narrow(1, 7, 1)));
}

TEST(TransformerTest, DefaultInitStdsFollowTheContract) {
  auto m = small();
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

}  // namespace
}  // namespace normlab
