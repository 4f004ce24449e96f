#include "train/device.h"

#include <gtest/gtest.h>

#include "core/errors.h"
#include "train/run_config.h"
#include "test_util.h"

namespace normlab {
namespace {

TEST(DeviceTest, CpuAlwaysResolves) {
  EXPECT_TRUE(resolve_device("cpu", "--device").is_cpu());
  EXPECT_EQ(device_unavailable_reason("cpu"), "");
}

TEST(DeviceTest, MalformedNamesAreUsageErrorsNamingTheOption) {
  for (const std::string bad : {"", "gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "cuda:0:1", "cpu:0", "cuda:123456"}) {
    EXPECT_EQ(device_unavailable_reason(bad), "expected cpu, cuda or cuda:N") << bad;
    try {
      resolve_device(bad, "--device");
      ADD_FAILURE() << bad << " resolved";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), "--device " + bad + ": expected cpu, cuda or cuda:N");
    }
  }
}

TEST(DeviceTest, CudaResolvesExactlyWhenThisBuildSeesAGpu) {
  if (torch::cuda::is_available()) {
    EXPECT_TRUE(resolve_device("cuda", "train.device").is_cuda());
    EXPECT_EQ(resolve_device("cuda:0", "train.device").index(), 0);
    const auto n = static_cast<int64_t>(torch::cuda::device_count());
    EXPECT_NE(device_unavailable_reason("cuda:" + std::to_string(n)), "");
  } else {
    EXPECT_EQ(device_unavailable_reason("cuda"), "this LibTorch build sees no CUDA device");
    EXPECT_EQ(device_unavailable_reason("cuda:1"), "this LibTorch build sees no CUDA device");
    EXPECT_THROW(resolve_device("cuda", "train.device"), UsageError);
  }
}

// train.device: cuda on a machine without one is a config error, before anything is written.
TEST(DeviceTest, TrainDeviceCudaWithoutAGpuIsAConfigError) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this machine has a GPU";
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "run");
  c.train.device = DeviceKind::kCuda;
  try {
    check_and_resolve(LoadedConfig{c, {}}, true);
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 1u);
    EXPECT_NE(e.problems()[0].find("train.device: cuda: this LibTorch build sees no CUDA device"), std::string::npos)
        << e.problems()[0];
  }
}

}  // namespace
}  // namespace normlab
