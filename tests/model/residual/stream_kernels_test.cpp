// The fused stream loops (src/model/residual/stream_kernels.h) against the composed LibTorch ops
// they replace (namespace composed in residual.h): the forwards of mix_streams, weighted_sum and
// add_scaled bit for bit where LibTorch's addcmul and the loops are both fma-contracted (else within
// rounding; the order of operations is the same), their
// gradients and Sinkhorn's forward and gradient to stated tolerances (summation order and exp
// differ), finite-difference gradients in double, double backward, the dispatch, and whole HC /
// mHC / AttnRes models with the loops on and off.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "model/residual/residual.h"
#include "model/transformer.h"

namespace normlab {
namespace {

// Turns the fused loops off for one scope (the composed reference runs instead).
struct ComposedOnly {
  ComposedOnly() { set_fused_stream_kernels(false); }
  ~ComposedOnly() { set_fused_stream_kernels(true); }
};

Streams random_streams(int64_t n, std::vector<int64_t> shape, torch::ScalarType dt, bool grad = true) {
  Streams X;
  for (int64_t j = 0; j < n; ++j) X.push_back(torch::randn(shape, torch::TensorOptions().dtype(dt)).requires_grad_(grad));
  return X;
}

Streams detached_copy(const Streams& X) {
  Streams out;
  for (const auto& x : X) out.push_back(x.detach().clone().requires_grad_(x.requires_grad()));
  return out;
}

torch::Tensor leaf(const torch::Tensor& t) { return t.detach().clone().requires_grad_(true); }

// sum_c <Y_c, G_c>, with G_c fixed random "upstream gradients" (the loss the gradients are of).
torch::Tensor probe_loss(const Streams& Y, const Streams& G) {
  torch::Tensor s = (Y[0] * G[0]).sum();
  for (size_t c = 1; c < Y.size(); ++c) s = s + (Y[c] * G[c]).sum();
  return s;
}

double max_rel(const torch::Tensor& a, const torch::Tensor& b) {
  auto da = a.to(torch::kDouble), db = b.to(torch::kDouble);
  return ((da - db).abs().max() / db.abs().max().clamp_min(1e-30)).item<double>();
}

// Whether y + x * w is rounded once (contracted to an fma) at every length 1..80, in both
// LibTorch's CPU addcmul and NormLab's own loops (add_scaled with a shared weight). Where both are,
// the loops' mixing and add forwards are the composed ops bit for bit (the development machine's
// optimised build). Where either is not, they differ by rounding only: LibTorch's kernel on another
// CPU or build (seen in CI), or the loops compiled at -O1 (the ASan+UBSan build: GCC contracts
// only from -O2).
template <class T>
bool contracts_as() {
  const auto dt = std::is_same_v<T, float> ? torch::kFloat : torch::kDouble;
  torch::manual_seed(97);
  for (int64_t len = 1; len <= 80; ++len) {
    auto a = torch::randn({len}, dt), x = torch::randn({len}, dt), w = torch::randn({len}, dt);
    auto got = a.addcmul(x, w);
    auto b = torch::randn({1}, dt);
    auto mine = add_scaled({a.view({1, 1, len})}, b, x.view({1, 1, len}))[0].contiguous();
    const T *pa = a.template data_ptr<T>(), *px = x.template data_ptr<T>(), *pw = w.template data_ptr<T>(),
            *pg = got.template data_ptr<T>(), *pm = mine.template data_ptr<T>();
    const T bk = b.template item<T>();
    for (int64_t i = 0; i < len; ++i)
      if (pg[i] != std::fma(px[i], pw[i], pa[i]) || pm[i] != std::fma(px[i], bk, pa[i])) return false;
  }
  return true;
}

bool both_contract(torch::ScalarType dt) {
  static const bool f = contracts_as<float>(), d = contracts_as<double>();
  return dt == torch::kFloat ? f : d;
}

// The loops' forward against the composed ops: bit for bit where both are contracted
// (above), else every entry within 4 n eps of the sum of the magnitudes of its terms (`scale`, the
// textbook bound on the rounding of an n-term sum; a wrong weight or a missed term is far outside).
::testing::AssertionResult forward_equal(const torch::Tensor& fused, const torch::Tensor& ref, const torch::Tensor& scale,
                                         int64_t n_terms) {
  if (both_contract(ref.scalar_type())) {
    if (torch::equal(fused, ref)) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "not bit-identical (both LibTorch's addcmul and the loops are fma-contracted here), max diff "
                                         << (fused - ref).abs().max().item<double>();
  }
  const double eps = ref.scalar_type() == torch::kFloat ? 0x1p-23 : 0x1p-52;
  auto excess = (fused - ref).abs().to(torch::kDouble) - scale.to(torch::kDouble) * (4.0 * n_terms * eps);
  if (fused.sizes() == ref.sizes() && excess.max().item<double>() <= 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "beyond rounding: max excess " << excess.max().item<double>();
}

// Weight shapes a method uses: per position (B, T, n, m) and shared (n, m).
std::vector<std::vector<int64_t>> weight_shapes(int64_t B, int64_t T, int64_t n, int64_t m) {
  return {{B, T, n, m}, {n, m}};
}

TEST(StreamKernelsTest, MixForwardIsTheComposedOpsBitForBit) {
  torch::manual_seed(1);
  for (auto dt : {torch::kFloat, torch::kDouble}) {
    for (int64_t d : {1, 7, 37, 64}) {
      for (auto [n, m] : std::vector<std::pair<int64_t, int64_t>>{{4, 5}, {3, 3}, {1, 2}, {5, 1}}) {
        auto X = random_streams(n, {2, 3, d}, dt, false);
        for (const auto& ws : weight_shapes(2, 3, n, m)) {
          auto W = torch::randn(ws, torch::TensorOptions().dtype(dt));
          ASSERT_TRUE(fused_stream_kernels());
          auto fused = mix_streams(W, X);
          auto ref = composed::mix_streams(W, X);
          Streams absX;
          for (const auto& x : X) absX.push_back(x.abs());
          auto scale = composed::mix_streams(W.abs(), absX);
          ASSERT_EQ(fused.size(), static_cast<size_t>(m));
          for (int64_t c = 0; c < m; ++c)
            EXPECT_TRUE(forward_equal(fused[c], ref[c], scale[c], n))
                << "d " << d << " n " << n << " m " << m << " W " << ws.size() << "-d, output " << c << ", "
                << c10::toString(dt);
        }
        auto w = torch::randn({2, 3, n}, torch::TensorOptions().dtype(dt));
        Streams absX;
        for (const auto& x : X) absX.push_back(x.abs());
        EXPECT_TRUE(forward_equal(weighted_sum(w, X), composed::weighted_sum(w, X), composed::weighted_sum(w.abs(), absX), n))
            << "weighted_sum d " << d;
      }
    }
  }
}

TEST(StreamKernelsTest, AddScaledForwardIsTheComposedOpsBitForBit) {
  torch::manual_seed(2);
  for (auto dt : {torch::kFloat, torch::kDouble}) {
    for (int64_t d : {3, 40}) {
      auto R = random_streams(4, {2, 5, d}, dt, false);
      auto y = torch::randn({2, 5, d}, torch::TensorOptions().dtype(dt));
      for (auto b : {torch::randn({2, 5, 4}, torch::TensorOptions().dtype(dt)), torch::randn({4}, torch::TensorOptions().dtype(dt))}) {
        auto fused = add_scaled(R, b, y);
        auto ref = composed::add_scaled(R, b, y);
        Streams absR;
        for (const auto& r : R) absR.push_back(r.abs());
        auto scale = composed::add_scaled(absR, b.abs(), y.abs());
        for (int k = 0; k < 4; ++k)
          EXPECT_TRUE(forward_equal(fused[k], ref[k], scale[k], 2)) << "d " << d << " b " << b.dim() << "-d";
      }
    }
  }
  // A bf16 sublayer output (autocast) is widened as addcmul's type promotion widens it.
  auto R = random_streams(3, {2, 4, 16}, torch::kFloat, false);
  auto y = torch::randn({2, 4, 16}).to(torch::kBFloat16);
  auto b = torch::randn({2, 4, 3});
  auto fused = add_scaled(R, b, y);
  auto ref = composed::add_scaled(R, b, y);
  Streams absR;
  for (const auto& r : R) absR.push_back(r.abs());
  auto scale = composed::add_scaled(absR, b.abs(), y.abs());
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(fused[k].scalar_type(), torch::kFloat);
    EXPECT_TRUE(forward_equal(fused[k], ref[k], scale[k], 2));
  }
}

// Gradients of every input of mix_streams (per-position and shared weights) against the composed
// ops' autograd: fp32 within 1e-5 of the largest entry (the weight gradients sum d products in
// another order), double within 1e-12. Some outputs unused (an undefined upstream gradient) and
// one stream without a gradient, as HC's start (all streams the embedding) and unused outputs have.
TEST(StreamKernelsTest, MixGradientsMatchTheComposedOps) {
  torch::manual_seed(3);
  for (auto dt : {torch::kFloat, torch::kDouble}) {
    const double tol = dt == torch::kFloat ? 1e-5 : 1e-12;
    for (const auto& ws : weight_shapes(2, 6, 4, 5)) {
      for (bool drop_output : {false, true}) {
        auto X = random_streams(4, {2, 6, 33}, dt);
        X[2] = X[2].detach();  // needs no gradient
        auto W = torch::randn(ws, torch::TensorOptions().dtype(dt)).requires_grad_(true);
        auto G = random_streams(5, {2, 6, 33}, dt, false);
        auto X2 = detached_copy(X);
        auto W2 = leaf(W);
        auto Y = mix_streams(W, X), Y2 = composed::mix_streams(W2, X2);
        if (drop_output) {  // outputs 1 and 3 feed nothing
          Y = {Y[0], Y[2], Y[4]};
          Y2 = {Y2[0], Y2[2], Y2[4]};
          G = {G[0], G[2], G[4]};
        }
        probe_loss(Y, G).backward();
        probe_loss(Y2, G).backward();
        const std::string what = std::string(c10::toString(dt)) + " W " + std::to_string(ws.size()) + "-d" +
                                 (drop_output ? ", two outputs unused" : "");
        EXPECT_LT(max_rel(W.grad(), W2.grad()), tol) << what;
        for (int j = 0; j < 4; ++j) {
          if (j == 2) {
            EXPECT_FALSE(X[j].grad().defined());
            continue;
          }
          EXPECT_LT(max_rel(X[j].grad(), X2[j].grad()), tol) << what << " stream " << j;
        }
      }
    }
  }
}

TEST(StreamKernelsTest, AddScaledGradientsMatchTheComposedOps) {
  torch::manual_seed(4);
  for (auto dt : {torch::kFloat, torch::kDouble}) {
    const double tol = dt == torch::kFloat ? 1e-5 : 1e-12;
    for (std::vector<int64_t> bs : {std::vector<int64_t>{3, 5, 4}, std::vector<int64_t>{4}}) {
      auto R = random_streams(4, {3, 5, 21}, dt);
      auto y = torch::randn({3, 5, 21}, torch::TensorOptions().dtype(dt)).requires_grad_(true);
      auto b = torch::randn(bs, torch::TensorOptions().dtype(dt)).requires_grad_(true);
      auto R2 = detached_copy(R);
      auto y2 = leaf(y), b2 = leaf(b);
      auto G = random_streams(4, {3, 5, 21}, dt, false);
      auto out = add_scaled(R, b, y), out2 = composed::add_scaled(R2, b2, y2);
      // Stream 1's output feeds nothing.
      probe_loss({out[0], out[2], out[3]}, {G[0], G[2], G[3]}).backward();
      probe_loss({out2[0], out2[2], out2[3]}, {G[0], G[2], G[3]}).backward();
      const std::string what = std::string(c10::toString(dt)) + " b " + std::to_string(bs.size()) + "-d";
      EXPECT_LT(max_rel(b.grad(), b2.grad()), tol) << what;
      EXPECT_LT(max_rel(y.grad(), y2.grad()), tol) << what;
      for (int k : {0, 2, 3}) EXPECT_TRUE(torch::equal(R[k].grad(), R2[k].grad())) << what << " stream " << k;
      EXPECT_FALSE(R[1].grad().defined() && R[1].grad().abs().max().item<double>() > 0) << what;
    }
  }
}

// rms_project (HC's dynamic weights per stream, mHC's z over all streams): values and gradients of
// F and every stream against the composed matmuls (1e-5 of the largest entry in fp32, 1e-12 in
// double), a stream without a gradient, the same tensor as several streams (the start of a
// forward), and a create_graph backward.
TEST(StreamKernelsTest, RmsProjectMatchesTheComposedOps) {
  torch::manual_seed(9);
  for (auto dt : {torch::kFloat, torch::kDouble}) {
    const double tol = dt == torch::kFloat ? 1e-5 : 1e-12;
    for (auto [n, k, d] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 6, 37}, {4, 24, 16}, {3, 2, 9}}) {
      auto X = random_streams(n, {2, 5, d}, dt);
      if (n > 2) X[1] = X[1].detach();
      if (n == 4) X[3] = X[0];  // one tensor as two streams
      auto F = torch::randn({k, n * d}, torch::TensorOptions().dtype(dt)).requires_grad_(true);
      auto X2 = detached_copy(X);
      if (n == 4) X2[3] = X2[0];
      auto F2 = leaf(F);
      auto z = rms_project(X, F, 1e-6), z2 = composed::rms_project(X2, F2, 1e-6);
      const std::string what = std::string(c10::toString(dt)) + " n " + std::to_string(n) + " k " + std::to_string(k);
      EXPECT_NE(z.grad_fn()->name().find("RmsProject"), std::string::npos) << what;
      EXPECT_LT(max_rel(z, z2), tol) << what;
      auto G = torch::randn_like(z);
      (z * G).sum().backward();
      (z2 * G).sum().backward();
      EXPECT_LT(max_rel(F.grad(), F2.grad()), tol) << what;
      for (int64_t j = 0; j < n; ++j) {
        if (!X[j].requires_grad()) continue;
        EXPECT_LT(max_rel(X[j].grad(), X2[j].grad()), tol) << what << " stream " << j;
      }
    }
  }
  auto opts = torch::TensorOptions().dtype(torch::kDouble);
  auto X = random_streams(2, {2, 3, 4}, torch::kDouble);
  auto F = torch::randn({3, 8}, opts).requires_grad_(true);
  auto second = [&](bool fused) {
    set_fused_stream_kernels(fused);
    auto g = torch::autograd::grad({rms_project(X, F, 1e-6).pow(3).sum()}, {F, X[0]}, {}, true, true);
    auto r = torch::autograd::grad({g[0].pow(2).sum() + g[1].pow(2).sum()}, {F, X[0], X[1]});
    set_fused_stream_kernels(true);
    return r;
  };
  auto f = second(true), c = second(false);
  for (size_t i = 0; i < f.size(); ++i) EXPECT_LT(max_rel(f[i], c[i]), 1e-10) << "second derivative, input " << i;
}

