#include "core/log.h"

#include <gtest/gtest.h>

#include "core/errors.h"
#include "core/fs.h"
#include "test_util.h"

namespace normlab {
namespace {

TEST(LogFileTest, AFailedWriteIsReportedNotSwallowed) {
  LogFile log("/dev/full");  // spdlog would print "LOG ERROR" and carry on
  EXPECT_NO_THROW(log.check());
  spdlog::warn("a line that cannot be written");
  try {
    log.check();
    FAIL() << "the failed write went unnoticed";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write /dev/full"), std::string::npos) << e.what();
  }
}

TEST(LogFileTest, LinesGoToTheFileOnlyWhileTheObjectLives) {
  testing::TempDir dir;
  const size_t sinks = spdlog::default_logger()->sinks().size();
  {
    LogFile log(dir / "train.log");
    spdlog::warn("inside");
    log.check();
  }
  spdlog::warn("outside");
  EXPECT_EQ(spdlog::default_logger()->sinks().size(), sinks);
  const std::string text = read_file(dir / "train.log");
  EXPECT_NE(text.find("inside\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("outside"), std::string::npos) << text;
}

}  // namespace
}  // namespace normlab
