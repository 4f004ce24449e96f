// The coordinate check (src/train/README.md, "Coordinate check"): the model's coordinate statistics
// against mean |x| written out here from its weights (embedding, block 0's attention output and
// scores with the µP score scale, FFN output, stream, head input, logits with the readout
// multiplier), the slope fit on values of known slopes (per-block tracks over width and depth, NaN,
// the worst slope at t >= 2), and (CoordCheckRunTest, integration tier) a small real check: flat
// under mup, not under sp; the command's files, table and one-line errors.
#include "train/coordcheck.h"

#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/errors.h"
#include "config/config.h"
#include "core/json.h"
#include "core/sha256.h"
#include "model/parametrization.h"
#include "model/transformer.h"
#include "test_util.h"

namespace normlab {
namespace {

using testing::TempDir;

double value(const torch::Tensor& t) { return t.item<double>(); }
double mabs(const torch::Tensor& t) { return t.detach().to(torch::kDouble).abs().mean().item<double>(); }

// The statistics of one forward against the same quantities computed here from the weights, at a
// width where every µP factor is live (m_N = 2, output_mult 3, base_head_dim 24).
TEST(CoordCaptureTest, EveryStatisticIsTheMeanAbsOfItsTensor) {
  Config c;
  c.model.ctx = 16;
  c.model.d_model = 64;
  c.model.n_heads = 4;
  c.model.d_ff = 256;
  c.model.n_layers = 2;
  c.model.tie_embeddings = false;
  c.param.type = "mup";
  c.param.base_width = 32;
  c.param.base_head_dim = 24;
  c.param.output_mult = 3.0;
  resolve_model_config(c.model);
  resolve_param_config(c.param, c.model);
  torch::manual_seed(11);
  Transformer t(c.model, c.param);
  init_weights(t, c.init);
  t->eval();
  torch::NoGradGuard ng;
  const auto tokens = torch::randint(0, 256, {2, 16}, torch::kLong);
  t->set_coord_capture(true);
  const auto logits = t->forward(tokens);
  const LayerSeries s = t->coord_stats();  // a copy: the forwards below refill the model's
  ASSERT_EQ(s.get("embed").size(), 1u);
  for (const char* name : {"attn_out", "ffn_out", "attn_logits", "attn_logits_causal", "stream"})
    EXPECT_EQ(s.get(name).size(), 2u) << name;
  ASSERT_EQ(s.get("head_in").size(), 1u);
  ASSERT_EQ(s.get("logits").size(), 1u);

  // Block 0 (pre): x1 = x + attn(norm1(x)), x2 = x1 + ffn(norm2(x1)).
  const auto x = t->tok_emb(tokens) + t->pos_emb->weight.narrow(0, 0, 16);
  EXPECT_NEAR(value(s.get("embed")[0]), mabs(x), 1e-6 * mabs(x));
  auto& b = t->block(0);
  const auto z = b->norm_module("norm1")->forward(x);
  auto& attn = b->attention();
  const auto a = attn->forward(z);
  EXPECT_NEAR(value(s.get("attn_out")[0]), mabs(a), 1e-6 * mabs(a));
  const auto q = attn->q_proj(z).view({2, 16, 4, -1}).transpose(1, 2);
  const auto k = attn->k_proj(z).view({2, 16, 4, -1}).transpose(1, 2);
  const double dh = 16;
  const auto scores = torch::matmul(q, k.transpose(-2, -1)) * (std::sqrt(24.0) / dh);  // µP: sqrt(base_head_dim) / dh
  EXPECT_NEAR(value(s.get("attn_logits")[0]), mabs(scores), 1e-5 * mabs(scores));
  // The causal entries alone: the mean of |s_ij| over j <= i (136 of the 256 a head holds).
  const auto causal = scores.abs().masked_select(torch::ones({16, 16}, torch::kBool).tril());
  EXPECT_EQ(causal.numel(), 2 * 4 * 136);
  const double want_causal = causal.mean().item<double>();
  EXPECT_NEAR(value(s.get("attn_logits_causal")[0]), want_causal, 1e-5 * want_causal);
  EXPECT_GT(std::abs(want_causal - mabs(scores)), 1e-3 * want_causal);  // a different statistic
  const auto x1 = x + a;
  const auto f = b->feed_forward()->forward(b->norm_module("norm2")->forward(x1));
  EXPECT_NEAR(value(s.get("ffn_out")[0]), mabs(f), 1e-6 * mabs(f));
  EXPECT_NEAR(value(s.get("stream")[0]), mabs(x1 + f), 1e-6 * mabs(x1 + f));

  // The head: its input before the readout multiplier; the logits after it.
  const auto h = t->hidden(tokens);
  EXPECT_NEAR(value(s.get("head_in")[0]), mabs(h), 1e-6 * mabs(h));
  const auto want_logits = torch::matmul(h * (3.0 / 2.0), t->lm_head->weight.t());
  EXPECT_NEAR(value(s.get("logits")[0]), mabs(want_logits), 1e-5 * mabs(want_logits));
  EXPECT_NEAR(value(s.get("logits")[0]), mabs(logits), 1e-6 * mabs(logits));

  // Off: the next forward records nothing.
  t->set_coord_capture(false);
  t->forward(tokens);
  EXPECT_TRUE(t->coord_stats().get("embed").empty());
}

// A check whose values follow known power laws: mean |x| = c size^a.
CoordCheck synthetic(CoordAxis axis, const std::vector<int64_t>& sizes, int64_t steps,
                     const std::function<double(const std::string&, int64_t t, size_t block, int64_t size, size_t blocks)>& f,
                     const std::function<size_t(int64_t size)>& blocks) {
  CoordCheck c;
  c.axis = axis;
  c.sizes = sizes;
  c.steps = steps;
  for (const auto& n : coord_module_names()) {
    CoordModule m;
    m.name = n;
    m.per_block = n == "attn_out" || n == "ffn_out" || n == "attn_logits" || n == "attn_logits_causal" || n == "stream";
    for (int64_t t = 1; t <= steps; ++t) {
      std::vector<std::vector<double>> by_size;
      for (const int64_t size : sizes) {
        const size_t nb = m.per_block ? blocks(size) : 1;
        std::vector<double> v;
        for (size_t b = 0; b < nb; ++b) v.push_back(f(n, t, b, size, nb));
        by_size.push_back(v);
      }
      m.values.push_back(by_size);
    }
    c.modules.push_back(m);
  }
  return c;
}

const CoordModule& module(const CoordCheck& c, const std::string& name) {
  for (const auto& m : c.modules)
    if (m.name == name) return m;
  throw std::runtime_error(name);
}

TEST(CoordSlopeTest, SlopeIsTheLargestLeastSquaresSlopeOverBlocks) {
  // Width: block 1 of attn_out grows as size^0.7 from t = 3 on, block 0 as size^-0.2; logits
  // shrink as size^-0.5 at t = 1 only; everything else is flat.
  auto f = [](const std::string& n, int64_t t, size_t b, int64_t size, size_t) {
    const double s = static_cast<double>(size);
    if (n == "attn_out") return 2.0 * std::pow(s, b == 1 && t >= 3 ? 0.7 : -0.2);
    if (n == "logits" && t == 1) return std::pow(s, -0.5);
    return 1.5;
  };
  CoordCheck c = synthetic(CoordAxis::kWidth, {64, 128, 256, 512}, 4, f, [](int64_t) { return size_t{3}; });
  fit_coord_slopes(c);
  const auto& a = module(c, "attn_out");
  EXPECT_NEAR(a.slope[0], -0.2, 1e-12);
  EXPECT_EQ(a.track[0], 0);  // |-0.2| over blocks 0..2: the first block of that |slope|
  EXPECT_NEAR(a.slope[2], 0.7, 1e-12);
  EXPECT_EQ(a.track[2], 1);
  EXPECT_NEAR(a.curve[2][3], 2.0 * std::pow(512.0, 0.7), 1e-9);  // the drawn line is block 1's
  EXPECT_NEAR(module(c, "logits").slope[0], -0.5, 1e-12);
  EXPECT_EQ(module(c, "logits").track[0], -1);
  EXPECT_NEAR(module(c, "embed").slope[1], 0.0, 1e-12);
  // Worst at t >= 2: attn_out's 0.7 at t = 3 (logits' -0.5 at t = 1 does not count).
  EXPECT_NEAR(c.worst_after_first, 0.7, 1e-12);
  EXPECT_EQ(c.worst_module, "attn_out");
  EXPECT_EQ(c.worst_t, 3);
  const std::string table = coord_table(c);
  EXPECT_NE(table.find("largest |slope| at t >= 2: 0.700 (attn_out at t = 3)"), std::string::npos) << table;

  // A NaN (a diverged seed) anywhere at t >= 2 makes the worst slope NaN.
  auto& stream = *std::find_if(c.modules.begin(), c.modules.end(), [](const CoordModule& m) { return m.name == "stream"; });
  stream.values[1][2][0] = std::nan("");
  fit_coord_slopes(c);
  EXPECT_TRUE(std::isnan(module(c, "stream").slope[1]));
  EXPECT_TRUE(std::isnan(c.worst_after_first));
  EXPECT_EQ(c.worst_module, "stream");
  // A zero value has no log: NaN too.
  stream.values[1][2][0] = 1.5;
  c.modules[0].values[3][0][0] = 0.0;
  fit_coord_slopes(c);
  EXPECT_TRUE(std::isnan(module(c, "embed").slope[3]));
  // Exactly 0 at every size (init.zero_query's attention logits at t = 1) does not change with
  // size: slope 0, not NaN.
  for (auto& v : c.modules[0].values[3]) v[0] = 0.0;
  fit_coord_slopes(c);
  EXPECT_EQ(module(c, "embed").slope[3], 0.0);
  EXPECT_NEAR(c.worst_after_first, 0.7, 1e-12);
}

TEST(CoordSlopeTest, OverDepthTheMiddleAndLastBlocksAreFitted) {
  // Depth L in {2, 4, 8, 16}: the stream after the last block is L^0.5, after every other block 1:
  // the middle block is flat, the last grows. Block 0's attn_out falls as 1/L: not fitted over
  // depth (its relative depth changes with L).
  auto f = [](const std::string& n, int64_t, size_t b, int64_t, size_t nb) {
    if (n == "attn_out" && b == 0 && nb > 2) return 1.0 / static_cast<double>(nb);  // (at L = 2 block 0 is the middle)
    return n == "stream" && b + 1 == nb ? std::sqrt(static_cast<double>(nb)) : 1.0;
  };
  CoordCheck c = synthetic(CoordAxis::kDepth, {2, 4, 8, 16}, 2, f, [](int64_t L) { return static_cast<size_t>(L); });
  fit_coord_slopes(c);
  const auto& s = module(c, "stream");
  EXPECT_NEAR(s.slope[1], 0.5, 1e-12);
  EXPECT_EQ(s.track[1], 2);  // the last block
  EXPECT_NEAR(s.curve[1][3], 4.0, 1e-12);
  EXPECT_NEAR(module(c, "attn_out").slope[1], 0.0, 1e-12);
  EXPECT_NEAR(c.worst_after_first, 0.5, 1e-12);
}

// Each seed's own slope and the slope's 95 % interval over seeds: seeds whose values follow
// size^0.2, size^0.3, size^0.4 give slopes 0.2, 0.3, 0.4 and mean 0.3 +- t(0.975, 2) * 0.1 / sqrt(3);
// the interval's bound nearest 0 is the |slope| the seeds establish; coord.json keeps the seeds and
// reads them back; a coord.json without them gives no interval and says so.
TEST(CoordSlopeTest, SeedSpreadGivesTheSlopesInterval) {
  const std::vector<int64_t> sizes = {64, 128, 256, 512};
  const std::vector<double> exps = {0.2, 0.3, 0.4};
  auto f = [](const std::string&, int64_t, size_t, int64_t, size_t) { return 1.0; };
  CoordCheck c = synthetic(CoordAxis::kWidth, sizes, 3, f, [](int64_t) { return size_t{2}; });
  c.seeds = 3;
  for (auto& m : c.modules) {
    m.seed_values.assign(3, {});
    for (int64_t t = 1; t <= 3; ++t) {
      for (size_t i = 0; i < sizes.size(); ++i) {
        std::vector<std::vector<double>> by_seed;
        for (const double a : exps) {
          std::vector<double> blocks(m.values[0][i].size(), 1.0);
          // ffn_out's block 1 at t = 2 leans by seed; everything else is 1 in every seed.
          if (m.name == "ffn_out" && t == 2) blocks[1] = 3.0 * std::pow(static_cast<double>(sizes[i]), a);
          by_seed.push_back(blocks);
        }
        m.seed_values[static_cast<size_t>(t - 1)].push_back(by_seed);
        if (m.name == "ffn_out" && t == 2) {  // the seed mean the check would store
          double mean = 0;
          for (const auto& b : by_seed) mean += b[1] / 3.0;
          m.values[1][i][1] = mean;
        }
      }
    }
  }
  fit_coord_slopes(c);
  const auto& ffn = module(c, "ffn_out");
  ASSERT_EQ(ffn.seed_slopes[1].size(), 3u);
  for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(ffn.seed_slopes[1][k], exps[k], 1e-12);
  const double half = 4.302652729911275 * 0.1 / std::sqrt(3.0);  // t(0.975, 2) = 4.3027
  EXPECT_NEAR(ffn.slope_lo[1], 0.3 - half, 1e-9);
  EXPECT_NEAR(ffn.slope_hi[1], 0.3 + half, 1e-9);
  EXPECT_EQ(ffn.track[1], 1);
  EXPECT_NEAR(ffn.slope_lo[0], 0.0, 1e-12);  // flat in every seed: a zero-width interval at 0
  EXPECT_NEAR(ffn.slope_hi[0], 0.0, 1e-12);
  EXPECT_NEAR(c.established_after_first, 0.3 - half, 1e-9);
  EXPECT_EQ(c.established_module, "ffn_out");
  EXPECT_EQ(c.established_t, 2);
  EXPECT_NEAR(established_slope(-0.4, -0.1), 0.1, 1e-15);
  EXPECT_EQ(established_slope(-0.1, 0.2), 0.0);
  EXPECT_TRUE(std::isnan(established_slope(std::nan(""), 0.2)));
  const std::string table = coord_table(c);
  EXPECT_NE(table.find(fmt::format("largest |slope| the seeds establish at t >= 2 (the 95 % interval's bound nearest "
                                   "0): {:.3f} (ffn_out at t = 2: [{:+.3f}, {:+.3f}])",
                                   0.3 - half, 0.3 - half, 0.3 + half)),
            std::string::npos)
      << table;

  // coord.json keeps every seed's values: read back, the same intervals.
  TempDir dir;
  const std::string path = dir / "coord.json";
  std::ofstream(path) << coord_json({c});
  const CoordCheck back = read_coord_json(path).at(0);
  EXPECT_EQ(module(back, "ffn_out").seed_values, ffn.seed_values);
  EXPECT_NEAR(module(back, "ffn_out").slope_lo[1], ffn.slope_lo[1], 1e-12);
  EXPECT_NEAR(back.established_after_first, c.established_after_first, 1e-12);
  const YAML::Node j = YAML::LoadFile(path)["checks"][0];
  EXPECT_NEAR(j["established_after_first"]["slope"].as<double>(), 0.3 - half, 1e-9);
  EXPECT_NEAR(j["modules"][2]["by_t"][1]["slope_ci"][1].as<double>(), 0.3 + half, 1e-9);

  // Without the seeds' values (a coord.json written before they were kept): no interval.
  for (auto& m : c.modules) m.seed_values.clear();
  fit_coord_slopes(c);
  EXPECT_TRUE(std::isnan(module(c, "ffn_out").slope_lo[1]));
  EXPECT_TRUE(std::isnan(c.established_after_first));
  EXPECT_NE(coord_table(c).find("not known (this coord.json keeps only the seed means)"), std::string::npos);
}

// The shipped checks (configs/sweeps/results/coordcheck_*.json) recompute: their values fitted
// again give every slope and worst slope they record, and the numbers the write-up quotes.
TEST(CoordSlopeTest, ShippedChecksRecomputeFromTheirValues) {
  // Each shipped check with the write-up's headline figures (configs/sweeps/README.md, "Coordinate
  // checks"): each check's largest |slope| at t >= 2 (sp first where the file has both), and the
  // stream's slope at t = 10 that the depth checks without --compare quote.
  // The µP probes (results/coordcheck_mup_probes/) also quote the attention logits' largest
  // |slope| at t >= 2 and, for the 2-block model, the stream's.
  struct Quoted {
    const char* name;
    const char* worst;
    const char* stream_t10 = "";    // "" where the write-up quotes none
    const char* attn_logits = "";   // largest |slope| at t >= 2
    const char* stream = "";        // largest |slope| at t >= 2
  };
  const std::string probe = "coordcheck_mup_probes/";
  const std::vector<Quoted> quoted = {
      {"coordcheck_width_adamw", "3.02 1.12"},
      {"coordcheck_depth_completep", "1.14 0.40"},
      {"coordcheck_depth_completep_8seeds", "0.34", "-0.17"},
      {"coordcheck_depth_completep_alpha05", "1.29", "-0.70"},
      {"coordcheck_mup_probes/zero_query_lr0.128", "0.82", "", "0.82"},
      {"coordcheck_mup_probes/zero_query_lr0.032", "1.01", "", "1.01"},
      {"coordcheck_mup_probes/drawn_query_lr0.032", "1.10", "", "1.10"},
      {"coordcheck_mup_probes/zero_query_lr0.008", "0.67", "", "0.67"},
      {"coordcheck_mup_probes/drawn_query_lr0.008", "0.67", "", "0.67"},
      {"coordcheck_mup_probes/no_clip_lr0.128", "1.14"},
      {"coordcheck_mup_probes/no_clip_lr0.032", "1.13"},
      {"coordcheck_mup_probes/tok64_drawn_query_lr0.128", "1.10", "", "1.10"},
      {"coordcheck_mup_probes/tok64_zero_query_lr0.128", "0.51", "", "0.44"},
      {"coordcheck_mup_probes/tok64_drawn_query_lr0.032", "0.94", "", "0.94"},
      {"coordcheck_mup_probes/tok64_zero_query_lr0.032", "0.70", "", "0.52"},
      {"coordcheck_mup_probes/tok16_h1_drawn_query_lr0.032", "0.87", "", "0.87"},
      {"coordcheck_mup_probes/tok16_h1_zero_query_lr0.032", "0.61", "", "0.59"},
      {"coordcheck_mup_probes/tok16_h4_drawn_query_lr0.032", "0.64"},
      {"coordcheck_mup_probes/l2_tok64_w64-512_lr0.032", "0.52", "", "", "0.52"},
      {"coordcheck_mup_probes/l2_tok64_w512-2048_lr0.032", "0.68", "", "", "0.20"},
  };
  // Every probe file is quoted.
  size_t probes = 0;
  for (const auto& e : std::filesystem::directory_iterator(testing::source_dir() + "/configs/sweeps/results/" + probe))
    probes += e.path().extension() == ".json";
  EXPECT_EQ(probes, 16u);
  auto largest_after_first = [](const CoordModule& m) {
    double w = 0;
    for (size_t t = 1; t < m.slope.size(); ++t) w = std::max(w, std::abs(m.slope[t]));
    return fmt::format("{:.2f}", w);
  };
  for (const Quoted& q : quoted) {
    const std::string name = q.name;
    SCOPED_TRACE(name);
    const std::string path = testing::source_dir() + "/configs/sweeps/results/" + name + ".json";
    const std::vector<CoordCheck> checks = read_coord_json(path);
    const YAML::Node j = YAML::LoadFile(path);
    ASSERT_EQ(checks.size(), j["checks"].size());
    for (size_t c = 0; c < checks.size(); ++c) {
      const YAML::Node cj = j["checks"][c];
      EXPECT_NEAR(checks[c].worst_after_first, cj["worst_after_first"]["slope"].as<double>(), 1e-12);
      EXPECT_EQ(checks[c].worst_module, cj["worst_after_first"]["module"].as<std::string>());
      for (size_t m = 0; m < checks[c].modules.size(); ++m) {
        for (size_t t = 0; t < checks[c].modules[m].slope.size(); ++t) {
          EXPECT_NEAR(checks[c].modules[m].slope[t], cj["modules"][m]["by_t"][t]["slope"].as<double>(), 1e-12);
          EXPECT_EQ(checks[c].modules[m].track[t], cj["modules"][m]["by_t"][t]["track"].as<int64_t>());
        }
      }
    }
    // Written before the seeds were kept: read without them, no interval.
    for (const CoordCheck& c : checks) {
      EXPECT_TRUE(std::isnan(c.established_after_first));
      EXPECT_TRUE(c.modules[1].seed_values.empty());
    }
    std::string worst;
    for (const CoordCheck& c : checks) worst += fmt::format("{}{:.2f}", worst.empty() ? "" : " ", c.worst_after_first);
    EXPECT_EQ(worst, q.worst);
    if (*q.stream_t10) {
      EXPECT_EQ(fmt::format("{:+.2f}", module(checks.back(), "stream").slope[9]), q.stream_t10);
    }
    if (*q.attn_logits) {
      EXPECT_EQ(largest_after_first(module(checks.back(), "attn_logits")), q.attn_logits);
    }
    if (*q.stream) {
      EXPECT_EQ(largest_after_first(module(checks.back(), "stream")), q.stream);
    }
  }
}

// The checks with every seed's values (configs/sweeps/results/coordcheck_seeds/): each slope's
// interval recomputes from the seeds, and the numbers the write-up ("Coordinate check: the seeds'
// spread") quotes: the largest |slope| at t >= 2 and the largest the seeds establish, attn_out at
// t = 2 with its interval's half-width, and the hidden terms and attention logits at t = 10.
TEST(CoordSlopeTest, ShippedSeedChecksRecomputeFromTheirSeeds) {
  const std::vector<std::pair<std::string, std::string>> quoted = {
      {"default_lr0.128_s32",
       "seeds 32, largest 1.07 (attn_logits t=3), established 0.97 (attn_logits t=3); t=2 attn_out -0.54 +-0.09; "
       "t=10 attn_out -0.08 ffn_out -0.08 stream -0.09 attn_logits -0.22"},
      {"default_lr0.032_s32",
       "seeds 32, largest 1.25 (attn_logits t=3), established 1.01 (attn_logits t=3); t=2 attn_out -0.19 +-0.10; "
       "t=10 attn_out -0.15 ffn_out +0.05 stream -0.03 attn_logits -0.17"},
      {"b1_lr0.128_s32",
       "seeds 32, largest 0.85 (attn_logits t=2), established 0.83 (attn_logits t=2); t=2 attn_out -0.50 +-0.10; "
       "t=10 attn_out -0.14 ffn_out -0.05 stream -0.06 attn_logits -0.21"},
      {"b1_untied_lr0.128_s32",
       "seeds 32, largest 1.48 (attn_logits t=2), established 1.36 (attn_logits t=2); t=2 attn_out -0.90 +-0.11; "
       "t=10 attn_out +0.24 ffn_out +0.25 stream +0.19 attn_logits +0.31"},
      {"b1_emb0.125_lr0.128_s32",
       "seeds 32, largest 0.84 (attn_logits t=2), established 0.82 (attn_logits t=3); t=2 attn_out -0.50 +-0.10; "
       "t=10 attn_out +0.14 ffn_out +0.21 stream +0.18 attn_logits +0.13"},
      {"b4_lr0.128_s8",
       "seeds 8, largest 0.87 (attn_logits t=2), established 0.57 (attn_logits t=2); t=2 attn_out -0.46 +-0.20; "
       "t=10 attn_out +0.15 ffn_out +0.13 stream -0.04 attn_logits -0.44"},
      {"b1_std0.08_lr0.128_s32",
       "seeds 32, largest 0.98 (attn_logits t=2), established 0.86 (attn_logits t=2); t=2 attn_out -0.63 +-0.10; "
       "t=10 attn_out +0.23 ffn_out +0.43 stream +0.30 attn_logits -0.29"},
      {"b1_hd16_lr0.128_s32",
       "seeds 32, largest 0.51 (attn_logits t=4), established 0.39 (attn_out t=2); t=2 attn_out -0.50 +-0.10; "
       "t=10 attn_out -0.13 ffn_out +0.10 stream -0.03 attn_logits -0.21"},
  };
  const std::string dir = testing::source_dir() + "/configs/sweeps/results/coordcheck_seeds/";
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.path().extension() == ".json";
  EXPECT_EQ(files, quoted.size());
  for (const auto& [name, want] : quoted) {
    SCOPED_TRACE(name);
    const std::string path = dir + name + ".json";
    const CoordCheck c = read_coord_json(path).at(0);
    const YAML::Node cj = YAML::LoadFile(path)["checks"][0];
    for (size_t m = 0; m < c.modules.size(); ++m) {
      ASSERT_EQ(c.modules[m].seed_values.size(), static_cast<size_t>(c.steps));
      for (size_t t = 0; t < c.modules[m].slope.size(); ++t) {
        const YAML::Node tj = cj["modules"][m]["by_t"][t];
        EXPECT_NEAR(c.modules[m].slope_lo[t], tj["slope_ci"][0].as<double>(), 1e-12);
        EXPECT_NEAR(c.modules[m].slope_hi[t], tj["slope_ci"][1].as<double>(), 1e-12);
        EXPECT_EQ(c.modules[m].seed_slopes[t].size(), static_cast<size_t>(c.seeds));
      }
    }
    EXPECT_NEAR(c.established_after_first, cj["established_after_first"]["slope"].as<double>(), 1e-12);
    auto at = [&](const char* mod, size_t t) { return module(c, mod).slope[t - 1]; };
    const auto& a = module(c, "attn_out");
    const std::string got = fmt::format(
        "seeds {}, largest {:.2f} ({} t={}), established {:.2f} ({} t={}); t=2 attn_out {:+.2f} +-{:.2f}; t=10 attn_out "
        "{:+.2f} ffn_out {:+.2f} stream {:+.2f} attn_logits {:+.2f}",
        c.seeds, c.worst_after_first, c.worst_module, c.worst_t, c.established_after_first, c.established_module,
        c.established_t, at("attn_out", 2), (a.slope_hi[1] - a.slope_lo[1]) / 2, at("attn_out", 10), at("ffn_out", 10),
        at("stream", 10), at("attn_logits", 10));
    EXPECT_EQ(got, want);
  }
}

// ---------------------------------------------------------------------------------------------
// Integration: real checks.

std::string write_config(const TempDir& dir, const std::string& extra = "") {
  const std::string path = dir / "coord.yaml";
  std::ofstream(path) << "data: {train: [" << testing::source_dir() << "/data/toy/train.txt], val: ["
                      << testing::source_dir() << "/data/toy/val.txt]}\n"
                      << "model: {ctx: 32, d_model: 32, n_layers: 2, n_heads: 2, d_ff: 128}\n"
                      << "optim: {lr: 0.02, warmup: 0}\n"
                      << "train: {batch_size: 8, threads: 1}\n"
                      << extra;
  return path;
}

// The shipped rate splits (configs/sweeps/results/coordcheck_rates/, each a coord.json of five
// checks that `normlab coordcheck --lrs` wrote): the splits recompute from their checks' values to
// the stored numbers, and the write-up's ranges over blocks hold.
TEST(CoordRateSplitTest, ShippedSplitsRecomputeFromTheirChecks) {
  const std::vector<std::pair<std::string, std::string>> quoted = {
      {"b1_mup",
       "attn_out +0.01..+0.08 / -0.58..-0.30; ffn_out -0.03..+0.01 / -0.01..+0.03; attn_logits -0.41..-0.32 / "
       "-0.95..-0.67; stream +0.01..+0.05 / -0.03..+0.06; logits +0.09 / -0.04; fit 0.17"},
      {"b1_mup_hd16",
       "attn_out +0.01..+0.08 / -0.58..-0.31; ffn_out -0.03..+0.01 / -0.01..+0.03; attn_logits -0.19..-0.15 / "
       "-0.41..-0.22; stream +0.01..+0.05 / -0.03..+0.06; logits +0.09 / -0.04; fit 0.17"},
      {"b1_mup_hd16_eps1e-20",
       "attn_out +0.01..+0.08 / -0.58..-0.30; ffn_out -0.03..+0.01 / -0.01..+0.03; attn_logits -0.19..-0.14 / "
       "-0.40..-0.21; stream +0.01..+0.05 / -0.03..+0.06; logits +0.09 / -0.04; fit 0.17"},
      {"b1_mup_hd16_wd0",
       "attn_out +0.01..+0.08 / -0.58..-0.30; ffn_out -0.03..+0.01 / -0.01..+0.03; attn_logits -0.19..-0.15 / "
       "-0.41..-0.22; stream +0.01..+0.05 / -0.02..+0.06; logits +0.09 / -0.04; fit 0.17"},
      {"b1_mup_hd16_frozen_vectors",
       "attn_out +0.01..+0.08 / -0.60..-0.33; ffn_out -0.04..+0.02 / -0.03..+0.01; attn_logits -0.19..-0.14 / "
       "-0.37..-0.22; stream -0.00..+0.06 / -0.05..+0.05; logits +0.00 / nan; fit 0.26"},
      {"b1_mup_hd16_zero_query",
       "attn_out +0.01..+0.08 / -0.59..-0.31; ffn_out -0.03..+0.02 / -0.02..+0.02; attn_logits -0.16..-0.04 / "
       "+0.00..+0.39 (2 of 4); stream +0.01..+0.05 / -0.04..+0.05; logits +0.09 / -0.04; fit 0.16"},
      {"b1_mup_hd16_ctx16",
       "attn_out -0.07..-0.02 / -0.75..-0.46; ffn_out -0.03..-0.01 / -0.15..-0.12; attn_logits -0.20..-0.10 / "
       "-0.35..-0.25; stream +0.01..+0.02 / -0.20..-0.08; logits +0.12 / +0.08; fit 0.19"},
      {"b1_mup_std0.08",
       "attn_out -0.32..-0.19 / nan; ffn_out -0.15..+0.01 / -0.58..-0.00; attn_logits -0.89..-0.69 / -1.24 (1 of 4); "
       "stream -0.00..+0.00 / -0.57..-0.04; logits -0.11 / -0.33; fit 0.63"},
      {"b1_sp",
       "attn_out +0.67..+1.47 / +1.28 (1 of 4); ffn_out +1.08..+1.65 / nan; attn_logits +0.86..+1.60 / nan; stream "
       "+1.08..+1.48 / nan; logits +0.34 / nan; fit 0.86"},
      {"b16_mup",
       "attn_out -0.01..+0.07 / -0.59..-0.49; ffn_out -0.01..+0.03 / +0.05..+0.12; attn_logits -0.30..-0.14 / "
       "-0.76..-0.61; stream +0.02..+0.04 / +0.05..+0.06; logits +0.06 / -0.07; fit 0.26"},
  };
  const std::string dir = testing::source_dir() + "/configs/sweeps/results/coordcheck_rates/";
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.path().extension() == ".json";
  EXPECT_EQ(files, quoted.size()) << "a shipped split without its quoted numbers here";
  for (const auto& [name, want] : quoted) {
    SCOPED_TRACE(name);
    const std::string path = dir + name + ".json";
    const auto splits = split_first_update(read_coord_json(path));
    ASSERT_EQ(splits.size(), 1u);
    const RateSplit& s = splits[0];
    // The stored split, number for number.
    const auto stored = YAML::LoadFile(path)["rate_splits"];
    ASSERT_EQ(stored.size(), 1u);
    ASSERT_EQ(stored[0]["rows"].size(), s.rows.size());
    auto same = [](const YAML::Node& n, double v) {
      if (n.IsNull()) return std::isnan(v);
      const double w = n.as<double>();
      return std::abs(w - v) <= 1e-12 * std::max(1.0, std::abs(v));
    };
    for (size_t r = 0; r < s.rows.size(); ++r) {
      const auto& row = s.rows[r];
      const auto js = stored[0]["rows"][r];
      EXPECT_EQ(js["module"].as<std::string>(), row.module);
      EXPECT_EQ(js["track"].as<int64_t>(), row.track);
      for (size_t i = 0; i < s.sizes.size(); ++i) {
        EXPECT_TRUE(same(js["first"][i], row.first[i])) << row.module << " " << i;
        EXPECT_TRUE(same(js["second"][i], row.second[i])) << row.module << " " << i;
      }
      EXPECT_TRUE(same(js["first_slope"], row.first_slope));
      EXPECT_TRUE(same(js["second_slope"], row.second_slope));
      EXPECT_TRUE(same(js["first_slope_ci"][0], row.first_lo));
      EXPECT_TRUE(same(js["first_slope_ci"][1], row.first_hi));
      EXPECT_TRUE(same(js["second_slope_ci"][0], row.second_lo));
      EXPECT_TRUE(same(js["second_slope_ci"][1], row.second_hi));
      EXPECT_TRUE(same(js["max_log_residual"], row.max_log_residual));
    }
    // The write-up's numbers: per module the range over blocks of each order's slope, and the
    // largest fit residual.
    // Blocks whose order does not fit (NaN) are counted apart: "-1.24 (1 of 4)".
    auto range = [&](const std::string& module, bool second) {
      double lo = 1e9, hi = -1e9;
      int fitted = 0, all = 0;
      for (const auto& row : s.rows) {
        if (row.module != module) continue;
        ++all;
        const double v = second ? row.second_slope : row.first_slope;
        if (std::isnan(v)) continue;
        ++fitted;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      if (fitted == 0) return std::string("nan");
      const std::string r = fmt::format("{:+.2f}", lo) + (lo == hi ? "" : fmt::format("..{:+.2f}", hi));
      return fitted == all ? r : r + fmt::format(" ({} of {})", fitted, all);
    };
    double residual = 0;
    for (const auto& row : s.rows) residual = std::max(residual, row.max_log_residual);
    std::string got;
    for (const char* m : {"attn_out", "ffn_out", "attn_logits", "stream", "logits"})
      got += fmt::format("{} {} / {}; ", m, range(m, false), range(m, true));
    got += fmt::format("fit {:.2f}", residual);
    EXPECT_EQ(got, want);
  }
}

// The first update by order: one check per rate whose t = 2 seed means follow planted orders,
// v^2 = v1^2 + (a lr)^2 + (b lr^2)^2 with a = 3 size^0 and b = 50 size^-0.5 for attn_out, the
// first order alone elsewhere. Seed k's values are the mean times (1 + spread_k x), x =
// log2(size / 64) / 3, at t = 1 and 2 and every rate (spread sums to 0: the mean is the planted
// value), so a resample of the seeds tilts every order's slope alike.
std::vector<CoordCheck> planted_rates(const std::vector<double>& lrs,
                                      const std::vector<double>& spread = {-0.03, -0.01, 0.01, 0.03}) {
  const std::vector<int64_t> sizes = {64, 128, 256, 512};
  auto value = [](const std::string& n, int64_t t, double size, double lr) {
    const double v1 = n == "attn_logits" ? 0.02 / std::sqrt(size) : 0.01;
    if (t == 1) return v1;
    const double a = 3.0, b = n == "attn_out" ? 50.0 / std::sqrt(size) : 0.0;
    return std::sqrt(v1 * v1 + a * a * lr * lr + b * b * lr * lr * lr * lr);
  };
  std::vector<CoordCheck> out;
  for (const double lr : lrs) {
    CoordCheck c;
    c.param = "mup";
    c.optimizer = "adamw";
    c.lr = lr;
    c.sizes = sizes;
    c.steps = 2;
    c.seeds = static_cast<int64_t>(spread.size());
    for (const auto& n : coord_module_names()) {
      CoordModule m;
      m.name = n;
      m.per_block = n == "attn_out" || n == "ffn_out" || n == "attn_logits" || n == "attn_logits_causal" || n == "stream";
      const size_t blocks = m.per_block ? 2 : 1;
      for (int64_t t = 1; t <= 2; ++t) {
        std::vector<std::vector<double>> by_size;
        std::vector<std::vector<std::vector<double>>> seed_by_size;
        for (const int64_t size : sizes) {
          const double s = static_cast<double>(size), v = value(n, t, s, lr), x = std::log2(s / 64.0) / 3.0;
          by_size.push_back(std::vector<double>(blocks, v));
          std::vector<std::vector<double>> per_seed;
          for (const double e : spread) per_seed.push_back(std::vector<double>(blocks, v * (1.0 + e * x)));
          seed_by_size.push_back(per_seed);
        }
        m.values.push_back(by_size);
        m.seed_values.push_back(seed_by_size);
      }
      c.modules.push_back(m);
    }
    fit_coord_slopes(c);
    out.push_back(c);
  }
  return out;
}

const RateSplitRow& split_row(const RateSplit& s, const std::string& name, int64_t track) {
  for (const auto& r : s.rows)
    if (r.module == name && r.track == track) return r;
  throw std::runtime_error(name);
}

TEST(CoordRateSplitTest, FitRecoversTwoOrdersAndStaysNonNegative) {
  const std::vector<double> lrs = {0.01, 0.02, 0.04, 0.08};
  auto values = [&](double v1, double a, double b) {
    std::vector<double> v;
    for (const double lr : lrs) v.push_back(std::sqrt(v1 * v1 + a * a * lr * lr + b * b * std::pow(lr, 4)));
    return v;
  };
  // The terms at the largest rate: a 0.08 and b 0.08^2.
  auto [first, second] = fit_rate_orders(lrs, values(0.5, 7.0, 90.0), 0.5);
  EXPECT_NEAR(first, 7.0 * 0.08, 1e-9);
  EXPECT_NEAR(second, 90.0 * 0.0064, 1e-9);
  // One order alone: the other fits to 0, not to a negative square.
  std::tie(first, second) = fit_rate_orders(lrs, values(0.1, 0.0, 40.0), 0.1);
  EXPECT_NEAR(first, 0.0, 1e-6);
  EXPECT_NEAR(second, 40.0 * 0.0064, 1e-9);
  std::tie(first, second) = fit_rate_orders(lrs, values(0.1, 5.0, 0.0), 0.1);
  EXPECT_NEAR(first, 5.0 * 0.08, 1e-9);
  EXPECT_NEAR(second, 0.0, 1e-6);
  // Values below the init's (an update that shrank the module): no order, both 0.
  std::tie(first, second) = fit_rate_orders(lrs, {0.4, 0.3, 0.2, 0.1}, 0.5);
  EXPECT_EQ(first, 0.0);
  EXPECT_EQ(second, 0.0);
  // A diverged value or a missing one: NaN.
  EXPECT_TRUE(std::isnan(fit_rate_orders(lrs, {0.4, std::nan(""), 0.2, 0.1}, 0.5).first));
  EXPECT_TRUE(std::isnan(fit_rate_orders(lrs, {0.4, 0.3}, 0.5).first));
}

TEST(CoordRateSplitTest, PlantedOrdersAndTheirSlopesOverWidth) {
  const std::vector<double> lrs = {0.008, 0.016, 0.032, 0.064, 0.128};
  std::vector<CoordCheck> checks = planted_rates(lrs);
  std::swap(checks[0], checks[3]);  // any order: the split sorts by rate
  const auto splits = split_first_update(checks);
  ASSERT_EQ(splits.size(), 1u);
  const RateSplit& s = splits[0];
  EXPECT_EQ(s.lrs, lrs);
  EXPECT_EQ(s.seeds, 4);
  const auto& a = split_row(s, "attn_out", 1);
  for (size_t i = 0; i < s.sizes.size(); ++i) {
    EXPECT_NEAR(a.first[i], 3.0 * 0.128, 1e-9);
    EXPECT_NEAR(a.second[i], 50.0 / std::sqrt(static_cast<double>(s.sizes[i])) * 0.128 * 0.128, 1e-9);
  }
  EXPECT_NEAR(a.first_slope, 0.0, 1e-9);
  EXPECT_NEAR(a.second_slope, -0.5, 1e-9);
  EXPECT_LT(a.max_log_residual, 1e-9);
  // The seeds' bootstrap: every resample tilts both orders by the slope of log2(1 + mean(spread*) x),
  // about 0.48 mean(spread*): intervals around the point, a few hundredths wide, the same width
  // for both orders.
  EXPECT_LT(a.first_lo, a.first_slope);
  EXPECT_GT(a.first_hi, a.first_slope);
  EXPECT_LT(a.second_lo, a.second_slope);
  EXPECT_GT(a.second_hi, a.second_slope);
  EXPECT_GT(a.first_hi - a.first_lo, 0.005);
  EXPECT_LT(a.first_hi - a.first_lo, 0.06);
  EXPECT_NEAR(a.second_hi - a.second_lo, a.first_hi - a.first_lo, 1e-6);
  // Seeds that agree: every resample is the point (a zero-width interval at the slope).
  const auto same = split_first_update(planted_rates(lrs, {0.0, 0.0, 0.0}));
  ASSERT_EQ(same.size(), 1u);
  EXPECT_NEAR(split_row(same[0], "attn_out", 1).second_lo, -0.5, 1e-9);
  EXPECT_NEAR(split_row(same[0], "attn_out", 1).second_hi, -0.5, 1e-9);
  // One seed: no interval.
  EXPECT_TRUE(std::isnan(split_row(split_first_update(planted_rates(lrs, {0.0}))[0], "attn_out", 1).second_lo));
  // The first order alone: no second order (NaN per size, no slope, no interval).
  const auto& f = split_row(s, "ffn_out", 0);
  EXPECT_NEAR(f.first_slope, 0.0, 1e-9);
  EXPECT_TRUE(std::isnan(f.second[0]));
  EXPECT_TRUE(std::isnan(f.second_slope));
  EXPECT_TRUE(std::isnan(f.second_lo));
  // The attention logits' init term leans; the orders above it do not.
  EXPECT_NEAR(split_row(s, "attn_logits", 0).first_slope, 0.0, 1e-9);
  EXPECT_EQ(split_row(s, "logits", -1).track, -1);
  // The table prints the terms, slopes and intervals; coord.json carries the split.
  const std::string table = rate_split_table(s);
  EXPECT_NE(table.find("rates 0.008, 0.016, 0.032, 0.064, 0.128, 4 seeds"), std::string::npos) << table;
  EXPECT_NE(table.find(fmt::format("-0.50 [{:+.2f}, {:+.2f}]", a.second_lo, a.second_hi)), std::string::npos) << table;
  const auto json = YAML::Load(coord_json(checks));
  ASSERT_EQ(json["rate_splits"].size(), 1u);
  EXPECT_EQ(json["rate_splits"][0]["lrs"].as<std::vector<double>>(), lrs);
  bool found = false;
  for (const auto& r : json["rate_splits"][0]["rows"]) {
    if (r["module"].as<std::string>() != "attn_out" || r["track"].as<int64_t>() != 1) continue;
    found = true;
    EXPECT_NEAR(r["second_slope"].as<double>(), -0.5, 1e-9);
  }
  EXPECT_TRUE(found);
}

TEST(CoordRateSplitTest, GroupsNeedThreeRatesOfOneKind) {
  // Two rates: no split.
  EXPECT_TRUE(split_first_update(planted_rates({0.01, 0.02})).empty());
  // Three rates, one repeated: two distinct, no split; a third distinct one makes it.
  auto checks = planted_rates({0.01, 0.02, 0.02});
  EXPECT_TRUE(split_first_update(checks).empty());
  const auto more = planted_rates({0.04});
  checks.push_back(more[0]);
  ASSERT_EQ(split_first_update(checks).size(), 1u);
  EXPECT_EQ(split_first_update(checks)[0].lrs, (std::vector<double>{0.01, 0.02, 0.04}));
  // Another param is another group: sp at two rates beside mup at three.
  auto sp = planted_rates({0.01, 0.02});
  for (auto& c : sp) c.param = "sp";
  checks.insert(checks.begin(), sp.begin(), sp.end());
  const auto splits = split_first_update(checks);
  ASSERT_EQ(splits.size(), 1u);
  EXPECT_EQ(splits[0].param, "mup");
  // One update (no t = 2): nothing to split.
  auto one = planted_rates({0.01, 0.02, 0.04});
  for (auto& c : one) c.steps = 1;
  EXPECT_TRUE(split_first_update(one).empty());
  // Another config (another fingerprint) is another group: two sets of three rates, two splits,
  // each of its own checks.
  auto a = planted_rates({0.01, 0.02, 0.04});
  auto b = planted_rates({0.015, 0.03, 0.06});
  for (auto& c : a) c.fingerprint = "a";
  for (auto& c : b) c.fingerprint = "b";
  std::vector<CoordCheck> mixed = {a[0], b[0], a[1], b[1], a[2], b[2]};
  const auto two = split_first_update(mixed);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].lrs, (std::vector<double>{0.01, 0.02, 0.04}));
  EXPECT_EQ(two[1].lrs, (std::vector<double>{0.015, 0.03, 0.06}));
  // Checks that differ at t = 1 are not one init (a file from before the fingerprint, mixed):
  // not split.
  auto not_one = planted_rates({0.01, 0.02, 0.04});
  not_one[1].modules[1].values[0][2][0] *= 1.01;
  EXPECT_TRUE(split_first_update(not_one).empty());
  // A rate of 0 or below (a hand-made file) is no point of a split.
  auto zero = planted_rates({0.0, 0.01, 0.02});
  EXPECT_TRUE(split_first_update(zero).empty());
}

TEST(CoordRateSplitTest, MuonsOwnMatrixRateMovesWithTheRate) {
  Config c;
  c.optim.lr = 0.002;
  EXPECT_EQ(coord_rate_overrides(c, 0.008), (std::vector<std::string>{"optim.lr=0.0080000000000000002"}));
  for (const char* type : {"muon", "normuon"}) {
    c.optim.type = type;
    c.optim.keys.set("muon.lr", 0.02);
    const auto k = coord_rate_overrides(c, 0.008);
    ASSERT_EQ(k.size(), 2u) << type;
    EXPECT_EQ(k[1], "optim.muon.lr=0.080000000000000002") << type;  // 0.02 x 0.008 / 0.002
  }
}

// A check's fingerprint hashes the keys whose values differ from the default config's, with the
// seed given and the rates left out: a config at every default hashes the empty text, so a key a
// later build adds (at its default) changes no earlier check's fingerprint.
TEST(CoordRateSplitTest, FingerprintHashesTheKeysOffTheirDefaults) {
  Config c;
  EXPECT_EQ(coord_config_fingerprint(c, c.seed), sha256_hex(""));
  c.optim.lr = 0.5;  // rates do not count
  EXPECT_EQ(coord_config_fingerprint(c, c.seed), sha256_hex(""));
  c.model.d_model = 256;
  EXPECT_EQ(coord_config_fingerprint(c, c.seed), sha256_hex("model.d_model=256\n"));
  EXPECT_EQ(coord_config_fingerprint(c, 7), sha256_hex("seed=7\nmodel.d_model=256\n"));
  c.optim.type = "muon";
  c.optim.keys.set("muon.lr", 0.05);  // Muon's own matrix rate does not count either
  const std::string muon = coord_config_fingerprint(c, c.seed);
  EXPECT_EQ(muon, sha256_hex("model.d_model=256\noptim.type=muon\n"));
  c.optim.keys.set("muon.lr", 0.01);
  EXPECT_EQ(coord_config_fingerprint(c, c.seed), muon);
  c.optim.keys.set("muon.momentum", 0.9);  // its other keys do
  EXPECT_NE(coord_config_fingerprint(c, c.seed), muon);

  // Where the run writes, its threads and where the checkout sits do not count; which data does.
  Config a, b;
  a.out_dir = "/tmp/x";
  a.train.threads = 3;
  a.data.train = {(std::filesystem::path(testing::source_dir()) / "data/shakespeare/train.txt").string()};
  b.data.train = {"data/shakespeare/train.txt"};
  EXPECT_EQ(coord_config_fingerprint(a, a.seed), coord_config_fingerprint(b, b.seed));
  EXPECT_EQ(coord_config_fingerprint(b, b.seed), sha256_hex("data.train=shakespeare/train.txt\n"));
  b.data.train = {"data/toy/train.txt"};
  EXPECT_EQ(coord_config_fingerprint(b, b.seed), sha256_hex(""));
}

// µP keeps the hidden coordinates' scale across widths 64..256 after the first updates; SP does
// not (Adam moves every entry of a matrix by about the learning rate, and a matrix sums d of them:
// slope about +1 and more). Attention logits lean at t = 1 under µP (a random q·k scaled by 1/dh)
// and, at these widths and few updates, still lean after it: they are held to leaning less than
// SP's. Measured: mup's largest |slope| outside the attention logits 0.13, SP's largest 1.98.
TEST(CoordCheckRunTest, FlatUnderMupAndNotUnderSp) {
  TempDir dir;
  CoordCheckOptions o;
  o.config_path = write_config(dir, "param: {type: mup}\n");
  o.overrides = {"optim.lr=0.005"};
  o.widths = {64, 128, 256};
  o.steps = 3;
  o.seeds = 2;
  o.compare = true;
  const std::vector<CoordCheck> checks = run_coordcheck(o);
  ASSERT_EQ(checks.size(), 2u);
  const CoordCheck& sp = checks[0];
  const CoordCheck& mup = checks[1];
  EXPECT_EQ(sp.param, "sp");
  EXPECT_EQ(mup.param, "mup");
  std::cout << coord_table(sp) << coord_table(mup);
  EXPECT_GE(sp.worst_after_first, 1.0);
  // Each seed's values are kept as [t][size][seed][block], and their mean is the stored value.
  for (const CoordModule& mu : mup.modules) {
    ASSERT_EQ(mu.seed_values.size(), static_cast<size_t>(o.steps));
    for (size_t t = 0; t < mu.values.size(); ++t) {
      ASSERT_EQ(mu.seed_values[t].size(), o.widths.size());
      for (size_t i = 0; i < o.widths.size(); ++i) {
        ASSERT_EQ(mu.seed_values[t][i].size(), static_cast<size_t>(o.seeds));
        for (size_t b = 0; b < mu.values[t][i].size(); ++b) {
          const double mean = (mu.seed_values[t][i][0][b] + mu.seed_values[t][i][1][b]) / 2;
          EXPECT_NEAR(mean, mu.values[t][i][b], 1e-12 * std::abs(mean)) << mu.name;
        }
      }
    }
  }
  EXPECT_FALSE(std::isnan(mup.established_after_first));
  for (size_t m = 0; m < mup.modules.size(); ++m) {
    const CoordModule& mu = mup.modules[m];
    for (int64_t t = 2; t <= o.steps; ++t) {
      const double slope = mu.slope[static_cast<size_t>(t - 1)];
      SCOPED_TRACE(mu.name + " t=" + std::to_string(t));
      if (mu.name == "attn_logits" || mu.name == "attn_logits_causal") {
        EXPECT_LT(std::abs(slope), std::abs(sp.modules[m].slope[static_cast<size_t>(t - 1)]));
      } else {
        EXPECT_LE(std::abs(slope), 0.25);
      }
    }
  }
}

// --head-dim holds the head size over width (n_heads = width / N). At init a score is a random
// q·k over dh coordinates times sqrt(base_head_dim) / dh under µP: with the head size growing with
// the width its mean |x| falls as dh^-1/2 (slope -0.5, the write-up's measured -0.50); with dh held
// it does not change (slope 0), and the attention's output is flat either way.
TEST(CoordCheckRunTest, HeadDimHoldsTheHeadSizeOverWidth) {
  TempDir dir;
  CoordCheckOptions o;
  o.config_path = write_config(dir, "param: {type: mup, base_width: 32}\n");
  o.widths = {32, 64, 128, 256};
  o.steps = 1;
  o.seeds = 2;
  const CoordCheck grown = run_coordcheck(o).at(0);
  o.head_dim = 16;  // the config's 2 heads at d = 32: the base shape's head size
  const CoordCheck held = run_coordcheck(o).at(0);
  EXPECT_EQ(held.head_dim, 16);
  EXPECT_NEAR(module(grown, "attn_logits").slope[0], -0.5, 0.1);
  EXPECT_NEAR(module(held, "attn_logits").slope[0], 0.0, 0.1);
  EXPECT_NEAR(module(held, "attn_out").slope[0], 0.0, 0.1);
  EXPECT_NE(coord_table(held).find("(d_model 32, 64, 128, 256; n_heads = d_model / 16)"), std::string::npos);
  // coord.json keeps it.
  const std::string path = dir / "coord.json";
  std::ofstream(path) << coord_json({held});
  EXPECT_EQ(read_coord_json(path).at(0).head_dim, 16);
  // A head size that does not divide a width: one error naming the width, before any run.
  o.head_dim = 24;
  try {
    run_coordcheck(o);
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).find("coordcheck at width 32: --head-dim 24 does not divide it"), 0u) << e.what();
  }
}