// Sinkhorn: forward within 2e-6 relative in fp32 and 1e-13 in double (LibTorch's vectorised exp
// and its summation order differ from std::exp and a loop), the logits' gradient against the
// composed iterations' autograd, for n = 1 .. 6 and 1, 2 and 20 iterations.
TEST(StreamKernelsTest, SinkhornMatchesTheComposedIterations) {
  torch::manual_seed(5);
  for (auto dt : {torch::kFloat, torch::kDouble}) {
    const double fwd_tol = dt == torch::kFloat ? 2e-6 : 1e-13, grad_tol = dt == torch::kFloat ? 1e-4 : 1e-10;
    for (int64_t n : {1, 2, 4, 6}) {
      for (int64_t iters : {1, 2, 20}) {
        auto l = (2 * torch::randn({3, 7, n, n}, torch::TensorOptions().dtype(dt))).requires_grad_(true);
        auto l2 = leaf(l);
        auto C = sinkhorn(l, iters), C2 = composed::sinkhorn(l2, iters);
        const std::string what = std::string(c10::toString(dt)) + " n " + std::to_string(n) + " iters " + std::to_string(iters);
        EXPECT_LT(max_rel(C, C2), fwd_tol) << what;
        auto G = torch::randn_like(C);
        (C * G).sum().backward();
        (C2 * G).sum().backward();
        EXPECT_LT(max_rel(l.grad(), l2.grad()), grad_tol) << what;
      }
    }
  }
}

