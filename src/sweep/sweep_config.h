// A sweep file (configs/sweeps/README.md): a base run config, overrides for every point
// (`set:`), axes whose cartesian product gives the points (`axes:`, plus `zip:` groups whose keys
// vary together), seeds, a `quick:` variant, and optionally a `tune:` block (one numeric key
// searched on a grid for every arm, then each arm confirmed at its own best value). This file
// parses and checks the sweep file, expands it into named points and validates every point's run
// config before anything runs. It refuses to run anything itself: that is runner.h.
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
  TestKind test = TestKind::kWelch;  // the test that decides a verdict
  double margin = 0;                 // equivalence margin in the metric's unit; 0: no equivalence
  Correction correction = Correction::kHolm;  // over the arms against the baseline, per rung
  // fit: quadratic: the confirm seeds also run at the grid values either side of each cell's v*,
  // and the cell's optimum is the vertex of the parabola fitted to the metric against log2 v
  // there, with a bootstrap interval over the confirm seeds (configs/sweeps/README.md, "Ladders").
  bool fit = false;
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

// A point of a plain sweep, or of a tuned sweep's search or confirm phase.
enum class PointPhase { kPlain, kSearch, kConfirm };
const char* phase_name(PointPhase p);  // "run", "search", "confirm"

// One run of the sweep.
struct SweepPoint {
  std::string name;   // "layout=pre,norm.type=rmsnorm,seed=1337"
  std::string group;  // the name without the seed: the seeds of one group are aggregated
  // axis key -> YAML value text; a tuned sweep's points end with the tuned key and its value
  std::vector<std::pair<std::string, std::string>> overrides;
  int64_t seed = 0;
  PointPhase phase = PointPhase::kPlain;
  size_t arm = 0;  // tuned sweeps: the index of the cell (tune_arms' order)
  size_t rung = 0;  // tuned sweeps: the index of the cell's ladder value (0 without a ladder)
  std::string stem;  // tuned sweeps: the name without the ladder's parts (the arm across rungs)
};

// Parses and checks a sweep file; every problem is reported at once (ConfigError, lines
// "file:line: key: message").
Sweep parse_sweep_file(const std::string& path, const SweepOptions& options = {});

// The points in order: cartesian product of the axes (the first axis varies slowest), each
// point once per seed (seeds innermost). A tuned sweep's points are its search points: every arm
// at every tuned value (`lr=2e-3`) with every search seed. Throws ConfigError when two points get
// the same name or there would be more than 1000 points (a tuned sweep's confirm points counted).
std::vector<SweepPoint> expand_sweep(const Sweep& sweep);

// A tuned sweep's cells (arm x rung), in axis order: one SweepPoint each with the axis overrides,
// name and group the cell's name ("layout=pre,d_model=64"; empty without axes), rung and stem
// ("layout=pre"), no seed.
std::vector<SweepPoint> tune_arms(const Sweep& sweep);

// A tuned sweep's ladder: the index of the axis holding tune.ladder (-1: no ladder), its rung
// values as text (one rung, "", without a ladder), and whether rung r is searched.
int ladder_axis(const Sweep& sweep);
std::vector<std::string> ladder_rungs(const Sweep& sweep);
bool rung_searched(const Sweep& sweep, size_t rung);

// A tuned sweep's confirm points: arm i at values[selected[i]] with every confirm seed, marked
// `confirm` before the seed ("layout=pre,lr=2e-3,confirm,seed=2001"); arms with selected[i] < 0
// (no selection) get none.
// With tune.fit quadratic, also at the values either side of v* (those in the grid), after v*'s.
std::vector<SweepPoint> confirm_points(const Sweep& sweep, const std::vector<int>& selected);

// Every key a point name carries: the axis keys, then a tuned sweep's key.
std::vector<std::string> name_keys(const Sweep& sweep);

// Short name of each axis key: the key without its first section, or the full key when that
// would collide with another key's short name (or with `seed`) or the key has one section.
std::map<std::string, std::string> short_names(const std::vector<std::string>& keys);

// A value as it appears in a point name: characters outside [A-Za-z0-9._+-] become '_'.
std::string sanitize_value(const std::string& text);

// The point's run directory: <out_dir>/runs/<name>.
std::string point_run_dir(const std::string& sweep_dir, const SweepPoint& point);

// The `--set` overrides that make a point's run config from the base (set, axes, tuned value, seed).
std::vector<std::string> point_overrides(const Sweep& sweep, const SweepPoint& point);

// Builds and validates every point's run config (parse, overrides, check_and_resolve with data
// files) with out_dir = its run directory. All problems of all points at once (ConfigError),
// each naming the sweep file and line of the key that caused it.
std::vector<Config> validate_points(const Sweep& sweep, const std::vector<SweepPoint>& points);

// The resolved sweep as YAML: quick applied, --set merged, base absolute, seeds explicit (a tuned
// sweep: its tune block, no seeds).
// Parses back to the same Sweep.
std::string dump_sweep(const Sweep& sweep);

}  // namespace normlab
