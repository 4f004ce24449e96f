// The bf16 CPU GELU (gelu_kernel.h, dispatched by ffn_gelu): the fp32 arithmetic against the
// formula in double (std::erf), the bf16 entry points against LibTorch's rounding of that, the
// autograd wrapper against the composed fp32 reference, and the dispatch (fp32 is untouched).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "model/ffn.h"
#include "model/gelu_kernel.h"

namespace normlab {
namespace {

double gelu_d(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_grad_d(double x) {
  return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
}

// A grid over [-12, 12] (both tails, where Phi saturates) with a length that leaves a tail for
// the 8-lane loop, plus the points where the approximation's branches meet.
std::vector<float> grid() {
  std::vector<float> xs;
  for (int i = 0; i <= 24001; ++i) xs.push_back(-12.0f + 24.0f * static_cast<float>(i) / 24001.0f);
  for (float x : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-4f, -1e-4f, 0.5f, -0.5f, 3.0f, -3.0f}) xs.push_back(x);
  return xs;
}

// The approximation (A&S 7.1.26, |error| <= 1.5e-7 in erf) plus fp32 rounding: GELU within
// 2e-7 (1 + |x|), its derivative within 1e-6 (1 + |x|), everywhere on the grid.
TEST(GeluKernel, Fp32ArithmeticFollowsTheFormulaInDouble) {
  const auto xs = grid();
  const int64_t n = static_cast<int64_t>(xs.size());
  std::vector<float> y(n), dy(n, 1.0f), dx(n);
  gelu_kernel::forward_f32(xs.data(), y.data(), n);
  gelu_kernel::backward_f32(xs.data(), dy.data(), dx.data(), n);
  double worst_y = 0, worst_d = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = xs[i], scale = 1.0 + std::abs(x);
    worst_y = std::max(worst_y, std::abs(y[i] - gelu_d(x)) / scale);
    worst_d = std::max(worst_d, std::abs(dx[i] - gelu_grad_d(x)) / scale);
  }
  EXPECT_LT(worst_y, 2e-7);
  EXPECT_LT(worst_d, 1e-6);
  // The chain rule's factor: dx = dy * gelu'(x).
  std::vector<float> g(n, -2.5f), dx2(n);
  gelu_kernel::backward_f32(xs.data(), g.data(), dx2.data(), n);
  for (int64_t i = 0; i < n; i += 997) EXPECT_FLOAT_EQ(dx2[i], -2.5f * dx[i]) << xs[i];
}

TEST(GeluKernel, NanPropagatesAndTheTailsSaturate) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {nan, 40.0f, -40.0f, 1e6f, -1e6f}, y(5), one(5, 1.0f), d(5);
  gelu_kernel::forward_f32(x.data(), y.data(), 5);
  gelu_kernel::backward_f32(x.data(), one.data(), d.data(), 5);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_TRUE(std::isnan(d[0]));
  EXPECT_FLOAT_EQ(y[1], 40.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_FLOAT_EQ(y[3], 1e6f);
  EXPECT_EQ(y[4], 0.0f);
  EXPECT_FLOAT_EQ(d[1], 1.0f);
  EXPECT_EQ(d[2], 0.0f);
}

// The bf16 entry points are the fp32 arithmetic between bf16 loads and LibTorch's rounding: bit
// for bit the fp32 kernel's result cast with .to(kBFloat16), NaN where it is NaN; sizes around the
// vector width and the parallel grain, so the tail and every chunk boundary are covered.
TEST(GeluKernel, Bf16IsTheFp32ArithmeticRoundedAsLibTorchRounds) {
  torch::manual_seed(3);
  for (int64_t n : {1, 7, 8, 9, 1000, 70001}) {
    auto xb = (torch::randn({n}) * 3).to(torch::kBFloat16);
    if (n > 2) xb[1] = std::numeric_limits<float>::quiet_NaN();
    auto gb = torch::randn({n}).to(torch::kBFloat16);
    auto xf = xb.to(torch::kFloat).contiguous(), gf = gb.to(torch::kFloat).contiguous();
    auto yf = torch::empty_like(xf), df = torch::empty_like(xf);
    gelu_kernel::forward_f32(xf.data_ptr<float>(), yf.data_ptr<float>(), n);
    gelu_kernel::backward_f32(xf.data_ptr<float>(), gf.data_ptr<float>(), df.data_ptr<float>(), n);
    auto yb = torch::empty_like(xb), db = torch::empty_like(xb);
    auto p = [](const torch::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); };
    gelu_kernel::forward_bf16(p(xb), p(yb), n);
    gelu_kernel::backward_bf16(p(xb), p(gb), p(db), n);
    // NaN has no one bit pattern in LibTorch (c10::BFloat16 gives 0x7FC0, its vectorised casts
    // 0xFFFF): NaN where the reference is NaN, the same bits everywhere else.
    for (auto [got, want] : {std::pair{yb, yf}, std::pair{db, df}}) {
      const auto nan = torch::isnan(want);
      EXPECT_TRUE(torch::equal(torch::isnan(got), nan)) << n;
      EXPECT_TRUE(torch::equal(got.masked_fill(nan, 0).view(torch::kInt16),
                               want.masked_fill(nan, 0).to(torch::kBFloat16).view(torch::kInt16)))
          << n;
    }
  }
}

