// The run directory's one writer (train/recorder.h): it holds the directory for its life, decides
// fresh / start-over / resume without writing, and writes config, log, records, forensics and
// checkpoints where the contract puts them.
#include "train/recorder.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/errors.h"
#include "train/step.h"
#include "test_util.h"

namespace normlab {
namespace {
namespace fs = std::filesystem;

TEST(RecorderTest, WritesTheRunDirectoryAndHoldsItForItsLife) {
  testing::TempDir dir;
  const Config c = testing::tiny_config(dir / "run");
  {
    Recorder rec(c, /*resume=*/false);
    EXPECT_FALSE(rec.resuming());
    EXPECT_FALSE(fs::exists(fs::path(c.out_dir) / "config.yaml")) << "nothing is written before start()";
    EXPECT_THROW(Recorder(c, false), UsageError);  // run.lock is held
    rec.start(0);
    rec.record(JsonObject().add("kind", "train").add("step", 0).add("loss", 5.5).str());
    rec.spike_forensics(3, JsonObject().add("step", 3).str());
    Trainable t = make_trainable(c, torch::Device(torch::kCPU));
    TrainState st;
    st.step = 2;
    rec.checkpoint(t.model, t.optimizer.get(), st);
    rec.check_log();
  }
  const fs::path out(c.out_dir);
  EXPECT_TRUE(fs::exists(out / "config.yaml"));
  EXPECT_TRUE(fs::exists(out / "train.log"));
  EXPECT_EQ(read_file((out / "spikes" / "step_00000003.json").string()), "{\"step\":3}\n");
  EXPECT_EQ(read_file((out / "checkpoints" / "LATEST").string()), "step_00000002\n");
  ASSERT_EQ(testing::records(c.out_dir, "train").size(), 1u);

  // A directory with a checkpoint: refused without resume, resumed from LATEST with it, and the
  // records of the steps before the resume step are kept.
  EXPECT_THROW(Recorder(c, false), UsageError);
  Recorder again(c, /*resume=*/true);
  EXPECT_TRUE(again.resuming());
  EXPECT_EQ(fs::path(again.checkpoint_dir()).filename(), "step_00000002");
  again.start(2);
  EXPECT_EQ(testing::records(c.out_dir, "train").size(), 1u);
}

TEST(RecorderTest, AStartWithoutACheckpointIsStartedOver) {
  testing::TempDir dir;
  const Config c = testing::tiny_config(dir / "run");
  {
    Recorder rec(c, false);
    rec.start(0);
    rec.record(JsonObject().add("kind", "train").add("step", 0).add("loss", 5.5).str());
  }
  EXPECT_THROW(Recorder(testing::tiny_config(dir / "none"), /*resume=*/true), UsageError);  // no such run
  Recorder rec(c, /*resume=*/false);  // no checkpoint: nothing to continue, so no refusal
  EXPECT_FALSE(rec.resuming());
  EXPECT_EQ(testing::records(c.out_dir, "train").size(), 1u) << "nothing is removed before start()";
  rec.start(0);
  EXPECT_TRUE(testing::records(c.out_dir, "train").empty());
}

}  // namespace
}  // namespace normlab
