// A sweep file (configs/sweeps/README.md): a base run config, overrides for every point
// (`set:`), axes whose cartesian product gives the points (`axes:`, plus `zip:` groups whose keys
// vary together), seeds, a `quick:` variant, and optionally a `tune:` block (one numeric key
// searched on a grid for every arm, then each arm confirmed at its own best value). This file
// parses and checks the sweep file and writes it back resolved; its points (expanded, named,
// validated before anything runs) are sweep_points.h, running them is runner.h.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"

namespace normlab {

// One axis: a single key (`axes:` entry) or a zip group (several keys, equal-length lists).
struct SweepAxis {
  std::vector<std::string> keys;                 // {"model.layout"} or {"optim.lr", "optim.warmup"}
  std::vector<std::vector<std::string>> values;  // values[i][k]: i-th value of keys[k], YAML text
  bool zip = false;                              // from `zip:` (kept apart when dumped)
};

// What a tuned comparison ranks runs by: the lowest eval loss of the run, or its last eval.
enum class TuneMetric { kBestVal, kFinalVal };
const char* tune_metric_name(TuneMetric m);  // "best_val", "final_val"
// Which test decides a verdict (src/metrics/stats.h) and how the tests of several arms against
// one baseline are corrected.
enum class TestKind { kWelch, kPaired };
enum class Correction { kHolm, kNone };
const char* test_name(TestKind t);          // "welch", "paired"
const char* correction_name(Correction c);  // "holm", "none"

// The `tune:` block (configs/sweeps/README.md, "Tuned comparisons"). An arm is one point of the
// sweep's axes other than the ladder's; a cell is an arm at one rung of the ladder (without a
// ladder, the arm itself). Every cell at a searched rung runs at every value with every search
// seed, then every cell at its selected value (sweep/tune.h; transferred from a searched rung
// where its own was not searched) with every confirm seed.
struct SweepTune {
  std::string key;                  // "optim.lr": numeric, not an axis, not a zip key, not seed
  std::vector<std::string> values;  // YAML text as written, ascending: {"1e-3", "2e-3", "4e-3"}
  std::vector<double> numbers;      // the same values as numbers
  std::vector<int64_t> seeds;           // search seeds {1337}
  std::vector<int64_t> confirm_seeds;   // {2001, 2002, 2003}, disjoint from seeds
  TuneMetric metric = TuneMetric::kBestVal;
  std::vector<std::pair<std::string, std::string>> baseline;  // axis key -> value text
  // The ladder (configs/sweeps/README.md, "Ladders"): an axis key (a zip key: its whole group)
  // whose values are the rungs; empty: one rung. search_at: the ladder's values (text as the
  // axis writes them) where the search runs; empty: every rung.
  std::string ladder;
  std::vector<std::string> search_at;
  // given: each arm's value chosen elsewhere (another study, another machine), named by the arm's
  // axis values (not the ladder's) like the baseline; every arm has one, each one of `values`.
  // With given, only the rungs search_at lists are searched (none without it): a cell at any
  // other rung runs at its arm's selection at the nearest searched rung before it, else at its
  // given value ("given" in the table; given_index finds it in values).
  struct Given {
    std::vector<std::pair<std::string, std::string>> arm;  // axis key -> value text
    std::string text;                                      // the value as written
  };
  std::vector<Given> given;
  TestKind test = TestKind::kWelch;  // the test that decides a verdict
  double margin = 0;                 // equivalence margin in the metric's unit; 0: no equivalence
  Correction correction = Correction::kHolm;  // over the arms against the baseline, per rung
  // fit: quadratic: the confirm seeds also run at the grid values either side of each cell's v*,
  // and the cell's optimum is the vertex of the parabola fitted to the metric against log2 v
  // there, with a bootstrap interval over the confirm seeds (configs/sweeps/README.md, "Ladders").
  bool fit = false;
  // fit_extend N (with fit): while the lowest confirm mean of a cell's bracket sits at an end of
  // it, the confirm seeds also run at the next grid value beyond that end, at most N values past
  // v* - 1 and N past v* + 1; the fit is then made around the lowest (fit_walk in tune.h). 0: off.
  int fit_extend = 0;
  std::map<std::string, std::string> where;  // "key", "values", ... and "tune" -> "file:line"
};

struct Sweep {
  std::string file;     // the sweep file as given ("configs/sweeps/placement.yaml")
  std::string base;     // absolute path of the base run config
  std::string out_dir;  // the sweep directory ("runs/sweeps/placement")
  std::vector<std::pair<std::string, std::string>> set;  // key -> YAML value text, every point
  std::vector<SweepAxis> axes;  // `axes:` keys in order, then `zip:` groups
  std::vector<int64_t> seeds;  // empty for a tuned sweep (its seeds are the tune block's)
  std::optional<SweepTune> tune;
  // Where each set/axis key and `seeds` was written ("file:12", "--set"), for error messages.
  std::map<std::string, std::string> where;

  // The file's `quick:` variant, checked whether or not it is used (null: the file has none).
  std::shared_ptr<const Sweep> quick;

  std::vector<std::string> axis_keys() const;  // every axis's keys, in axis order
};

// The sweep with its `quick:` section applied (its set merged, its axes, zip, seeds and out_dir
// replacing the file's; a `tune:` under quick replaces the values, seeds or confirm_seeds it names). Throws ConfigError when the file has no quick: section.
Sweep apply_quick(const Sweep& sweep);

struct SweepOptions {
  bool quick = false;             // apply the file's `quick:` section
  std::vector<std::string> sets;  // command-line `--set key=value`, added to `set:` last
  std::string out_dir;            // non-empty: replaces out_dir
  bool check_base = true;         // false: a missing base file is no error (reading results only)
};

// Parses and checks a sweep file; every problem is reported at once (ConfigError, lines
// "file:line: key: message").
Sweep parse_sweep_file(const std::string& path, const SweepOptions& options = {});

// A tuned sweep's ladder: the index of the axis holding tune.ladder (-1: no ladder), its rung
// values as text (one rung, "", without a ladder), and whether rung r is searched.
int ladder_axis(const Sweep& sweep);
std::vector<std::string> ladder_rungs(const Sweep& sweep);
bool rung_searched(const Sweep& sweep, size_t rung);
// The index in tune.values of the given value for the arm whose axis values (the ladder's left
// out) are `arm`; -1 where tune.given names no such arm or its value is not in the grid.
int given_index(const SweepTune& tune, const std::vector<std::pair<std::string, std::string>>& arm);

// The resolved sweep as YAML: quick applied, --set merged, base absolute, seeds explicit (a tuned
// sweep: its tune block, no seeds).
// Parses back to the same Sweep.
std::string dump_sweep(const Sweep& sweep);

}  // namespace normlab