// Through autograd: output and input gradient against torch::gelu computed in fp32 on the same
// bf16-rounded input. Tolerance: bf16 rounding of the output and of the gradient (2^-8 relative,
// 4e-3) with margin, 1e-2 of the largest magnitude.
TEST(GeluKernel, FfnGeluOnBf16MatchesTheFp32ComposedReference) {
  torch::manual_seed(5);
  auto xb = (torch::randn({4, 33, 40}) * 2).to(torch::kBFloat16).requires_grad_(true);
  ASSERT_TRUE(gelu_kernel_applies(xb));
  auto y = ffn_gelu(xb);
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  auto g = torch::randn({4, 33, 40}).to(torch::kBFloat16);
  auto dx = torch::autograd::grad({y}, {xb}, {g})[0];
  EXPECT_EQ(dx.scalar_type(), torch::kBFloat16);
  auto xr = xb.detach().to(torch::kFloat).requires_grad_(true);
  auto ref = torch::gelu(xr);
  auto dref = torch::autograd::grad({ref}, {xr}, {g.to(torch::kFloat)})[0];
  auto rel = [](const torch::Tensor& a, const torch::Tensor& b) {
    return ((a.to(torch::kFloat) - b).abs().max() / b.abs().max()).item<double>();
  };
  EXPECT_LT(rel(y, ref), 1e-2);
  EXPECT_LT(rel(dx, dref), 1e-2);
  // Elementwise, y is the reference rounded to bf16 or one bf16 step away from it, give or take
  // the approximation's absolute error (erf to 1.5e-7, and 1 - erf cancels in fp32 in the far
  // negative tail, where GELU is below 1e-6: LibTorch's own vectorised erf GELU did the same;
  // LibTorch 2.x computes those tiny values more exactly).
  auto step = ref.abs() * std::ldexp(1.0, -7) + 1e-6;
  EXPECT_TRUE(((y.to(torch::kFloat) - ref).abs() <= step).all().item<bool>());
}

TEST(GeluKernel, SecondOrderGradientsMatchTheReference) {
  torch::manual_seed(6);
  auto x = torch::randn({64}).to(torch::kBFloat16).requires_grad_(true);
  auto g1 = torch::autograd::grad({ffn_gelu(x).sum()}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true)[0];
  auto g2 = torch::autograd::grad({g1.sum()}, {x})[0];
  auto xr = x.detach().to(torch::kFloat).requires_grad_(true);
  auto r1 = torch::autograd::grad({torch::gelu(xr).sum()}, {xr}, {}, true, true)[0];
  auto r2 = torch::autograd::grad({r1.sum()}, {xr})[0];
  EXPECT_LT(((g2.to(torch::kFloat) - r2).abs().max() / r2.abs().max()).item<double>(), 1e-2);
}

// fp32 (and anything not contiguous bf16 on the CPU) is LibTorch's gelu, bit for bit: fp32 runs
// are unchanged by the bf16 path.
TEST(GeluKernel, OnlyContiguousBf16TakesTheKernel) {
  torch::manual_seed(7);
  auto x = torch::randn({8, 16});
  EXPECT_FALSE(gelu_kernel_applies(x));
  EXPECT_TRUE(torch::equal(ffn_gelu(x), torch::gelu(x)));
  auto xb = x.to(torch::kBFloat16);
  EXPECT_TRUE(gelu_kernel_applies(xb));
  auto strided = xb.t();
  EXPECT_FALSE(gelu_kernel_applies(strided));
  EXPECT_TRUE(torch::equal(ffn_gelu(strided), torch::gelu(strided)));
  EXPECT_FALSE(gelu_kernel_applies(x.to(torch::kDouble)));
}

}  // namespace
}  // namespace normlab
