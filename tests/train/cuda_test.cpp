// The device-agnostic code on a GPU: every test here needs CUDA. Their suites start with "Cuda",
// which gives them the CTest label `cuda` (tests/CMakeLists.txt), and each one skips, visibly and
// with the reason, where no CUDA device is visible: `ctest -L cuda` lists what ran and what was
// skipped. The CPU side of the same code is covered by every other test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <yaml-cpp/yaml.h>

#include "core/torch_compat.h"
#include "model/layouts/layout.h"
#include "model/norms/norm.h"
#include "model/transformer.h"
#include "train/bench.h"
#include "train/checkpoint.h"
#include "train/run_config.h"
#include "train/trainer.h"
#include "test_util.h"

namespace normlab {
namespace {

#define NORMLAB_REQUIRE_CUDA()                                                           \
  if (!torch::cuda::is_available())                                                      \
  GTEST_SKIP() << "needs a CUDA device; this build: LibTorch " << torch_build_description()


double json_number(const std::string& line, const std::string& key) {
  return YAML::Load(line)[key].as<double>();
}

// Trains c on the CPU into dir/cpu and on the GPU into dir/cuda; the two runs' train records.
// Call it under ASSERT_NO_FATAL_FAILURE: a failed run stops the test.
void train_on_cpu_and_cuda(Config c, const testing::TempDir& dir, std::vector<YAML::Node>* cpu,
                           std::vector<YAML::Node>* cuda) {
  c.out_dir = dir / "cpu";
  ASSERT_EQ(train(testing::resolved(c), {}), 0);
  c.out_dir = dir / "cuda";
  c.train.device = DeviceKind::kCuda;
  ASSERT_EQ(train(testing::resolved(c), {}), 0);
  *cpu = testing::records(dir / "cpu", "train");
  *cuda = testing::records(dir / "cuda", "train");
}

// Forward and backward of the same model and batch on the CPU (fast kernels where they apply) and
// on the GPU (LibTorch's composed ops): logits and every gradient agree, for every layout and norm.
TEST(CudaModel, EveryLayoutAndNormMatchesTheCpu) {
  NORMLAB_REQUIRE_CUDA();
  for (const auto& layout : layout_registry()) {
    for (const auto& norm : norm_registry()) {
      Config c = testing::tiny_config("/unused");
      c.model.norm.type = norm.name;
      c.model.n_layers = 4;
      c.model.qk_norm = true;
      c = fit_to_layout(layout, c);  // nGPT: no norms, no QK-norm (its scope)
      if (c.model.norm.type != norm.name) continue;  // a layout with no norms runs once
      Config r = testing::resolved(c);
      torch::manual_seed(7);
      Transformer cpu(r.model);
      init_weights(cpu, r.init);
      Transformer gpu(r.model);
      {
        torch::NoGradGuard ng;
        auto src = cpu->named_parameters(), dst = gpu->named_parameters();
        for (auto& kv : src) dst[kv.key()].copy_(kv.value());
        auto sb = cpu->named_buffers(), db = gpu->named_buffers();
        for (auto& kv : sb) db[kv.key()].copy_(kv.value());
      }
      gpu->to(torch::kCUDA);
      auto tokens = torch::randint(0, 256, {3, 32}, torch::kLong);
      auto lc = cpu->forward(tokens), lg = gpu->forward(tokens.to(torch::kCUDA));
      const std::string what = layout.name + "/" + norm.name;
      EXPECT_TRUE(torch::allclose(lc, lg.cpu(), 1e-4, 1e-4)) << what << ": logits";
      lc.square().mean().backward();
      lg.square().mean().backward();
      auto pg = gpu->named_parameters();
      for (auto& kv : cpu->named_parameters()) {
        if (!kv.value().grad().defined()) continue;
        EXPECT_TRUE(torch::allclose(kv.value().grad(), pg[kv.key()].grad().cpu(), 1e-3, 1e-5))
            << what << ": " << kv.key();
      }
    }
  }
}

// The default model trained 20 steps on the GPU follows the CPU's losses; its checkpoint loads on
// the CPU and evaluates to the same loss there as on the GPU, and a CPU checkpoint loads on the GPU.
TEST(CudaTrain, FollowsTheCpuAndCheckpointsMoveBetweenDevices) {
  NORMLAB_REQUIRE_CUDA();
  testing::TempDir dir;
  std::vector<YAML::Node> a, b;
  ASSERT_NO_FATAL_FAILURE(train_on_cpu_and_cuda(testing::tiny_config(dir / "cpu"), dir, &a, &b));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i]["loss"].as<double>(), b[i]["loss"].as<double>(), 1e-3 * a[i]["loss"].as<double>()) << i;
  }
  const std::string bin = testing::normlab_binary();
  for (const std::string& run : {dir / "cpu", dir / "cuda"}) {
    auto on_cpu = testing::run_command(bin + " eval --run " + run + " --device cpu");
    auto on_gpu = testing::run_command(bin + " eval --run " + run + " --device cuda");
    ASSERT_EQ(on_cpu.status, 0);
    ASSERT_EQ(on_gpu.status, 0);
    EXPECT_NEAR(json_number(on_cpu.out, "loss"), json_number(on_gpu.out, "loss"), 1e-5) << run;
  }
  // the run's own last eval record (on the GPU) equals the CPU eval of its checkpoint
  auto ev = testing::records(dir / "cuda", "eval");
  auto cpu_eval = testing::run_command(bin + " eval --run " + (dir / "cuda"));
  EXPECT_NEAR(ev.back()["val_loss"].as<double>(), json_number(cpu_eval.out, "loss"), 1e-5);
  auto s_cpu = testing::run_command(bin + " sample --run " + (dir / "cuda") + " --prompt 'a' --max-new 8 --temperature 0");
  auto s_gpu = testing::run_command(bin + " sample --run " + (dir / "cuda") + " --prompt 'a' --max-new 8 --temperature 0 --device cuda");
  EXPECT_EQ(s_gpu.status, 0);
  EXPECT_EQ(s_cpu.out.size(), 8u);
  EXPECT_EQ(s_gpu.out.size(), 8u);
}

