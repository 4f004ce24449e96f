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
#include <functional>
#include <string>
#include <vector>

namespace normlab {

struct Config;

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
  // Empty: the config's optim.lr. Else one check per rate (increasing), each at that lr held (and
  // an optimizer's own matrix rate, optim.muon.lr, scaled by the same factor); three or more rates
  // give the first update's split by order (split_first_update).
  std::vector<double> lrs;
};

// One module kind's numbers in one check.
struct CoordModule {
  std::string name;  // embed, attn_out, ffn_out, attn_logits, attn_logits_causal, stream, head_in, logits
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
  // sha256 of the first size's resolved config (dump_config) with every learning rate set to 0
  // and the seed to its base: checks alike in it differ only in their rates. Empty in a coord.json
  // written before it was kept.
  std::string fingerprint;
  // Sizes planned (>= sizes.size()): more than sizes.size() in a check stopped part-way, whose
  // coord.json kept the sizes it finished (run_coordcheck's progress); 0 in a coord.json written
  // before it was kept (read as sizes.size()).
  int64_t planned_sizes = 0;
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

// The first update, order by order in the learning rate (src/train/README.md, "The first update,
// order by order"). AdamW's first step is lr times a direction that does not depend on lr (the
// bias-corrected m / sqrt(v) of one gradient is g / (|g| + eps); decay adds lr lambda W0), and so
// are Muon's and NorMuon's: at a fixed init, every weight after one update is W0 + lr U, and a
// module's mean |x| at t = 2 is a function of lr alone. From checks that differ only in lr (three
// rates or more) each size's value is fitted as
//     v(lr)^2 = v1^2 + (a lr)^2 + (b lr^2)^2,
// v1 the value at t = 1 (the init's forward, the same at every rate): the first order a lr (terms
// with one updated weight: what µP sets to stay put over width) and the second b lr^2 (products of
// two updated weights' terms), added as independent terms add. Least squares on the relative error
// of v^2 with a, b >= 0.
struct RateSplitRow {
  std::string module;
  int64_t track = -1;  // the block (width), 1 middle / 2 last (depth), -1 outside blocks
  // [size index]: the two terms at the group's largest rate (a lr_max, b lr_max^2), fitted on the
  // seed means; NaN where a value is NaN or a term fits to 0 there.
  std::vector<double> first, second;
  // Their slopes against log2(size), and the 95 % percentile intervals of those slopes over 2000
  // bootstrap resamples of the seeds (the same draw at every size and rate: a seed shares its init
  // across the rates; each resample's means fitted as the seed means are; a fixed generator, so
  // the same checks give the same intervals; NaN with one seed, without per-seed values, or when
  // an order fits to 0 at some size in some resample).
  double first_slope = 0, second_slope = 0;
  double first_lo = 0, first_hi = 0, second_lo = 0, second_hi = 0;
  // The largest |ln(fitted / measured)| over sizes and rates (the seed means): how well two orders
  // describe the module.
  double max_log_residual = 0;
};

struct RateSplit {
  CoordAxis axis = CoordAxis::kWidth;
  std::string param, optimizer;
  std::vector<int64_t> sizes;
  int64_t seeds = 0;
  std::vector<double> lrs;  // increasing
  std::vector<RateSplitRow> rows;
};

// The --set keys of one rate of --lrs: optim.lr = lr and, for an optimizer with its own matrix
// rate (muon, normuon: optim.muon.lr), that rate times lr / base's optim.lr, so that the rate is
// one multiplier of every update.
std::vector<std::string> coord_rate_overrides(const Config& base, double lr);

// One fit at one size: the two terms at the largest rate (a lr_max, b lr_max^2), from the
// a^2, b^2 >= 0 of least squares on (model^2 - v^2) / v^2 over the rates; v1 the t = 1 value.
// {NaN, NaN} when any value is not finite or not positive.
std::pair<double, double> fit_rate_orders(const std::vector<double>& lrs, const std::vector<double>& v, double v1);

// A check's `fingerprint`: sha256 of its config with the seed set to `seed`, as `key=value` lines
// over the keys whose value differs from the default config's; left out: the rates (optim.lr and
// Muon's optim.muon.lr), out_dir and train.threads; the data files as folder/name. A key a later
// build adds at a fixed default changes no fingerprint (one it resolves from `auto` can); a default
// a later build changes is not seen (two checks that ran under the old and the new default agree).
std::string coord_config_fingerprint(Config c, int64_t seed);

// The splits of a set of checks: one per group of width or depth checks alike in everything but
// the rate (axis, param, optimizer, sizes, seeds, head size and the config's fingerprint; at least
// two updates, a rate > 0) holding three rates or more, in the order the groups first appear. A
// repeated rate keeps its first check; a group whose checks differ at t = 1 (not one init: a
// coord.json from before the fingerprint, mixed) is not split. Each is said in a warning.
std::vector<RateSplit> split_first_update(const std::vector<CoordCheck>& checks);
std::string rate_split_json(const RateSplit& s);  // one JSON object
std::string rate_split_table(const RateSplit& s);

// The statistics' names in the order they are reported.
const std::vector<std::string>& coord_module_names();

// Called once with no checks when every size's config has been checked and before any runs, then
// as a check finishes each size from its second on, with every check so far: those done and the
// running one cut to its finished sizes, fitted on them (planned_sizes says how many it will
// have). `normlab coordcheck` removes an earlier coord.json at the first call and writes its own
// at each later one, so that a check stopped part-way (a lease's deadline, Ctrl-C) keeps every size
// it finished, and a bad size leaves the earlier file alone.
using CoordProgress = std::function<void(const std::vector<CoordCheck>&)>;

// Runs the checks: per axis given, under param.type sp first with `compare`, then the config's
// mode. Sizes a config cannot take (a width n_heads does not divide) are one ConfigError naming
// the size.
std::vector<CoordCheck> run_coordcheck(const CoordCheckOptions& o, const CoordProgress& progress = {});

// Fills a check's slopes, tracks, curves and worst slope from its values.
void fit_coord_slopes(CoordCheck& c);

// The checks of a coord.json, their slopes fitted anew from its values (`normlab coordcheck
// --from`: a shipped check's numbers recompute from what it measured). UsageError naming the file
// when it is not one.
std::vector<CoordCheck> read_coord_json(const std::string& path);

// coord.json (src/train/README.md, "Coordinate check": the checks, and the splits of
// split_first_update) and the printed table of one check.
std::string coord_json(const std::vector<CoordCheck>& checks);
std::string coord_table(const CoordCheck& c);
std::string axis_name(CoordAxis a);  // "width" / "depth"

}  // namespace normlab
