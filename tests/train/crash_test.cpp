// Crash consistency of the run directory: a training run is SIGKILLed at every point of every
// multi-step write it makes (core/crash_point.h), and after each kill LATEST, where present,
// names a complete checkpoint, and the run restarts or resumes to the same final weights as a
// run that was never killed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "config/load.h"
#include "core/fs.h"
#include "train/checkpoint.h"
#include "train/run_config.h"
#include "test_util.h"

namespace normlab {
namespace {
namespace fs = std::filesystem;

Config crash_config(const std::string& out) {
  Config c = testing::tiny_config(out);
  c.model.n_layers = 1;
  c.model.d_model = 16;
  c.model.d_ff = 32;
  c.train.steps = 4;
  c.train.checkpoint_every = 2;
  c.eval.every = 0;
  c.eval.max_windows = 2;
  return check_and_resolve(LoadedConfig{c, {}}, true);
}

int train_process(const std::string& cfg, const std::string& extra, const std::string& crash_at,
                  const std::string& err) {
  const std::string env = crash_at.empty() ? "" : "NORMLAB_CRASH_AT=" + crash_at + " ";
  // The shell reports a SIGKILLed child as 128 + 9.
  return testing::run_command(env + testing::normlab_binary() + " train -c " + cfg + extra, err).status;
}

TEST(CrashTest, EveryKillLeavesARunThatResumesOrRestartsToTheSameWeights) {
  testing::TempDir dir;
  const Config ref_cfg = crash_config(dir / "ref");
  std::ofstream(dir / "ref.yaml") << dump_config(ref_cfg);
  ASSERT_EQ(train_process(dir / "ref.yaml", "", "", dir / "err"), 0) << read_file(dir / "err");
  const NamedTensors want = testing::final_weights(dir / "ref", ref_cfg);

  // 2 checkpoints (steps 2 and 4) of 4 atomic files each (model, trainer, state.json, LATEST),
  // and config.yaml first.
  const std::vector<std::pair<std::string, int>> points = {
      {"checkpoint.before_swap", 2}, {"checkpoint.before_latest", 2}, {"atomic_write.before_rename", 9}};
  int kills = 0;
  for (const auto& [point, arrivals] : points) {
    for (int k = 1; k <= arrivals; ++k) {
      const std::string at = fmt::format("{}:{}", point, k), run = dir / fmt::format("run_{}", kills);
      const Config c = crash_config(run);
      const std::string cfg = dir / "cfg.yaml";
      std::ofstream(cfg) << dump_config(c);
      ASSERT_EQ(train_process(cfg, "", at, dir / "err"), 137) << at << " was not reached: " << read_file(dir / "err");
      ++kills;
      // LATEST, where present, names a complete checkpoint; nothing else is required of a kill.
      const bool has_latest = file_exists(run + "/checkpoints/LATEST");
      if (has_latest) {
        const std::string ck = find_checkpoint(run, std::nullopt);
        for (const char* f : {"model.safetensors", "trainer.safetensors", "state.json"}) {
          EXPECT_TRUE(file_exists(ck + "/" + f)) << at << ": " << ck << "/" << f;
        }
        EXPECT_NO_THROW(testing::final_weights(run, c)) << at;
      }
      // What a user does next: --resume when there is a checkpoint, else start again.
      const int status = train_process(cfg, has_latest ? " --resume" : "", "", dir / "err");
      ASSERT_EQ(status, 0) << at << ": " << read_file(dir / "err");
      const NamedTensors got = testing::final_weights(run, c);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(torch::equal(got[i].second, want[i].second)) << at << ": " << got[i].first;
      }
      EXPECT_EQ(testing::records(run, "train").size(), 4u) << at;
      for (const auto& e : fs::recursive_directory_iterator(run)) {
        EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << at << ": " << e.path();
      }
      fs::remove_all(run);
    }
  }
  EXPECT_EQ(kills, 13);
}

}  // namespace
}  // namespace normlab