// Every parametrization off its base shape (m_N = 2; completep also m_L = 2) under AdamW and under
// Muon: 20 steps on the GPU follow the CPU's losses. The per-role multipliers, the score scale, the
// readout multiplier and the branch multiplier are device-agnostic code; this holds them to the CPU
// on the device the width studies run on. Muon's Newton-Schulz products are bf16 on both devices,
// in different accumulation orders, hence its looser bound; the largest deviation is printed.
TEST(CudaTrain, EveryParametrizationFollowsTheCpuUnderAdamWAndMuon) {
  NORMLAB_REQUIRE_CUDA();
  for (const std::string optim : {"adamw", "muon"}) {
    for (const auto& entry : parametrization_registry()) {
      const std::string& type = entry.name;
      testing::TempDir dir;
      Config c = testing::tiny_config(dir / "cpu");
      c.optim.type = optim;
      testing::off_base_shape(c, type);
      std::vector<YAML::Node> a, b;
      ASSERT_NO_FATAL_FAILURE(train_on_cpu_and_cuda(c, dir, &a, &b));
      ASSERT_EQ(a.size(), b.size());
      const double tol = optim == "muon" ? 1e-2 : 1e-3;
      double worst = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        const double la = a[i]["loss"].as<double>(), lb = b[i]["loss"].as<double>();
        worst = std::max(worst, std::abs(la - lb) / la);
        EXPECT_NEAR(la, lb, tol * la) << optim << "/" << type << " step " << i;
      }
      std::printf("%s/%s: largest relative loss difference CPU vs CUDA over %zu steps: %.2e\n",
                  optim.c_str(), type.c_str(), a.size(), worst);
    }
  }
}

// A step reads the device once (loss and gradient-norm groups in one transfer): ten more plain
// steps (no diagnostics, logging, eval or checkpoint among them) cost exactly ten more syncs.
TEST(CudaTrain, OneHostReadPerPlainStep) {
  NORMLAB_REQUIRE_CUDA();
  auto syncs_for = [](int64_t steps, const std::string& out) {
    Config c = testing::tiny_config(out);
    c.train.device = DeviceKind::kCuda;
    c.train.steps = steps;
    c.train.log_every = 1000;
    c.diag.every = 1000;
    c.eval.every = 0;
    c.train.checkpoint_every = 1000;
    Config r = testing::resolved(c);
    CudaSyncCounter counter;
    EXPECT_EQ(train(r, {}), 0);
    return counter.count();
  };
  testing::TempDir dir;
  const int64_t short_run = syncs_for(10, dir / "a"), long_run = syncs_for(20, dir / "b");
  EXPECT_EQ(long_run - short_run, 10) << "syncs: " << short_run << " for 10 steps, " << long_run << " for 20";
}

// bench on a GPU: MFU against the GPU's own measured matmul peak (fp32, and bf16 beside it).
TEST(CudaBench, MfuIsAgainstThePeakOfTheGpu) {
  NORMLAB_REQUIRE_CUDA();
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "bench");
  c.train.device = DeviceKind::kCuda;
  BenchResult r = bench_training(testing::resolved(c), "tiny", 2, 5);
  EXPECT_EQ(r.device.rfind("cuda", 0), 0u);
  EXPECT_GT(r.gemm_peak_gflops, 1000.0);  // any CUDA GPU beats a CPU core by this much
  EXPECT_GT(r.gemm_peak_bf16_gflops, 0.0);
  EXPECT_GT(r.mfu, 0.0);
  EXPECT_LT(r.mfu, 1.0);
  EXPECT_GT(r.peak_device_mib, 0.0);
}

