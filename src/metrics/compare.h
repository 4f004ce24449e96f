// `normlab compare` (src/metrics/README.md, "Comparing runs"): where two runs first differ and by
// how much, and, for runs grouped by a config key with seeds as samples, whether the difference of
// their best validation losses is significant (Welch's t-test). Reads runs through records.h and
// derives nothing of its own beyond the differences and the statistics defined here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "metrics/stats.h"

namespace normlab {

// The largest |a - b| of one quantity over the records two runs share.
struct SeriesDiff {
  std::string name;          // "loss", "val_loss" or a per-layer series ("layers.grad_norm")
  int64_t compared = 0;      // values compared
  double max_abs_diff = 0;   // NaN when a value is finite in one run and not in the other
  int64_t step = -1;         // where the largest difference is (-1: no difference)
  int64_t index = -1;        // the layer position, for a per-layer series
  double a = 0, b = 0;       // the two values there
};

struct PairComparison {
  std::string a, b;                           // run directories; a is the reference
  int64_t common_steps = 0;                   // train records at the same step in both
  std::optional<int64_t> first_divergent_step;  // first common step whose loss differs in any bit
  bool identical = true;                      // every compared value equal bit for bit
  SeriesDiff loss, val_loss;
  std::vector<SeriesDiff> layers;
};

// One value of the --by key: its runs' best validation losses as samples.
struct GroupStats {
  std::string value;
  std::vector<std::string> runs;
  std::vector<double> samples;  // finite best_val_loss values (diverged runs left out, counted)
  std::vector<int64_t> seeds;   // every run's seed (config.yaml), in runs' order
  std::vector<double> values;   // every run's best_val_loss (NaN where none), in runs' order
  int64_t without_value = 0;    // runs with no finite best_val_loss
  double mean = 0, std = 0;     // std: sample standard deviation (n - 1)
  std::optional<double> ci_low, ci_high;  // 95 %: mean -+ t(0.975, n-1) std / sqrt(n), n >= 2
};

struct GroupTest {
  std::string a, b;  // group values
  double diff = 0;   // mean(a) - mean(b)
  std::optional<double> t, df, p;  // Welch's t-test, two-sided; absent with fewer than 2 samples a side
  // Where the two groups ran the same seeds (each seed once a side): the paired t test over the
  // seeds both have a value for (metrics/stats.h), which then decides.
  std::optional<TTest> paired;
  // The deciding test's p (paired where there is one, else Welch's) Holm-adjusted over every test
  // of the comparison; absent where that p is.
  std::optional<double> p_adj;
};

struct Comparison {
  std::vector<std::string> runs;
  std::vector<PairComparison> pairs;  // each run against the first (without --by)
  std::string by;
  std::vector<GroupStats> groups;
  std::vector<GroupTest> tests;  // every pair of groups, in the groups' order
};

// Runs from the arguments (a run directory, or a sweep directory: its runs/*/ in sorted order),
// compared pairwise, or grouped by the dotted config key `by` read from each run's config.yaml.
// UsageError for an argument that is neither, fewer than two runs, or a run without the key.
Comparison compare_runs(const std::vector<std::string>& args, const std::string& by);
std::string comparison_text(const Comparison& c);
std::string comparison_json(const Comparison& c);

// Welch's test as `normlab compare --by` prints it (t, df, p), exposed for tests.
struct WelchResult {
  double t = 0, df = 0, p = 1;
};
// Samples of at least 2 values each. Equal means with zero variance: t 0, p 1; different means
// with zero variance: t +-inf, p 0.
WelchResult welch_t_test(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace normlab
