// The attention benchmark times every candidate that can run here against the fp32 kernel and
// marks the dispatch's choice; the CLI prints its table. Timings themselves are not tested.
#include "bench/attention_bench.h"

#include <gtest/gtest.h>

#include <set>

#include "core/errors.h"
#include "core/torch_compat.h"
#include "model/attention_kernels.h"
#include "test_util.h"

namespace normlab {
namespace {

TEST(AttentionBenchTest, TimesEveryCandidateThatRunsHereAndMarksTheDispatchChoice) {
  AttentionBenchOptions o;
  o.shapes = {"2x20x2x16", "1x9x1x24"};
  o.warmup = 0;
  o.repeats = 2;
  o.threads = 1;
  auto entries = run_attention_bench(o);
  std::set<std::string> at16, at24;
  int chosen16 = 0;
  for (const auto& e : entries) {
    EXPECT_GT(e.median_ms, 0) << e.name;
    if (e.name == kFp32AttentionKernel) {
      EXPECT_DOUBLE_EQ(e.ratio, 1.0);
    }
    (e.shape.dh == 16 ? at16 : at24).insert(e.name);
    if (e.shape.dh == 16 && e.chosen) {
      ++chosen16;
      // dh 16: a kernel of NormLab's, the bf16 one where the CPU has AVX512-BF16
      EXPECT_EQ(e.name, attention_kernels::bf16_kernel_available() ? "bf16 kernel" : "bf16 via fp32 kernel");
    }
  }
  EXPECT_EQ(chosen16, 1);
  EXPECT_TRUE(at16.count(kFp32AttentionKernel) && at16.count("bf16 via fp32 kernel"));
  EXPECT_EQ(at16.count("bf16 kernel"), attention_kernels::bf16_kernel_available() ? 1u : 0u);
  EXPECT_EQ(at16.count("bf16 SDPA"), have_sdpa() ? 1u : 0u);
  EXPECT_EQ(at24.count("bf16 kernel"), 0u) << "dh 24 is not a multiple of 16";
  const std::string table = format_attention_bench(entries);
  EXPECT_NE(table.find("| 2x20x2x16 |"), std::string::npos) << table;
  EXPECT_NE(table.find("| 1x9x1x24 |"), std::string::npos) << table;
  EXPECT_NE(table.find(" *"), std::string::npos) << table;
}

TEST(AttentionBenchTest, BadShapesAndCountsAreUsageErrors) {
  for (std::string bad : {"2x20x2", "2x20x2x0", "2x20x2x16x1", "ax20x2x16", "2x20x2x12"}) {
    AttentionBenchOptions o;
    o.shapes = {bad};
    EXPECT_THROW(run_attention_bench(o), UsageError) << bad;
  }
  AttentionBenchOptions o;
  o.shapes = {"1x4x1x8"};
  o.repeats = 0;
  EXPECT_THROW(run_attention_bench(o), UsageError);
  const auto s = parse_attention_shape("2x1024x12x64", "x");
  EXPECT_EQ(s.B, 2);
  EXPECT_EQ(s.T, 1024);
  EXPECT_EQ(s.H, 12);
  EXPECT_EQ(s.dh, 64);
}

TEST(AttentionBenchTest, CliPrintsTheTableOnStdout) {
  const std::string bin = testing::normlab_binary();
  auto r = testing::run_command(bin + " bench attention --shapes 1x12x2x16 --warmup 0 --repeats 1 --threads 1");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out.rfind("Causal attention, forward + backward", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("| 1x12x2x16 |"), std::string::npos) << r.out;
  EXPECT_EQ(testing::run_command(bin + " bench attention --shapes 1x12x2").status, 2);
}

}  // namespace
}  // namespace normlab