// The precisions of src/train/README.md on a GPU: bf16 and fp16 follow fp32 on the tiny model
// (losses within 3 %, final validation within 2 %); fp16 records carry the loss scale, 2^16 at the
// start; the train records' grad_norm is of the unscaled gradients (close to fp32's).
TEST(CudaPrecision, Bf16AndFp16FollowFp32) {
  NORMLAB_REQUIRE_CUDA();
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "fp32");
  c.train.device = DeviceKind::kCuda;
  c.train.steps = 60;
  ASSERT_EQ(train(testing::resolved(c), {}), 0);
  const auto a = testing::records(dir / "fp32", "train");
  const double val32 = testing::records(dir / "fp32", "eval").back()["val_loss"].as<double>();
  for (const std::string prec : {"bf16", "fp16"}) {
    c.out_dir = dir / prec;
    c.train.precision = *parse_choice<Precision>(prec);
    ASSERT_EQ(train(testing::resolved(c), {}), 0) << prec;
    const auto b = testing::records(dir / prec, "train");
    ASSERT_EQ(a.size(), b.size()) << prec;
    for (size_t i = 0; i < a.size(); ++i) {
      const double la = a[i]["loss"].as<double>(), lb = b[i]["loss"].as<double>();
      EXPECT_NEAR(la, lb, 0.03 * la) << prec << " step " << i;
      EXPECT_NEAR(a[i]["grad_norm"].as<double>(), b[i]["grad_norm"].as<double>(),
                  0.1 * a[i]["grad_norm"].as<double>()) << prec << " step " << i;
      EXPECT_EQ(static_cast<bool>(b[i]["loss_scale"]), prec == "fp16") << prec;
    }
    if (prec == "fp16") {
      EXPECT_EQ(b[0]["loss_scale"].as<double>(), 65536.0);
    }
    const double val = testing::records(dir / prec, "eval").back()["val_loss"].as<double>();
    EXPECT_NEAR(val, val32, 0.02 * val32) << prec;
  }
}

// fp16 overflow, forced by a loss scale too large for fp16 (the test hook NORMLAB_TEST_LOSS_SCALE,
// 2^24: the logits' gradient alone is about 2^24 / (B*T) > 65504): the overflowing steps are
// recorded as skipped overflows (not non-finite failures, not spikes), the scale halves at each,
// the weights do not move across them, and training then proceeds at the lower scale.
TEST(CudaPrecision, Fp16OverflowSkipsTheUpdateAndHalvesTheScale) {
  NORMLAB_REQUIRE_CUDA();
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "run");
  c.train.device = DeviceKind::kCuda;
  c.train.precision = Precision::kFp16;
  c.train.checkpoint_every = 1;
  c.train.save_init = true;
  ::setenv("NORMLAB_TEST_LOSS_SCALE", "16777216", 1);
  const int rc = train(testing::resolved(c), {});
  ::unsetenv("NORMLAB_TEST_LOSS_SCALE");
  ASSERT_EQ(rc, 0);
  const auto recs = testing::records(dir / "run", "train");
  ASSERT_TRUE(recs[0]["overflow"] && recs[0]["overflow"].as<bool>()) << "2^24 must overflow fp16";
  double scale = 16777216.0;
  size_t overflows = 0;
  for (const auto& r : recs) {
    EXPECT_EQ(r["loss_scale"].as<double>(), scale);
    if (!r["overflow"]) continue;
    EXPECT_TRUE(r["skipped"].as<bool>());
    EXPECT_FALSE(r["nonfinite"]);
    scale /= 2;
    ++overflows;
    // the update was skipped: the weights after this step are those before it
    const int64_t s = r["step"].as<int64_t>();
    Transformer a(testing::resolved(c).model), b(testing::resolved(c).model);
    load_model_weights(dir / ("run/checkpoints/" + checkpoint_name(s)), a);
    load_model_weights(dir / ("run/checkpoints/" + checkpoint_name(s + 1)), b);
    for (auto& kv : a->named_parameters()) {
      EXPECT_TRUE(torch::equal(kv.value(), b->named_parameters()[kv.key()])) << "step " << s << ": " << kv.key();
    }
  }
  EXPECT_LT(overflows, recs.size()) << "the scale came down and training went on";
  EXPECT_LT(recs.back()["loss"].as<double>(), recs.front()["loss"].as<double>());
  EXPECT_TRUE(testing::records(dir / "run", "spike").empty());
}

// bench on a GPU in bf16: MFU against the bf16 peak, and the same first loss as fp32 to bf16
// precision.
TEST(CudaBench, Bf16StepIsMeasuredAgainstTheBf16Peak) {
  NORMLAB_REQUIRE_CUDA();
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "bench");
  c.train.device = DeviceKind::kCuda;
  BenchResult f = bench_training(testing::resolved(c), "tiny", 2, 5);
  c.train.precision = Precision::kBf16;
  BenchResult b = bench_training(testing::resolved(c), "tiny", 2, 5);
  EXPECT_EQ(b.precision, "bf16");
  EXPECT_EQ(b.mfu_of, "bf16");
  EXPECT_NEAR(b.mfu, b.gflops / b.gemm_peak_bf16_gflops, 1e-12);
  EXPECT_NEAR(b.first_loss, f.first_loss, 0.02 * f.first_loss);
}

}  // namespace
}  // namespace normlab
