#include "core/torch_compat.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace normlab {
namespace {

// A LibTorch error reaches the user as its message's first line, without the source location and
// stack frames LibTorch appends (issue: "bad shapes or RNG state give raw LibTorch errors with
// stack frames").
TEST(ErrorMessage, LibTorchErrorsLoseTheirBacktrace) {
  try {
    torch::zeros({2, 3}).view({7});  // a shape error raised inside LibTorch
    FAIL() << "view should have thrown";
  } catch (const std::exception& e) {
    const std::string raw = e.what(), shown = error_message(e);
    EXPECT_FALSE(shown.empty());
    EXPECT_EQ(shown.find('\n'), std::string::npos) << shown;
    EXPECT_EQ(shown.find("Exception raised from"), std::string::npos) << shown;
    EXPECT_EQ(shown.find("frame #"), std::string::npos) << shown;
    EXPECT_NE(shown.find("shape"), std::string::npos) << shown;
    EXPECT_NE(raw.find(shown), std::string::npos) << "the message itself is kept";
  }
  EXPECT_EQ(error_message(std::runtime_error("plain")), "plain");
}

}  // namespace
}  // namespace normlab