// Central differences in double on every input of the three fused ops: the loops' backward is the
// derivative of their forward, not only equal to another implementation's.
TEST(StreamKernelsTest, GradientsMatchFiniteDifferences) {
  torch::manual_seed(6);
  const double h = 1e-6;
  auto check = [&](const std::function<torch::Tensor()>& loss, std::vector<torch::Tensor> inputs, const std::string& what) {
    for (auto& t : inputs)
      if (t.grad().defined()) t.grad().zero_();
    loss().backward();
    for (size_t i = 0; i < inputs.size(); ++i) {
      auto flat = inputs[i].detach().view(-1);
      auto grad = inputs[i].grad().view(-1);
      for (int64_t e : {int64_t{0}, flat.numel() / 2, flat.numel() - 1}) {
        const double keep = flat[e].item<double>();
        double up, down;
        {
          torch::NoGradGuard ng;
          flat[e] = keep + h;
          up = loss().item<double>();
          flat[e] = keep - h;
          down = loss().item<double>();
          flat[e] = keep;
        }
        const double fd = (up - down) / (2 * h), ad = grad[e].item<double>();
        EXPECT_NEAR(ad, fd, 1e-6 * std::max(1.0, std::abs(fd))) << what << " input " << i << "[" << e << "]";
      }
    }
  };
  auto opts = torch::TensorOptions().dtype(torch::kDouble);
  auto X = random_streams(3, {2, 3, 5}, torch::kDouble);
  auto G = random_streams(4, {2, 3, 5}, torch::kDouble, false);
  for (const auto& ws : weight_shapes(2, 3, 3, 4)) {
    auto W = torch::randn(ws, opts).requires_grad_(true);
    check([&] { return probe_loss(mix_streams(W, X), G); }, {W, X[0], X[1], X[2]}, "mix W " + std::to_string(ws.size()) + "-d");
  }
  auto y = torch::randn({2, 3, 5}, opts).requires_grad_(true);
  auto b = torch::randn({2, 3, 3}, opts).requires_grad_(true);
  check([&] { return probe_loss(add_scaled(X, b, y), G); }, {b, y, X[0], X[2]}, "add_scaled");
  auto l = torch::randn({2, 3, 4, 4}, opts).requires_grad_(true);
  auto Gc = torch::randn({2, 3, 4, 4}, opts);
  check([&] { return (sinkhorn(l, 5) * Gc).sum(); }, {l}, "sinkhorn");
  auto F = torch::randn({4, 15}, opts).requires_grad_(true);
  auto gz = torch::randn({2, 3, 4}, opts);
  check([&] { return (rms_project(X, F, 1e-6) * gz).sum(); }, {F, X[0], X[2]}, "rms_project");
}

