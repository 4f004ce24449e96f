#include "metrics/sink.h"

#include <gtest/gtest.h>

#include "core/errors.h"
#include "core/fs.h"
#include "test_util.h"

namespace normlab {
namespace {

TEST(MetricsSinkTest, AWriteOnAFullDiskThrowsInsteadOfBeingLost) {
  MetricsSink sink("/dev/full");
  EXPECT_THROW(sink.write(JsonObject().add("kind", "train").add("step", int64_t{0})), RuntimeFailure);
}

TEST(MetricsSinkTest, ResumeDropsLaterRecordsAndATornLastLine) {
  testing::TempDir dir;
  const std::string path = dir / "metrics.jsonl";
  {
    std::ofstream f(path);
    f << "{\"kind\":\"train\",\"step\":0}\n{\"kind\":\"eval\",\"step\":1}\n{\"kind\":\"train\",\"step\":1}\n"
         "{\"kind\":\"train\",\"st";
  }
  MetricsSink sink(path, /*keep_before=*/1);
  sink.write(JsonObject().add("kind", "train").add("step", int64_t{1}));
  EXPECT_EQ(read_file(path),
            "{\"kind\":\"train\",\"step\":0}\n{\"kind\":\"eval\",\"step\":1}\n{\"kind\":\"train\",\"step\":1}\n");
}

}  // namespace
}  // namespace normlab
