// Every layout x norm combination trains: 30 steps of a tiny config, finite losses throughout
// (nGPT, which has no norms, once).
#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

#include <fstream>

#include "model/layouts/layout.h"
#include "model/norms/norm.h"
#include "train/run_config.h"
#include "train/trainer.h"
#include "test_util.h"

namespace normlab {
namespace {

class LayoutGridTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LayoutGridTest, EveryNormTrainsThirtyStepsWithoutNaN) {
  for (const auto& norm : norm_registry()) {
    testing::TempDir dir;
    Config c = testing::tiny_config(dir / "run");
    c.model.norm.type = norm.name;
    c = fit_to_layout(*find_layout(GetParam()), c);
    // A layout with no use for the norm type (nGPT has no norms) puts the default back: it trains
    // once, in the default's turn.
    if (c.model.norm.type != norm.name) continue;
    c.model.n_layers = 4;  // mix: one post block
    c.train.steps = 30;
    c.train.log_every = 1;
    c.eval.every = 0;
    c.train.checkpoint_every = 1000;
    ASSERT_EQ(train(check_and_resolve(LoadedConfig{c, {}}, true), {}), 0) << norm.name;
    std::ifstream in(c.out_dir + "/metrics.jsonl");
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      YAML::Node r = YAML::Load(line);
      const double v = r[r["kind"].as<std::string>() == "train" ? "loss" : "val_loss"].as<double>();
      EXPECT_TRUE(std::isfinite(v)) << GetParam() << "/" << norm.name << ": " << line;
      n += r["kind"].as<std::string>() == "train";
    }
    EXPECT_EQ(n, 30) << GetParam() << "/" << norm.name;
  }
}

std::vector<std::string> layouts() {
  std::vector<std::string> out;
  for (const auto& l : layout_registry()) out.push_back(l.name);
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllLayouts, LayoutGridTest, ::testing::ValuesIn(layouts()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace normlab
