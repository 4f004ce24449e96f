// The norm benchmark runs every registered norm against the native baseline and reports it; the
// CLI prints its tables on stdout. Timings themselves are not tested (machines differ).
#include "bench/norm_bench.h"

#include <gtest/gtest.h>

#include "core/errors.h"
#include "model/norms/norm.h"
#include "test_util.h"

namespace normlab {
namespace {

TEST(NormBenchTest, MeasuresEveryRegisteredNormAgainstNativeLayerNorm) {
  NormBenchOptions o;
  o.rows = {8};
  o.widths = {37, 64};
  o.warmup = 0;
  o.repeats = 2;
  auto entries = run_norm_bench(o);
  const std::string table = format_norm_bench(entries);
  for (int64_t w : o.widths) {
    std::set<std::string> seen;
    for (const auto& e : entries) {
      if (e.width != w) continue;
      seen.insert(e.name);
      EXPECT_GT(e.median_ms, 0) << e.name;
      if (e.name == kNativeLayerNorm) {
        EXPECT_DOUBLE_EQ(e.ratio, 1.0);
      }
      const bool has_fast_path =
          e.name == "rmsnorm" || e.name == "rmsnorm_1p" || e.name == "layernorm";
      EXPECT_EQ(e.fast_path, has_fast_path) << e.name;
    }
    EXPECT_TRUE(seen.count(kNativeLayerNorm));
    for (const auto& t : norm_registry())
      EXPECT_TRUE(seen.count(t.name)) << t.name << " width " << w;
  }
  for (const auto& t : norm_registry())
    EXPECT_NE(table.find("| " + t.name), std::string::npos) << table;
  EXPECT_NE(table.find("| 8 | 37 |"), std::string::npos) << table;
  o.repeats = 0;
  EXPECT_THROW(run_norm_bench(o), UsageError);
}

TEST(NormBenchTest, CliPrintsTheTablesOnStdoutAndRejectsAMissingMode) {
  const std::string bin = testing::normlab_binary();
  auto r = testing::run_command(
      bin + " bench norms --rows 16 --widths 24,40 --warmup 0 --repeats 1 --threads 1");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out.rfind("Forward+backward time relative to", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("| 16 | 40 |"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("| 4096 |"), std::string::npos) << "--rows replaces the default list";
  EXPECT_EQ(testing::run_command(bin + " bench").status, 2);
  EXPECT_EQ(testing::run_command(bin + " bench norms --repeats 0").status, 2);
}

}  // namespace
}  // namespace normlab