// create_graph: the backward of each fused op is itself differentiable (second derivatives equal
// the composed ops').
TEST(StreamKernelsTest, DoubleBackwardMatchesTheComposedOps) {
  torch::manual_seed(7);
  auto opts = torch::TensorOptions().dtype(torch::kDouble);
  auto X = random_streams(3, {2, 2, 4}, torch::kDouble);
  auto W = torch::randn({2, 2, 3, 2}, opts).requires_grad_(true);
  auto b = torch::randn({3}, opts).requires_grad_(true);
  auto y = torch::randn({2, 2, 4}, opts).requires_grad_(true);
  auto l = torch::randn({2, 2, 3, 3}, opts).requires_grad_(true);
  auto G = random_streams(3, {2, 2, 4}, torch::kDouble, false);
  auto second = [&](bool fused) {
    if (!fused) set_fused_stream_kernels(false);
    auto Y = mix_streams(W, X);
    auto out = add_scaled(X, b, Y[0] * y);
    auto C = sinkhorn(l, 3);
    auto loss = probe_loss(out, G) + probe_loss(Y, G) + (C * C).sum();
    auto g = torch::autograd::grad({loss}, {W, b, y, l, X[0]}, {}, true, true);
    auto gg = (g[0].pow(2).sum() + g[1].pow(2).sum() + g[2].pow(2).sum() + g[3].pow(2).sum() + g[4].pow(2).sum());
    auto r = torch::autograd::grad({gg}, {W, b, y, l, X[1]});
    set_fused_stream_kernels(true);
    return r;
  };
  auto f = second(true), c = second(false);
  for (size_t i = 0; i < f.size(); ++i) EXPECT_LT(max_rel(f[i], c[i]), 1e-10) << "input " << i;
}

