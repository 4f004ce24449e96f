// The run directory's one writer (train/recorder.h): it holds the directory for its life, decides
// fresh / start-over / resume without writing, and writes config, log, records, forensics and
// checkpoints where the contract puts them.
#include "train/recorder.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/errors.h"
#include "core/fs.h"
#include "core/system.h"
#include "core/torch_compat.h"
#include "metrics/records.h"
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
    rec.start(0, torch::Device(torch::kCPU));
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
  // Where it ran: one start, this machine, the build's commit.
  const std::vector<MachineRecord> m = read_machines(c.out_dir);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].step, 0);
  EXPECT_EQ(m[0].host, host_name());
  EXPECT_EQ(m[0].cpu, cpu_description());
  EXPECT_NE(m[0].cpu, "");
  EXPECT_EQ(m[0].device, "cpu");
  EXPECT_EQ(m[0].torch, torch_build_description());
  EXPECT_EQ(m[0].commit, normlab_commit());
  EXPECT_EQ(m[0].kind(), cpu_description() + " | cpu");
  EXPECT_EQ(read_file((out / "spikes" / "step_00000003.json").string()), "{\"step\":3}\n");
  EXPECT_EQ(read_file((out / "checkpoints" / "LATEST").string()), "step_00000002\n");
  ASSERT_EQ(testing::records(c.out_dir, "train").size(), 1u);

  // A directory with a checkpoint: refused without resume, resumed from LATEST with it, and the
  // records of the steps before the resume step are kept.
  EXPECT_THROW(Recorder(c, false), UsageError);
  Recorder again(c, /*resume=*/true);
  EXPECT_TRUE(again.resuming());
  EXPECT_EQ(fs::path(again.checkpoint_dir()).filename(), "step_00000002");
  again.start(2, torch::Device(torch::kCPU));
  EXPECT_EQ(testing::records(c.out_dir, "train").size(), 1u);
  // The resume appends its start.
  const std::vector<MachineRecord> both = read_machines(c.out_dir);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[0].step, 0);
  EXPECT_EQ(both[1].step, 2);
}

TEST(RecorderTest, AStartWithoutACheckpointIsStartedOver) {
  testing::TempDir dir;
  const Config c = testing::tiny_config(dir / "run");
  {
    Recorder rec(c, false);
    rec.start(0, torch::Device(torch::kCPU));
    rec.record(JsonObject().add("kind", "train").add("step", 0).add("loss", 5.5).str());
  }
  EXPECT_THROW(Recorder(testing::tiny_config(dir / "none"), /*resume=*/true), UsageError);  // no such run
  Recorder rec(c, /*resume=*/false);  // no checkpoint: nothing to continue, so no refusal
  EXPECT_FALSE(rec.resuming());
  EXPECT_EQ(testing::records(c.out_dir, "train").size(), 1u) << "nothing is removed before start()";
  rec.start(0, torch::Device(torch::kCPU));
  EXPECT_TRUE(testing::records(c.out_dir, "train").empty());
  EXPECT_EQ(read_machines(c.out_dir).size(), 1u);  // a start-over begins the list anew
}

// A machine's kind leaves out what may differ between runs of one kind: host, GPU index, commit.
TEST(MachineRecordTest, KindIsTheCpuModelAndTheDevicesModel) {
  MachineRecord a{0, "host-a", "Intel(R) Xeon(R) Platinum 8481C", "cuda:0 (NVIDIA H100 80GB HBM3)", "2.11.0", "abc"};
  MachineRecord b = a;
  b.host = "host-b";
  b.device = "cuda:3 (NVIDIA H100 80GB HBM3)";
  b.commit = "def+dirty";
  EXPECT_EQ(a.kind(), "Intel(R) Xeon(R) Platinum 8481C | NVIDIA H100 80GB HBM3");
  EXPECT_EQ(a.kind(), b.kind());
  b.device = "cuda:0 (NVIDIA H200)";
  EXPECT_NE(a.kind(), b.kind());
  b.device = "cpu";
  EXPECT_EQ(b.kind(), "Intel(R) Xeon(R) Platinum 8481C | cpu");
  // Written and read back; a torn or foreign file reads as no machine.
  testing::TempDir dir;
  write_file_atomic(dir / "machine.json", machine_json({a, b}));
  const auto back = read_machines(dir.path());
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].device, "cpu");
  EXPECT_EQ(back[0].commit, "abc");
  write_file_atomic(dir / "machine.json", "[{\"step\": 0, \"host\"");
  EXPECT_TRUE(read_machines(dir.path()).empty());
}

}  // namespace
}  // namespace normlab
