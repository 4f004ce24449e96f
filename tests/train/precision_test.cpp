// Mixed precision (src/train/README.md) on the CPU: the config rules, autocast, norms computing in
// fp32 and casting once, bf16 training, and the fp16 loss-scaling arithmetic (the fp16 trainer
// itself needs CUDA: tests/train/cuda_test.cpp, suite CudaPrecision).
#include <gtest/gtest.h>

#include <cmath>

#include "config/load.h"
#include "core/errors.h"
#include "core/torch_compat.h"
#include "data/corpus.h"
#include "model/norms/norm.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "train/loss_scale.h"
#include "train/run_config.h"
#include "train/step.h"
#include "train/trainer.h"
#include "test_util.h"

namespace normlab {
namespace {


std::string config_error(Config c) {
  try {
    testing::resolved(c);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(PrecisionConfig, Fp16NeedsCudaAndUnknownValuesAreRejected) {
  Config c = testing::tiny_config("/unused");
  c.train.precision = Precision::kFp16;
  const std::string e = config_error(c);
  EXPECT_NE(e.find("train.precision"), std::string::npos) << e;
  EXPECT_NE(e.find("cuda"), std::string::npos) << e;
  try {
    parse_config_text("train: {precision: fp8}\n");
    ADD_FAILURE() << "fp8 accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.precision: expected one of: fp32, bf16, fp16, got 'fp8'"),
              std::string::npos) << e.what();
  }
  c.train.precision = Precision::kBf16;
  EXPECT_EQ(config_error(c), "");
  EXPECT_EQ(precision_dtype(Precision::kBf16), torch::kBFloat16);
  EXPECT_EQ(precision_dtype(Precision::kFp16), torch::kHalf);
  EXPECT_EQ(precision_dtype(Precision::kFp32), torch::kFloat);
}

TEST(Autocast, GuardRunsMatmulsInTheLowTypeAndRestoresTheState) {
  torch::manual_seed(0);
  torch::nn::Linear lin(8, 4);
  auto x = torch::randn({2, 8});
  {
    AutocastGuard g(torch::kCPU, torch::kBFloat16);
    EXPECT_EQ(lin(x).scalar_type(), torch::kBFloat16);
    {
      AutocastGuard off(torch::kCPU, torch::kFloat);  // fp32: leaves autocast as it is
      EXPECT_EQ(lin(x).scalar_type(), torch::kBFloat16);
    }
  }
  EXPECT_EQ(lin(x).scalar_type(), torch::kFloat);
}

// Every norm module under autocast: the input is upcast, the whole norm computes in fp32 and the
// result is cast back once, so it equals the fp32 computation of the same input cast to bf16.
TEST(Autocast, EveryNormEqualsItsFp32ComputationCastOnce) {
  for (const auto& type : norm_registry()) {
    NormOptions o;
    o.size = 48;
    o.eps = std::isnan(type.default_eps) ? 1e-5 : type.default_eps;
    torch::manual_seed(3);
    NormPtr norm = type.make(o);
    {
      torch::NoGradGuard ng;  // non-trivial gains and biases
      for (auto& p : norm->parameters()) p.add_(torch::randn_like(p) * 0.1);
    }
    norm->train(type.name != "batchnorm");
    auto x = (torch::randn({4, 6, 48}) * 3 + 1).to(torch::kBFloat16);
    torch::Tensor expected = norm->forward(x.to(torch::kFloat)).to(torch::kBFloat16);
    torch::Tensor y;
    {
      AutocastGuard g(torch::kCPU, torch::kBFloat16);
      y = norm->forward(x);
    }
    EXPECT_EQ(y.scalar_type(), torch::kBFloat16) << type.name;
    EXPECT_TRUE(torch::equal(y, expected)) << type.name << ": max diff "
                                           << (y.to(torch::kFloat) - expected.to(torch::kFloat)).abs().max().item<float>();
  }
}

// bf16 on the CPU trains the tiny model: the loss record is fp32, finite, and follows fp32 closely.
TEST(Bf16Training, FollowsFp32OnTheCpu) {
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "fp32");
  ASSERT_EQ(train(testing::resolved(c), {}), 0);
  c.out_dir = dir / "bf16";
  c.train.precision = Precision::kBf16;
  ASSERT_EQ(train(testing::resolved(c), {}), 0);
  auto a = testing::records(dir / "fp32", "train"), b = testing::records(dir / "bf16", "train");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double la = a[i]["loss"].as<double>(), lb = b[i]["loss"].as<double>();
    ASSERT_TRUE(std::isfinite(lb)) << i;
    EXPECT_NEAR(la, lb, 0.03 * la) << "step " << i;
    EXPECT_FALSE(b[i]["loss_scale"]) << "bf16 needs no loss scale";
  }
  auto ea = testing::records(dir / "fp32", "eval"), eb = testing::records(dir / "bf16", "eval");
  EXPECT_NEAR(ea.back()["val_loss"].as<double>(), eb.back()["val_loss"].as<double>(),
              0.02 * ea.back()["val_loss"].as<double>());
}

