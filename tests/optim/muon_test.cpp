// Muon and NorMuon (src/optim/README.md): Newton-Schulz against the iteration written
// out here in double precision, non-square matrices both ways, bf16 against fp32, the per-shape
// rate rules, the optimizer split by role, the state's names, and the config rules of optim.muon.*.
// The multi-update comparison with the independent numpy implementation (scripts/reference_optim.py)
// is MuonReferenceTest (integration tier: it starts python).
#include <gtest/gtest.h>

#include <cmath>

#include "config/load.h"
#include "core/errors.h"
#include "core/torch_compat.h"
#include "core/system.h"
#include "model/roles.h"
#include "optim/muon.h"
#include "optim/optimizer.h"
#include "optim/registry.h"
#include "train/run_config.h"
#include "train/step.h"

namespace normlab {
namespace {

// The contract's iteration in double: X = U (transposed when A > B) / norm; each step
// X <- a X + (b S + c S S) X with S = X X^T.
torch::Tensor ns_double(const torch::Tensor& U, NsKind kind, int64_t steps) {
  static const double keller[3] = {3.4445, -4.7750, 2.0315};
  static const double pe[5][3] = {{8.156554524902461, -22.48329292557795, 15.878769915207462},
                                  {4.042929935166739, -2.808917465908714, 0.5000178451051316},
                                  {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
                                  {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
                                  {2.3465413258596377, -1.7097828382687081, 0.42323551169305323}};
  auto X = U.to(torch::kDouble);
  const bool tall = X.size(0) > X.size(1);
  if (tall) X = X.t();
  const double fro = X.norm().item<double>();
  X = kind == NsKind::kKeller ? X / std::max(fro, 1e-7) : X / (1.02 * fro + 1e-6);
  for (int64_t k = 0; k < steps; ++k) {
    const double* c = kind == NsKind::kKeller ? keller : pe[k];
    auto S = X.mm(X.t());
    X = c[0] * X + (c[1] * S + c[2] * S.mm(S)).mm(X);
  }
  return tall ? X.t() : X;
}

TEST(MuonTest, NewtonSchulzFp32MatchesTheIterationInDoubleForWideAndTallMatrices) {
  torch::manual_seed(3);
  for (const auto& shape : {std::vector<int64_t>{16, 40}, std::vector<int64_t>{40, 16}, std::vector<int64_t>{24, 24}}) {
    const auto U = torch::randn(shape);
    for (const NsKind kind : {NsKind::kKeller, NsKind::kPolarExpress}) {
      const auto O = newton_schulz(U, kind, 5, NsDtype::kFp32);
      const auto R = ns_double(U, kind, 5);
      ASSERT_EQ(O.sizes(), U.sizes());
      EXPECT_EQ(O.scalar_type(), torch::kFloat);
      const double err = (O.to(torch::kDouble) - R).abs().max().item<double>();
      EXPECT_LT(err, 1e-4) << choice_name(kind) << " " << shape[0] << "x" << shape[1];
      // Orthogonalised: singular values near 1 (Keller's quintic leaves them in about [0.7, 1.2]).
      const auto sv = torch::linalg_svdvals(R);
      EXPECT_GT(sv.min().item<double>(), 0.5);
      EXPECT_LT(sv.max().item<double>(), 1.3);
    }
  }
}

TEST(MuonTest, NewtonSchulzBf16IsTorchMuonsRoundingOfTheSameIteration) {
  torch::manual_seed(5);
  for (const auto& shape : {std::vector<int64_t>{32, 64}, std::vector<int64_t>{64, 32}}) {
    const auto U = torch::randn(shape);
    const auto b = newton_schulz(U, NsKind::kKeller, 5, NsDtype::kBf16);
    const auto f = newton_schulz(U, NsKind::kKeller, 5, NsDtype::kFp32);
    // bf16 carries 8 bits of mantissa: entries of O are ~1/sqrt(64); a few bf16 roundings per step.
    EXPECT_LT((b - f).abs().max().item<double>(), 0.05);
    EXPECT_GT((b - f).abs().max().item<double>(), 0.0);  // it really ran in bf16
    // Every entry is a bf16 number (the result was rounded to bf16 last).
    EXPECT_TRUE(torch::equal(b, b.to(torch::kBFloat16).to(torch::kFloat)));
  }
}

// By default the bf16 products take LibTorch's bf16 GEMMs on a CPU only where it multiplies bf16
// natively: elsewhere they convert to float32 and run slower than the reference path.
TEST(MuonTest, NewtonSchulzTakesBf16GemmsOnlyWhereTheyAreFast) {
  const torch::Device cpu(torch::kCPU);
  bool exact = false;
  {
    ScopedNsBf16Gemm p(NsBf16Gemm::kWhereExact);
    exact = ns_uses_bf16_gemm(128, 128, cpu);
  }
  EXPECT_EQ(ns_uses_bf16_gemm(128, 128, cpu), exact && cpu_has_avx512_bf16());
  if (cpu_has_avx512_bf16()) {
    EXPECT_TRUE(exact) << "a CPU with bf16 units";
  }
  ScopedNsBf16Gemm never(NsBf16Gemm::kNever);
  EXPECT_FALSE(ns_uses_bf16_gemm(128, 128, cpu));
}

// The bf16 products on LibTorch's bf16 GEMMs (where its probe says they round each result once from
// float32 sums) against the reference path (float32 GEMMs on bf16 values, each result rounded): the
// same rounding, the float32 sums in another order; both must be as close to the iteration in double.
// Held on every CPU where the probe says so (kWhereExact), fast there or not.
TEST(MuonTest, NewtonSchulzBf16GemmPathMatchesTheReferencePath) {
  torch::manual_seed(11);
  const torch::Device cpu(torch::kCPU);
  ScopedNsBf16Gemm exact(NsBf16Gemm::kWhereExact);
  const bool bf16_units = cpu_has_avx512_bf16();
  if (bf16_units) {
    EXPECT_TRUE(ns_uses_bf16_gemm(128, 128, cpu)) << "a CPU with bf16 units";
  }
#if !NORMLAB_TORCH_AT_LEAST(2, 0)
  // LibTorch 1.13's fallback GEMM (below 16^3 multiply-adds) sums in bf16: the probe must say no.
  EXPECT_FALSE(ns_uses_bf16_gemm(8, 16, cpu));
#endif
  auto reference = [](const torch::Tensor& U, NsKind kind, int64_t steps) {
    ScopedNsBf16Gemm never(NsBf16Gemm::kNever);
    return newton_schulz(U, kind, steps, NsDtype::kBf16);
  };
  int checked = 0;
  for (const auto& shape : {std::vector<int64_t>{64, 256}, std::vector<int64_t>{256, 64}, std::vector<int64_t>{128, 128},
                            std::vector<int64_t>{96, 160}}) {
    if (!ns_uses_bf16_gemm(shape[0], shape[1], cpu)) continue;
    ++checked;
    const auto U = torch::randn(shape);
    for (const NsKind kind : {NsKind::kKeller, NsKind::kPolarExpress}) {
      // Before the first product the paths compute the same values bit for bit (0 steps: the
      // rounded, normalised, transposed-back U).
      EXPECT_TRUE(torch::equal(newton_schulz(U, kind, 0, NsDtype::kBf16), reference(U, kind, 0)));
      const auto fast = newton_schulz(U, kind, 5, NsDtype::kBf16);
      const auto ref = reference(U, kind, 5);
      const std::string what = std::string(choice_name(kind)) + " " + std::to_string(shape[0]) + "x" + std::to_string(shape[1]);
      ASSERT_EQ(fast.sizes(), U.sizes()) << what;
      EXPECT_TRUE(torch::equal(fast, fast.to(torch::kBFloat16).to(torch::kFloat))) << what;
      // Five bf16 iterations amplify a one-step difference of an early product, so the paths differ
      // in many entries (measured: 13-80 %), each by a few bf16 steps, both as far from the
      // iteration in double (the bf16 error: largest ~5e-3 on entries of mean ~0.05). The test
      // asks that: as close to double as the reference, on average 2 % of an entry apart at most
      // (measured <= 0.8 %), nowhere further apart than 1.5 times the reference's distance from double.
      const auto R = ns_double(U, kind, 5);
      const double err_fast = (fast.to(torch::kDouble) - R).abs().max().item<double>();
      const double err_ref = (ref.to(torch::kDouble) - R).abs().max().item<double>();
      EXPECT_LT(err_fast, 1.25 * err_ref) << what;
      EXPECT_LT(err_ref, 1e-2) << what;
      EXPECT_LT((fast - ref).abs().max().item<double>(), 1.5 * err_ref) << what;
      EXPECT_LT((fast - ref).abs().mean().item<double>(), 0.02 * ref.abs().mean().item<double>()) << what;
    }
  }
  if (bf16_units) {
    EXPECT_EQ(checked, 4);
  }
}

// The update rule that optimizer `type` gives a single matrix W (its matrix rule: AdamW takes the
// other roles), W decayed at optim.weight_decay.
std::unique_ptr<UpdateRule> matrix_rule(const OptimConfig& o, const torch::Tensor& W) {
  UpdateRules rules = find_optimizer(o.type)->make({{"w", W, Role::kMatrix, 1.0, o.weight_decay}}, o);
  EXPECT_EQ(rules.size(), 2u);
  EXPECT_TRUE(rules.front()->params().empty());  // AdamW, with nothing here
  return std::move(rules.back());
}

TEST(MuonTest, LearningRateAdjustmentRules) {
  EXPECT_DOUBLE_EQ(muon_lr_adjust(AdjustLr::kOriginal, 512, 128), 2.0);
  EXPECT_DOUBLE_EQ(muon_lr_adjust(AdjustLr::kOriginal, 128, 512), 1.0);
  EXPECT_DOUBLE_EQ(muon_lr_adjust(AdjustLr::kMatchRmsAdamw, 128, 512), 0.2 * std::sqrt(512.0));
  EXPECT_DOUBLE_EQ(muon_lr_adjust(AdjustLr::kMatchRmsAdamw, 512, 128), 0.2 * std::sqrt(512.0));
}

// One update written out: M = (1-mu) G, U = (1-mu) G + mu M (Nesterov), W' = W(1 - eta lambda) - eta' NS(U).
TEST(MuonTest, OneUpdateByHandWithDecayAndCautiousMask) {
  torch::manual_seed(7);
  for (const bool cautious : {false, true}) {
    OptimConfig o;
    o.type = "muon";
    o.weight_decay = 0.1;
    o.keys.set("muon.ns_dtype", std::string("fp32"));
    o.keys.set("muon.cautious_wd", cautious);
    auto W = torch::randn({12, 8}).requires_grad_(true);
    const auto W0 = W.detach().to(torch::kDouble);
    const auto G = torch::randn({12, 8});
    W.mutable_grad() = G.clone();
    const auto m = matrix_rule(o, W);
    EXPECT_STREQ(m->name(), "muon");
    m->step({/*lr=*/0, /*f=*/0.5}, 1.0);
    const double mu = 0.95, eta = 0.02 * 0.5, eta_adj = eta * std::sqrt(12.0 / 8.0);
    const auto Gd = G.to(torch::kDouble);
    const auto U = (1 - mu) * Gd + mu * ((1 - mu) * Gd);
    const auto O = ns_double(U, NsKind::kKeller, 5);
    const auto K = cautious ? (O * W0 >= 0).to(torch::kDouble) : torch::ones_like(W0);
    const auto want = W0 - eta_adj * O - eta * 0.1 * (W0 * K);
    EXPECT_LT((W.detach().to(torch::kDouble) - want).abs().max().item<double>(), 1e-4 * eta_adj) << cautious;
  }
}

TEST(MuonTest, NormuonNormalisesRowsAndKeepsTheFrobeniusNorm) {
  torch::manual_seed(9);
  OptimConfig o;
  o.type = "normuon";
  o.weight_decay = 0;
  o.keys.set("muon.ns_dtype", std::string("fp32"));
  auto W = torch::zeros({6, 10}).requires_grad_(true);
  const auto G = torch::randn({6, 10});
  W.mutable_grad() = G.clone();
  const auto m = matrix_rule(o, W);
  EXPECT_STREQ(m->name(), "normuon");
  m->step({0, 1.0}, 1.0);
  const auto Gd = G.to(torch::kDouble);
  const auto O = ns_double(0.05 * Gd + 0.95 * 0.05 * Gd, NsKind::kKeller, 5);
  const auto V = 0.05 * (O * O).mean(-1, true);
  auto O2 = O / (V.sqrt() + 1e-10);
  O2 = O2 * (O.norm() / (O2.norm() + 1e-10));
  const auto want = -0.02 * O2;  // 6 < 10: adjust 1
  EXPECT_LT((W.detach().to(torch::kDouble) - want).abs().max().item<double>(), 1e-4 * 0.02);
  const auto st = m->state();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].first, "w.muon_momentum");
  EXPECT_EQ(st[1].first, "w.normuon_v");
  EXPECT_EQ(st[1].second.sizes(), (std::vector<int64_t>{6, 1}));
}

Config tiny_config(const std::string& type) {
  Config c;
  c.model.ctx = 8;
  c.model.d_model = 16;
  c.model.n_layers = 2;
  c.model.n_heads = 2;
  c.model.d_ff = 24;
  c.optim.type = type;
  resolve_model_config(c.model);
  return c;
}

// Every optimizer of the registry: every parameter in exactly one rule, with its declared role;
// the matrix rule (muon, normuon) takes exactly the role-matrix tensors (the tied head stays with
// AdamW as the embedding), AdamW the rest; the rates of optim.lr_mult and the decay of the roles
// that decay reach every rule, and multipliers given through RoleRates (the parametrization's
// place) reach every rule too, matrix included.
TEST(MuonTest, EveryOptimizerSplitsByRoleWithTheRolesRates) {
  for (const auto& entry : optimizer_registry()) {
    for (const bool scaled : {false, true}) {
      Config c = tiny_config(entry.name);
      c.optim.lr_mult.gain = 0.5;
      c.optim.lr_mult.embedding = 3;
      Transformer t(c.model);
      NamedTensors named;
      for (auto& kv : t->named_parameters()) named.emplace_back(kv.key(), kv.value());
      RoleRates rates = RoleRates::from(c.optim);
      if (scaled) {
        rates.set(Role::kMatrix, {0.25, 4.0});
        rates.set(Role::kBias, {1.0, 7.0});  // bias does not decay: no effect
      }
      Optimizer opt(named, c.optim, rates);
      size_t seen = 0;
      // An entry that splits by role (Muon-like, matrices_by) gives AdamW every role but matrix.
      const bool split = opt.rules().size() > 1;
      if (entry.name == "muon" || entry.name == "normuon") {  // the shipped Muon-like ones
        EXPECT_TRUE(split) << entry.name;
      }
      for (const auto& rule : opt.rules()) {
        const bool adamw = std::string(rule->name()) == "adamw";
        for (const RatedParam& p : rule->params()) {
          ++seen;
          EXPECT_EQ(p.role, *role_of(p.tensor)) << p.name;
          if (split) {
            EXPECT_EQ(adamw, p.role != Role::kMatrix) << entry.name << " " << p.name;
          }
          const double lr = p.role == Role::kGain        ? 0.5
                            : p.role == Role::kEmbedding ? 3.0
                            : p.role == Role::kMatrix && scaled ? 0.25
                                                               : 1.0;
          EXPECT_EQ(p.lr_mult, lr) << entry.name << " " << p.name;
          const double wd = !role_decays(p.role) ? 0.0 : p.role == Role::kMatrix && scaled ? 0.1 * 4.0 : 0.1;
          EXPECT_EQ(p.weight_decay, wd) << entry.name << " " << p.name;
        }
      }
      EXPECT_EQ(seen, named.size()) << entry.name;
    }
  }
}

TEST(MuonTest, ParameterWithoutRoleIsRefused) {
  OptimConfig o;
  EXPECT_THROW(Optimizer({{"stray", torch::zeros({2, 2})}}, o), RuntimeFailure);
}

std::vector<std::string> config_errors(const std::string& yaml) {
  try {
    auto loaded = parse_config_text(yaml, "cfg.yaml", {}, /*collect=*/true);
    check_and_resolve(loaded, /*check_data_files=*/false);
  } catch (const ConfigError& e) {
    return e.problems();
  }
  return {};
}

TEST(MuonTest, MuonKeysBelongToTheirOptimizers) {
  auto one = [](const std::string& yaml, const std::string& key, const std::string& owner) {
    const auto e = config_errors(yaml);
    ASSERT_EQ(e.size(), 1u) << yaml;
    EXPECT_NE(e[0].find(key), std::string::npos) << e[0];
    EXPECT_NE(e[0].find(owner), std::string::npos) << e[0];
  };
  one("optim: {muon: {lr: 0.01}}", "optim.muon.lr", "muon and normuon");
  one("optim: {muon: {ns: polar_express}}", "optim.muon.ns", "muon and normuon");
  one("optim: {type: muon, muon: {beta2: 0.9}}", "optim.muon.beta2", "normuon");
  one("optim: {type: muon, muon: {ns: polar_express, ns_steps: 6}}", "optim.muon.ns_steps", "5");
  one("optim: {type: normuon, muon: {momentum: 1.0}}", "optim.muon.momentum", "[0, 1)");
  one("optim: {type: muon, muon: {ns_steps: 1000000}}", "optim.muon.ns_steps", "[1, 100]");
  one("optim: {type: muon, muon: {ns_steps: 0}}", "optim.muon.ns_steps", "[1, 100]");
  one("optim: {type: muon, muon: {ns: newton}}", "optim.muon.ns", "keller, polar_express");
  one("optim: {lr_mult: {gain: -1}}", "optim.lr_mult.gain", ">= 0");
  one("optim: {type: lion}", "optim.type", "adamw");
  EXPECT_TRUE(config_errors("optim: {type: normuon, muon: {beta2: 0.9, ns: polar_express, cautious_wd: true}}").empty());
  EXPECT_TRUE(config_errors("optim: {type: adamw, lr_mult: {gain: 0.5}}").empty());
}

}  // namespace
}  // namespace normlab
