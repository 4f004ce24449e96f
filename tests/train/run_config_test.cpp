// load_run_config hands the data its checks loaded to the trainer, so a run reads its corpus once.
#include "train/run_config.h"
#include "train/run_data.h"

#include <gtest/gtest.h>

#include <fstream>

#include "config/load.h"
#include "test_util.h"

namespace normlab {
namespace {

TEST(RunDataTest, TheChecksKeepTheCorporaTheyLoadedForTheTrainer) {
  testing::TempDir dir;
  const std::string cfg = dir / "c.yaml";
  {
    std::ofstream f(cfg);
    f << "data: {train: " << testing::source_dir() << "/data/toy/train.txt, val: " << testing::source_dir()
      << "/data/toy/val.txt}\n";
  }
  RunData data;
  const Config c = load_run_config(cfg, {"out_dir=" + dir / "run"}, &data);
  const Corpus train = Corpus::load(c.data.train, c.data.format), val = Corpus::load(c.data.val, c.data.format);
  EXPECT_EQ(data.train.size(), train.size());
  EXPECT_EQ(data.val.size(), val.size());
  EXPECT_GT(data.train.size(), 0);
  EXPECT_EQ(data.train.slice(0, 16), train.slice(0, 16));
  EXPECT_FALSE(data.tokenizer);  // none configured
}

}  // namespace
}  // namespace normlab