TEST(StreamKernelsTest, DispatchRunsTheLoopsOnlyWhereTheyApply) {
  auto X = random_streams(2, {2, 3, 4}, torch::kFloat);
  auto W = torch::randn({2, 3, 2, 3});
  EXPECT_NE(mix_streams(W, X)[0].grad_fn()->name().find("MixFunction"), std::string::npos);
  {
    ComposedOnly off;
    EXPECT_EQ(mix_streams(W, X)[0].grad_fn()->name().find("MixFunction"), std::string::npos);
    EXPECT_EQ(sinkhorn(torch::randn({2, 2, 2}).requires_grad_(true), 3).grad_fn()->name().find("Sinkhorn"), std::string::npos);
  }
  // bf16 streams, a weight of another dtype, or streams of different dtypes: the composed ops.
  auto Xb = random_streams(2, {2, 3, 4}, torch::kBFloat16);
  EXPECT_EQ(mix_streams(W.to(torch::kBFloat16), Xb)[0].grad_fn()->name().find("MixFunction"), std::string::npos);
  EXPECT_EQ(mix_streams(W.to(torch::kDouble), X)[0].grad_fn()->name().find("MixFunction"), std::string::npos);
  Streams mixed_dtypes{X[0], X[1].to(torch::kDouble)};
  EXPECT_EQ(weighted_sum(torch::ones({2}), mixed_dtypes).grad_fn()->name().find("MixFunction"), std::string::npos);
  // Non-contiguous streams are read through a contiguous copy: same values.
  auto base = torch::randn({2, 4, 3});
  Streams T{base.transpose(1, 2), base.transpose(1, 2) * 2};
  auto w = torch::randn({2, 3, 2});
  Streams absT{T[0].abs(), T[1].abs()};
  EXPECT_TRUE(forward_equal(weighted_sum(w, T), composed::weighted_sum(w, T), composed::weighted_sum(w.abs(), absT), 2));
  EXPECT_NE(sinkhorn(torch::randn({2, 2, 2}).requires_grad_(true), 3).grad_fn()->name().find("Sinkhorn"), std::string::npos);
}

