// QK-Clip (src/train/README.md): the clip puts every head whose max logit S exceeded tau at
// exactly tau on the batch S was measured on, leaves the others alone, and counts the heads.
#include "train/qk_clip.h"

#include <gtest/gtest.h>

namespace normlab {
namespace {

ModelConfig model(bool bias, bool rope, int64_t L = 3) {
  ModelConfig m;
  m.ctx = 16;
  m.d_model = 32;
  m.n_heads = 4;
  m.d_ff = 64;
  m.n_layers = L;
  m.bias = bias;
  m.pos = rope ? Position::kRope : Position::kLearned;
  resolve_model_config(m);
  return m;
}

torch::Tensor head_maxima(Transformer& t, const torch::Tensor& tokens) {
  t->set_track_head_max(true);
  apply_qk_clip(t, 1.0, nullptr, /*apply=*/false);  // reset
  t->forward(tokens);
  std::vector<torch::Tensor> m;
  for (int64_t i = 0; i < t->n_blocks(); ++i) m.push_back(t->block(i)->attention()->take_head_max());
  return torch::stack(m);  // (L, H)
}

// Exact for the first block; a later block's input changes with the clipped blocks before it, so
// there the bound holds for the inputs S was measured on, which a one-block model shows.
TEST(QkClipTest, ClippedHeadsEndAtTauOnTheSameBatchOthersUnchanged) {
  for (int64_t L : {1, 3}) {
    for (bool bias : {false, true}) {
      for (bool rope : {false, true}) {
        torch::manual_seed(5);
        Transformer t(model(bias, rope, L));
        init_weights(t, InitConfig{});
        {
          torch::NoGradGuard ng;
          for (int64_t i = 0; i < L; ++i) {  // spread the heads' logits over a wide range
            auto& a = t->block(i)->attention();
            for (int64_t h = 0; h < 4; ++h) a->q_proj->weight.narrow(0, h * 8, 8).mul_(20.0 * (h + 1) * (i + 1));
            if (bias) {
              a->q_proj->bias.normal_(0, 0.5);
              a->k_proj->bias.normal_(0, 0.5);
            }
          }
        }
        auto tokens = torch::randint(0, 256, {3, 16}, torch::kLong);
        auto before = head_maxima(t, tokens);
        const double tau = before.flatten().median().item<double>();
        const int64_t expected_clips = (before > tau).sum().item<int64_t>();
        ASSERT_GT(expected_clips, 0);
        t->set_track_head_max(true);  // measure, then clip
        apply_qk_clip(t, tau, nullptr, false);
        t->forward(tokens);
        EXPECT_EQ(apply_qk_clip(t, tau, nullptr), expected_clips);
        auto after = head_maxima(t, tokens);
        auto want = torch::minimum(before, torch::full_like(before, tau));
        EXPECT_TRUE(torch::allclose(after[0], want[0], 1e-4, 1e-4))
            << "L " << L << " bias " << bias << " rope " << rope << "\n" << before << "\n" << after;
        if (L == 1) {
          EXPECT_LE(after.max().item<double>(), tau * (1 + 1e-5));
        }
      }
    }
  }
}

TEST(QkClipTest, NothingAboveTauMeansNoChangeAndNoCount) {
  torch::manual_seed(6);
  Transformer t(model(false, false));
  init_weights(t, InitConfig{});
  auto tokens = torch::randint(0, 256, {2, 16}, torch::kLong);
  auto before = head_maxima(t, tokens);
  auto w = t->block(1)->attention()->q_proj->weight.clone();
  t->forward(tokens);
  EXPECT_EQ(apply_qk_clip(t, before.max().item<double>() * 2, nullptr), 0);
  EXPECT_TRUE(torch::equal(t->block(1)->attention()->q_proj->weight, w));
}

}  // namespace
}  // namespace normlab
