// The GELU kernel (ffn_kernels.h) against LibTorch's exact gelu: values and gradients over the
// whole range where GELU bends, the far tails, odd lengths (vector tails) and the FFN module.
#include <gtest/gtest.h>

#include "model/attention.h"

namespace normlab {
namespace {

// Every x in [-12, 12] on a fine grid, plus random values; 24001 + 13 elements (not a multiple
// of 8) so the vector tail runs too.
torch::Tensor gelu_inputs() {
  torch::manual_seed(1);
  return torch::cat({torch::linspace(-12, 12, 24001), torch::randn({13}) * 3}).requires_grad_(true);
}

TEST(GeluKernel, ForwardMatchesLibTorchExactGelu) {
  auto x = gelu_inputs();
  ASSERT_TRUE(gelu_fast_path_applies(x));
  auto fast = gelu(x, true), ref = torch::gelu(x);
  // erf to 1.5e-7 absolute: |error| <= x * 1.5e-7 / 2 plus float rounding
  auto err = (fast - ref).abs() / x.detach().abs().clamp_min(1.0);
  EXPECT_LT(err.max().item<double>(), 3e-7);
  EXPECT_TRUE(torch::isfinite(fast).all().item<bool>());
}

TEST(GeluKernel, GradientMatchesLibTorchGeluBackward) {
  auto x = gelu_inputs();
  auto g = torch::randn({x.numel()});
  auto fast = torch::autograd::grad({gelu(x, true)}, {x}, {g})[0];
  auto ref = torch::autograd::grad({torch::gelu(x)}, {x}, {g})[0];
  auto err = (fast - ref).abs() / g.abs().clamp_min(1.0);
  EXPECT_LT(err.max().item<double>(), 5e-7);
}

TEST(GeluKernel, FarTailsAreExact) {
  auto x = torch::tensor({-30.0f, -15.0f, -9.0f, 9.0f, 15.0f, 30.0f, 0.0f, -0.0f});
  auto y = gelu(x, true);
  auto ref = torch::gelu(x);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(y[i].item<float>(), ref[i].item<float>(), 1e-6) << i;
  EXPECT_EQ(y[5].item<float>(), 30.0f);
}

TEST(GeluKernel, SecondOrderGradientsMatchLibTorch) {
  auto x = torch::linspace(-4, 4, 37).requires_grad_(true);
  auto second = [&](bool fast) {
    auto y = fast ? gelu(x, true) : torch::gelu(x);
    auto g1 =
        torch::autograd::grad({y.sum()}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true)[0];
    return torch::autograd::grad({g1.sum()}, {x})[0];
  };
  EXPECT_TRUE(torch::allclose(second(true), second(false), 1e-5, 1e-6));
}

TEST(GeluKernel, FfnGivesTheSameOutputAndGradientsWithEitherPath) {
  torch::manual_seed(2);
  FfnOptions o;
  o.d_model = 24;
  o.d_ff = 72;
  Ffn ffn(o);
  auto x = torch::randn({3, 5, 24});
  auto run = [&](bool fast) {
    ffn->set_fast_path(fast);
    ffn->zero_grad();
    auto y = ffn->forward(x);
    y.pow(2).sum().backward();
    std::vector<torch::Tensor> out{y.detach().flatten()};
    for (auto& p : ffn->parameters()) out.push_back(p.grad().flatten().clone());
    return torch::cat(out);
  };
  EXPECT_TRUE(torch::allclose(run(true), run(false), 1e-5, 1e-6));
}

}  // namespace
}  // namespace normlab
