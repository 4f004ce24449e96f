// `normlab coordcheck` (src/train/README.md, "Coordinate check"): does each module's activation
// scale stay put as the model grows? For each width (d_model, d_ff scaled with it, n_heads as
// configured) or depth (n_layers), and each seed, `steps` updates on one fixed batch (the seed's
// first training batch) at the config's optimizer and peak learning rate held constant; at each
// t = 1..steps (t: the forward after t - 1 updates) the model's coordinate statistics (mean |x|,
// TransformerImpl::set_coord_capture). Per module and t, the least-squares slope of log2(mean |x|,
// averaged over seeds) against log2(size); a per-block module's slope is the largest |slope| over
// its blocks (over depth: the middle and the last block, at the same relative depth in every model),
// with the 95 % interval of that slope over seeds (each seed's own slope, Student t).
// Flat (slope near 0) is what a parametrization that transfers over that size looks like.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace normlab {

enum class CoordAxis { kWidth, kDepth };

struct CoordCheckOptions {
  std::string config_path;
  std::vector<std::string> overrides;  // --set k=v, applied before the check's own keys
  std::vector<int64_t> widths, depths;  // one check per axis given (at least one)
  int64_t steps = 10, seeds = 3;
  // Over width: 0 keeps n_heads as configured (the head size grows with the width); N > 0 sets
  // n_heads = width / N at every width (the head size held at N: a wider model has more heads).
  int64_t head_dim = 0;
  bool compare = false;  // also the same check under param.type sp (first), beside the config's mode
};

// One module kind's numbers in one check.
struct CoordModule {
  std::string name;  // embed, attn_out, ffn_out, attn_logits, stream, head_in, logits
  bool per_block = false;
  // [t - 1][size index][block]: mean |x| averaged over seeds (NaN where a seed's run diverged or stopped).
  std::vector<std::vector<std::vector<double>>> values;
  // [t - 1][size index][seed][block]: each seed's own mean |x| (empty in a coord.json written before
  // the seeds were kept: its intervals are then NaN).
  std::vector<std::vector<std::vector<std::vector<double>>>> seed_values;
  // [t - 1]: the slope (largest |slope| over the tracked blocks), its block (-1 outside blocks;
  // over depth, the block's place: 1 middle, 2 last) and the line the plot draws: that block's
  // values against size.
  std::vector<double> slope;
  std::vector<int64_t> track;
  std::vector<std::vector<double>> curve;  // [t - 1][size index]
  // [t - 1]: the tracked block's slope fitted on each seed's own values, and the 95 % interval of
  // the slope over seeds (Student t on those per-seed slopes; NaN with one seed or a NaN among them).
  std::vector<std::vector<double>> seed_slopes;
  std::vector<double> slope_lo, slope_hi;
};

// The |slope| an interval establishes: its bound nearest 0, or 0 when it holds 0 (NaN when either
// bound is NaN).
double established_slope(double lo, double hi);

struct CoordCheck {
  CoordAxis axis = CoordAxis::kWidth;
  std::string param;      // sp, mup, completep
  std::string optimizer;  // optim.type
  double lr = 0;          // the constant learning rate
  std::vector<int64_t> sizes;
  int64_t steps = 0, seeds = 0;
  int64_t head_dim = 0;  // CoordCheckOptions::head_dim of a width check (0: n_heads as configured)
  std::vector<CoordModule> modules;
  // The largest |slope| over modules at t >= 2 (NaN when any is NaN), its module and t.
  double worst_after_first = 0;
  std::string worst_module;
  int64_t worst_t = 0;
  // The largest |slope| the seeds establish at t >= 2 (established_slope of each module's interval;
  // NaN when any interval is NaN, as without the seeds), its module, t and interval: a miss of a
  // target |slope| <= x is beyond seed noise when this is above x, read per interval (each is 95 %
  // on its own, not corrected over the modules and t of a check, and only the block the seed
  // mean's slope picks gets one).
  double established_after_first = 0;
  std::string established_module;
  int64_t established_t = 0;
  double established_lo = 0, established_hi = 0;
};

// The statistics' names in the order they are reported.
const std::vector<std::string>& coord_module_names();

// Runs the checks: per axis given, under param.type sp first with `compare`, then the config's
// mode. Sizes a config cannot take (a width n_heads does not divide) are one ConfigError naming
// the size.
std::vector<CoordCheck> run_coordcheck(const CoordCheckOptions& o);

// Fills a check's slopes, tracks, curves and worst slope from its values.
void fit_coord_slopes(CoordCheck& c);

// The checks of a coord.json, their slopes fitted anew from its values (`normlab coordcheck
// --from`: a shipped check's numbers recompute from what it measured). UsageError naming the file
// when it is not one.
std::vector<CoordCheck> read_coord_json(const std::string& path);

// coord.json (src/train/README.md, "Coordinate check") and the printed table of one check.
std::string coord_json(const std::vector<CoordCheck>& checks);
std::string coord_table(const CoordCheck& c);
std::string axis_name(CoordAxis a);  // "width" / "depth"

}  // namespace normlab