// The progress a long check reports (`normlab coordcheck` writes coord.json at each call): once
// with nothing when every size is checked, then after every size from the second, every check so far, the running one cut to its finished sizes and
// fitted on them; a two-size fit is the slope through its two points. Its coord.json says how many
// sizes were planned and reads back so; a finished check's does not carry the field.
TEST(CoordCheckRunTest, ProgressKeepsEveryFinishedSize) {
  TempDir dir;
  CoordCheckOptions o;
  o.config_path = write_config(dir, "param: {type: mup}\n");
  o.widths = {32, 64, 128};
  o.steps = 2;
  o.seeds = 1;
  o.compare = true;
  std::vector<std::vector<CoordCheck>> calls;
  const std::vector<CoordCheck> done = run_coordcheck(o, [&](const std::vector<CoordCheck>& so_far) { calls.push_back(so_far); });
  ASSERT_EQ(done.size(), 2u);
  ASSERT_EQ(calls.size(), 5u);  // once before any run, then per check: after 64 and after 128
  EXPECT_TRUE(calls[0].empty());
  calls.erase(calls.begin());
  const std::vector<size_t> counts = {1, 1, 2, 2};
  for (size_t i = 0; i < calls.size(); ++i) {
    SCOPED_TRACE("call " + std::to_string(i));
    ASSERT_EQ(calls[i].size(), counts[i]);
    const CoordCheck& running = calls[i].back();
    EXPECT_EQ(running.param, i < 2 ? "sp" : "mup");
    EXPECT_EQ(running.planned_sizes, 3);
    EXPECT_EQ(running.sizes, (i % 2 == 0 ? std::vector<int64_t>{32, 64} : std::vector<int64_t>{32, 64, 128}));
    const CoordCheck& final_check = done[i < 2 ? 0 : 1];
    for (size_t m = 0; m < running.modules.size(); ++m) {
      const CoordModule& part = running.modules[m];
      for (size_t t = 0; t < part.values.size(); ++t) {
        ASSERT_EQ(part.values[t].size(), running.sizes.size()) << part.name;
        for (size_t k = 0; k < running.sizes.size(); ++k) EXPECT_EQ(part.values[t][k], final_check.modules[m].values[t][k]);
      }
    }
    if (i == 2) {
      EXPECT_EQ(calls[i][0].sizes, done[0].sizes);  // the finished sp check, whole
    }
  }
  // A two-size fit: log2 of the ratio of the logits' mean |x| over one doubling.
  const CoordModule& logits = module(calls[0].back(), "logits");
  for (size_t t = 0; t < logits.slope.size(); ++t)
    EXPECT_NEAR(logits.slope[t], std::log2(logits.values[t][1][0] / logits.values[t][0][0]), 1e-9);
  // coord.json: a part-way check says so and reads back so; the finished ones as before.
  const std::string path = dir / "part.json";
  std::ofstream(path) << coord_json(calls[2]);
  const std::vector<CoordCheck> back = read_coord_json(path);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].planned_sizes, 3);
  EXPECT_EQ(back[1].planned_sizes, 3);
  EXPECT_EQ(back[1].sizes.size(), 2u);
  EXPECT_NE(coord_table(back[1]).find("stopped part-way: 2 of its 3 sizes finished"), std::string::npos);
  EXPECT_EQ(coord_table(back[0]).find("stopped part-way"), std::string::npos);
  EXPECT_EQ(coord_json(done).find("planned_sizes"), std::string::npos);
  EXPECT_EQ(coord_json(calls[2]).find("planned_sizes"), coord_json(calls[2]).rfind("planned_sizes"));  // the running one only
}