ModelConfig model_config(const std::string& residual) {
  ModelConfig m;
  m.vocab_size = 13;
  m.ctx = 6;
  m.d_model = 16;
  m.n_layers = 2;
  m.n_heads = 2;
  m.d_ff = 32;
  m.residual.type = residual;
  resolve_model_config(m);
  return m;
}

// Whole models with the loops on and off, perturbed mixing weights: HC's loss is bit-identical
// where both are contracted (its mixing and adds are the composed ops' arithmetic), else like mHC's
// and AttnRes's within 1e-6 relative in fp32 (Sinkhorn's exp; AttnRes is bit-identical where its
// sources share a dtype), every gradient within 1e-4 of the largest entry of its tensor.
TEST(StreamKernelsTest, ModelsWithTheLoopsEqualTheComposedOps) {
  for (std::string residual : {"hc", "hc_static", "mhc", "attnres"}) {
    ModelConfig m = model_config(residual == "hc_static" ? "hc" : residual);
    if (residual == "hc_static") m.residual.keys.set("residual.dynamic", false);
    auto run = [&](bool fused) {
      torch::manual_seed(11);
      Transformer t(m);
      InitConfig init;
      init_weights(t, init);
      {
        torch::NoGradGuard ng;
        torch::manual_seed(12);
        for (auto& kv : t->named_parameters())
          if (kv.key().find("hc") != std::string::npos || kv.key().find("attnres") != std::string::npos)
            kv.value().add_(torch::randn_like(kv.value()) * 0.3);
      }
      set_fused_stream_kernels(fused);
      torch::manual_seed(13);
      auto tokens = torch::randint(0, m.vocab_size, {3, m.ctx}, torch::kLong);
      auto logits = t->forward(tokens);
      auto loss = torch::nn::functional::cross_entropy(logits.view({-1, m.vocab_size}), tokens.view(-1));
      loss.backward();
      set_fused_stream_kernels(true);
      std::vector<std::pair<std::string, torch::Tensor>> grads;
      for (auto& kv : t->named_parameters()) grads.emplace_back(kv.key(), kv.value().grad().clone());
      return std::make_pair(loss.detach(), grads);
    };
    auto [lf, gf] = run(true);
    auto [lc, gc] = run(false);
    if (residual.rfind("hc", 0) == 0 && both_contract(torch::kFloat))
      EXPECT_TRUE(torch::equal(lf, lc)) << residual << ": " << lf.item<double>() << " vs " << lc.item<double>();
    else
      EXPECT_LT(max_rel(lf, lc), 1e-6) << residual;
    ASSERT_EQ(gf.size(), gc.size());
    for (size_t i = 0; i < gf.size(); ++i) EXPECT_LT(max_rel(gf[i].second, gc[i].second), 1e-4) << residual << " " << gf[i].first;
  }
}

}  // namespace
}  // namespace normlab
