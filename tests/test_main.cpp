// Test entry point: one LibTorch thread per test process (ctest runs two at once on 2 cores), and
// the tier guard: a test of the unit tier (every suite not named in tests/integration_suites.txt,
// nor Cuda*) fails when it runs a training step or starts a child process, so the unit tier
// promises what it says by construction (tests/README.md, "Tiers").
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

#include "core/log.h"
#include "core/system.h"
#include "core/torch.h"
#include "test_util.h"
#include "train/step.h"

namespace {

std::set<std::string> integration_suites() {
  std::set<std::string> out;
  std::ifstream in(std::string(NORMLAB_SOURCE_DIR) + "/tests/integration_suites.txt");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] != '#') out.insert(line);
  }
  return out;
}

// The suite's own name: "Prefix/Suite" (parameterized) -> "Suite".
std::string suite_name(const ::testing::TestInfo& t) {
  const std::string s = t.test_suite_name();
  return s.substr(s.find('/') == std::string::npos ? 0 : s.find('/') + 1);
}

class TierGuard : public ::testing::EmptyTestEventListener {
 public:
  void OnTestStart(const ::testing::TestInfo&) override { counts_ = now(); }
  void OnTestEnd(const ::testing::TestInfo& t) override {
    const std::string suite = suite_name(t);
    if (suite.rfind("Cuda", 0) == 0 || integration_.count(suite)) return;
    const Counts after = now();
    if (after.passes != counts_.passes || after.children != counts_.children) {
      ADD_FAILURE() << suite << "." << t.name() << " is in the unit tier but ran " << after.passes - counts_.passes
                    << " training step(s) and started " << after.children - counts_.children
                    << " child process(es); name its suite in tests/integration_suites.txt";
    }
  }

 private:
  struct Counts {
    int64_t passes = 0, children = 0;
  };
  static Counts now() {
    return {normlab::TrainStep::count(), normlab::children_spawned() + normlab::testing::commands_run().load()};
  }
  std::set<std::string> integration_ = integration_suites();
  Counts counts_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::UnitTest::GetInstance()->listeners().Append(new TierGuard);
  torch::set_num_threads(1);
  normlab::setup_logging();
  spdlog::set_level(spdlog::level::warn);
  return RUN_ALL_TESTS();
}
