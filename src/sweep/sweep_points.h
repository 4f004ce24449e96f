// A sweep's points (configs/sweeps/README.md, "Point names"): the sweep file's axes expanded into
// named runs, a tuned sweep's cells and confirm points, each point's run directory and overrides,
// and every point's run config validated before anything runs. The sweep file itself (parse,
// quick:, dump) is sweep_config.h.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "sweep/sweep_config.h"

namespace normlab {

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

// The points in order: cartesian product of the axes (the first axis varies slowest), each
// point once per seed (seeds innermost). A tuned sweep's points are its search points: every arm
// at every tuned value (`lr=2e-3`) with every search seed. Throws ConfigError when two points get
// the same name or there would be more than 1000 points (a tuned sweep's confirm points counted).
std::vector<SweepPoint> expand_sweep(const Sweep& sweep);

// A tuned sweep's cells (arm x rung), in axis order: one SweepPoint each with the axis overrides,
// name and group the cell's name ("layout=pre,d_model=64"; empty without axes), rung and stem
// ("layout=pre"), no seed.
std::vector<SweepPoint> tune_arms(const Sweep& sweep);

// A tuned sweep's confirm points: arm i at values[selected[i]] with every confirm seed, marked
// `confirm` before the seed ("layout=pre,lr=2e-3,confirm,seed=2001"); arms with selected[i] < 0
// (no selection) get none.
// With tune.fit quadratic, also at the values either side of v* (those in the grid), after v*'s.
std::vector<SweepPoint> confirm_points(const Sweep& sweep, const std::vector<int>& selected);
// The confirm points of arm i at values[at[i]] only (every confirm seed; none where at[i] < 0),
// whatever tune.fit says: the runs a tune.fit_extend walk reads or asks for.
std::vector<SweepPoint> confirm_points_at(const Sweep& sweep, const std::vector<int>& at);

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

}  // namespace normlab