TEST(CoordCheckRunTest, CommandWritesJsonPlotAndTableAndRefusesBadSizes) {
  TempDir dir;
  const std::string cfg = write_config(dir);
  const std::string out = dir / "cc";
  const auto r = testing::run_command(testing::normlab_binary() + " coordcheck -c " + cfg +
                                          " --widths 32,64 --depths 1,2 --steps 2 --seeds 1 --out " + out,
                                      dir / "err.txt");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("coordinate check over width (d_model 32, 64), param sp"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("coordinate check over depth (n_layers 1, 2), param sp"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("largest |slope| at t >= 2:"), std::string::npos) << r.out;
  const auto json = YAML::LoadFile(out + "/coord.json");
  ASSERT_EQ(json["checks"].size(), 2u);
  const auto w = json["checks"][0];
  EXPECT_EQ(w["axis"].as<std::string>(), "width");
  EXPECT_EQ(w["sizes"].size(), 2u);
  EXPECT_EQ(w["modules"].size(), coord_module_names().size());
  EXPECT_EQ(w["modules"][1]["name"].as<std::string>(), "attn_out");
  EXPECT_EQ(w["modules"][1]["by_t"].size(), 2u);
  EXPECT_EQ(w["modules"][1]["by_t"][0]["values"][1].size(), 2u);  // width 64: two blocks
  EXPECT_EQ(json["checks"][1]["modules"][4]["by_t"][1]["values"][1].size(), 2u);  // depth 2: two blocks
  std::ifstream png(out + "/coord_check.png");
  EXPECT_TRUE(png.good()) << "coord_check.png (scripts/plot.py --coord)";
  // --from fits the stored values again: the same tables, no training.
  const auto again = testing::run_command(testing::normlab_binary() + " coordcheck --from " + out +
                                              "/coord.json --out " + (dir / "again"),
                                          dir / "again.txt");
  ASSERT_EQ(again.status, 0);
  EXPECT_EQ(again.out.substr(0, again.out.find("wrote")), r.out.substr(0, r.out.find("wrote")));

  // A width n_heads (2) does not divide: one line naming the width and the key, before any run.
  const auto bad = testing::run_command(testing::normlab_binary() + " coordcheck -c " + cfg +
                                            " --widths 32,33 --steps 1 --seeds 1 --out " + out,
                                        dir / "bad.txt");
  EXPECT_EQ(bad.status, 2);
  std::ifstream in(dir / "bad.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string err = ss.str();
  EXPECT_NE(err.find("error: coordcheck at width 33: "), std::string::npos) << err;
  EXPECT_NE(err.find("does not divide d_model 33"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  // Sizes that cannot give a slope.
  const auto one = testing::run_command(testing::normlab_binary() + " coordcheck -c " + cfg + " --widths 32",
                                        dir / "one.txt");
  EXPECT_EQ(one.status, 2);
  const auto none = testing::run_command(testing::normlab_binary() + " coordcheck -c " + cfg, dir / "none.txt");
  EXPECT_EQ(none.status, 2);
  const auto both = testing::run_command(testing::normlab_binary() + " coordcheck -c " + cfg + " --from " + out +
                                             "/coord.json", dir / "both.txt");
  EXPECT_EQ(both.status, 2);

  // --lrs: one check per rate, and with three the first update's split (printed, in coord.json);
  // --from of the files again gives the same split.
  const auto rates = testing::run_command(testing::normlab_binary() + " coordcheck -c " + cfg +
                                              " --widths 32,64 --steps 2 --seeds 2 --lrs 0.001,0.004,0.016 --out " +
                                              (dir / "rates"),
                                          dir / "rates.txt");
  ASSERT_EQ(rates.status, 0) << rates.out;
  EXPECT_NE(rates.out.find("the first update by order in the learning rate: over width (32, 64), param sp, adamw at "
                           "rates 0.001, 0.004, 0.016, 2 seeds"),
            std::string::npos)
      << rates.out;
  const auto rj = YAML::LoadFile(dir / "rates" + "/coord.json");
  ASSERT_EQ(rj["checks"].size(), 3u);
  EXPECT_EQ(rj["checks"][2]["lr"].as<double>(), 0.016);
  ASSERT_EQ(rj["rate_splits"].size(), 1u);
  EXPECT_TRUE(std::ifstream(dir / "rates" + "/coord_rate_split.png").good()) << "scripts/plot.py --coord: the split's figure";
  const auto reread = testing::run_command(testing::normlab_binary() + " coordcheck --from " + (dir / "rates") +
                                               "/coord.json --out " + (dir / "rates2"),
                                           dir / "rates2.txt");
  ASSERT_EQ(reread.status, 0);
  EXPECT_EQ(reread.out.substr(0, reread.out.find("wrote")), rates.out.substr(0, rates.out.find("wrote")));
  for (const char* bad_lrs : {"0.004,0.001,0.016", "0,0.01,0.02"}) {
    const auto b = testing::run_command(testing::normlab_binary() + " coordcheck -c " + cfg +
                                            " --widths 32,64 --steps 2 --lrs " + bad_lrs,
                                        dir / "badlr.txt");
    EXPECT_EQ(b.status, 2) << bad_lrs;
  }
}

}  // namespace
}  // namespace normlab
