// Test entry point: one LibTorch thread per test process (ctest runs two at once on 2 cores).
#include <gtest/gtest.h>

#include "core/log.h"
#include "core/torch.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  torch::set_num_threads(1);
  normlab::setup_logging();
  spdlog::set_level(spdlog::level::warn);
  return RUN_ALL_TESTS();
}