TEST(LossScaler, HalvesOnOverflowDoublesAfterTheIntervalAndRestores) {
  LossScaler off(false);
  EXPECT_EQ(off.scale(), 1.0);
  EXPECT_FALSE(off.update(false)) << "a disabled scaler never skips";

  LossScaler s(true, 65536.0, 3);
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_FALSE(s.update(true));
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_FALSE(s.update(true));  // the third consecutive finite step
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_FALSE(s.update(true));
  EXPECT_TRUE(s.update(false));  // an overflow resets the count
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_EQ(s.scale(), 32768.0);
  s.restore(1024.0, 2);
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_EQ(s.good_steps(), 2);
  s.restore(std::nan(""), 0);
  EXPECT_EQ(s.scale(), 1024.0) << "a corrupt scale is ignored";
}

// The arithmetic of a scaled step on real gradients: a power-of-two loss scale gives gradients
// exactly that many times larger, and the update (clipping from the unscaled norm, then unscaling
// inside the optimizer) is bitwise the unscaled one. An absurd scale overflows the fp32 gradients:
// the step's norm is not finite, which is what the scaler treats as an overflow.
TEST(LossScaler, ScaledStepEqualsTheUnscaledStepAndAnAbsurdScaleOverflows) {
  Config c = testing::resolved(testing::tiny_config("/unused"));
  Corpus data = Corpus::load(c.data.train);
  auto run = [&](double scale, double* grad_norm_out) {
    torch::manual_seed(1);
    Transformer model(c.model);
    init_weights(model, c.init);
    std::vector<std::pair<std::string, torch::Tensor>> named;
    for (auto& kv : model->named_parameters()) named.emplace_back(kv.key(), kv.value());
    Optimizer opt(named, c.optim);
    int64_t mb = 0;
    forward_backward(c, model, opt, data, torch::kCPU, mb, false, scale);
    double sq = 0;
    for (auto& [n, p] : named) sq += p.grad().to(torch::kDouble).pow(2).sum().item<double>();
    const double norm = std::sqrt(sq) / scale;
    *grad_norm_out = norm;
    if (std::isfinite(norm)) clip_and_step(c, opt, 1e-3, norm, scale);
    std::vector<torch::Tensor> w;
    for (auto& [n, p] : named) w.push_back(p.detach().clone());
    return w;
  };
  double n1 = 0, n2 = 0, n3 = 0;
  auto w1 = run(1.0, &n1), w2 = run(1024.0, &n2);
  EXPECT_DOUBLE_EQ(n1, n2);
  for (size_t i = 0; i < w1.size(); ++i) EXPECT_TRUE(torch::equal(w1[i], w2[i])) << i;
  run(1e39, &n3);
  EXPECT_FALSE(std::isfinite(n3));
}

}  // namespace
}  // namespace normlab
