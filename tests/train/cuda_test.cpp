// The device-agnostic code on a GPU: every test here needs CUDA. Their suites start with "Cuda",
// which gives them the CTest label `cuda` (tests/CMakeLists.txt), and each one skips, visibly and
// with the reason, where no CUDA device is visible: `ctest -L cuda` lists what ran and what was
// skipped. The CPU side of the same code is covered by every other test.
#include <gtest/gtest.h>

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

Config resolved(Config c) { return check_and_resolve(LoadedConfig{c, {}}, true); }

double json_number(const std::string& line, const std::string& key) {
  return YAML::Load(line)[key].as<double>();
}

// Forward and backward of the same model and batch on the CPU (fast kernels where they apply) and
// on the GPU (LibTorch's composed ops): logits and every gradient agree, for every layout and norm.
TEST(CudaModel, EveryLayoutAndNormMatchesTheCpu) {
  NORMLAB_REQUIRE_CUDA();
  for (const auto& layout : layout_registry()) {
    for (const auto& norm : norm_registry()) {
      Config c = testing::tiny_config("/unused");
      c.model.layout = layout.name;
      c.model.norm.type = norm.name;
      c.model.n_layers = 4;
      c.model.qk_norm = true;
      Config r = resolved(c);
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
  Config c = testing::tiny_config(dir / "cpu");
  ASSERT_EQ(train(resolved(c), {}), 0);
  c.out_dir = dir / "cuda";
  c.train.device = "cuda";
  ASSERT_EQ(train(resolved(c), {}), 0);
  auto a = testing::records(dir / "cpu", "train"), b = testing::records(dir / "cuda", "train");
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

// A step reads the device once (loss and gradient-norm groups in one transfer): ten more plain
// steps (no diagnostics, logging, eval or checkpoint among them) cost exactly ten more syncs.
TEST(CudaTrain, OneHostReadPerPlainStep) {
  NORMLAB_REQUIRE_CUDA();
  auto syncs_for = [](int64_t steps, const std::string& out) {
    Config c = testing::tiny_config(out);
    c.train.device = "cuda";
    c.train.steps = steps;
    c.train.log_every = 1000;
    c.diag.every = 1000;
    c.eval.every = 0;
    c.train.checkpoint_every = 1000;
    Config r = resolved(c);
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
  c.train.device = "cuda";
  BenchResult r = bench_training(resolved(c), "tiny", 2, 5);
  EXPECT_EQ(r.device.rfind("cuda", 0), 0u);
  EXPECT_GT(r.gemm_peak_gflops, 1000.0);  // any CUDA GPU beats a CPU core by this much
  EXPECT_GT(r.gemm_peak_bf16_gflops, 0.0);
  EXPECT_GT(r.mfu, 0.0);
  EXPECT_LT(r.mfu, 1.0);
  EXPECT_GT(r.peak_device_mib, 0.0);
}

}  // namespace
}  // namespace normlab
