// A tuned sweep's comparison (configs/sweeps/README.md, "Tuned comparisons" and "Ladders"): for
// every cell (an arm at a rung of the ladder) the mean metric m(v) of its search runs at each tuned
// value, the selected value v* (ties: the smaller; transferred from a searched rung where its own
// was not searched), whether it sits at the grid's edge, its sensitivity (Wortsman et al. 2023),
// the confirm runs at v* against the baseline arm's at the same rung (Welch's and the paired t
// test, Holm's correction, the equivalence margin, the detectable effect), the transfer audit and
// the machines the confirm runs came from. Every number
// here is computed from the runs' records (src/metrics/records.h) and point.json; the summary
// (summary.h), `normlab report`, `normlab compare` and scripts/plot.py show them and compute none.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "metrics/stats.h"
#include "sweep/sweep_points.h"

namespace normlab {

// What one run contributes to the comparison.
struct TuneRun {
  bool finished = false;            // point.json says done, diverged or failed: its number is final
  double metric = std::nan("");     // best_val_loss or final_val_loss (NaN: missing or non-finite)
  double step0_val = std::nan("");  // val_loss of its step-0 eval record
  double unigram_entropy = std::nan("");  // of its validation data (data/corpus.h), NaN where unknown
  std::vector<std::string> machines;  // the kinds of machine it ran on (core/machine.h), in order
  std::vector<std::pair<int64_t, double>> evals;  // (step, val_loss) of its eval records, in order
};

// A cell's confirm runs against the baseline cell's at the same rung: both tests (Welch's and
// the paired one, by confirm seed), the deciding test's p after the correction over the rung's
// arms, the smallest effect it detects with 80 % power, and the verdict. verdict: better / worse
// (the deciding test's 95 % interval lies below / above 0 and p_adj < 0.05), tie (margin 0), or
// equivalent / inconclusive (margin > 0), baseline (the baseline cell itself), pending (confirm
// runs of either cell not finished), none (no value could be selected for either cell).
struct TuneVerdict {
  TTest welch, paired;
  double p_adj = std::nan(""), mde = std::nan("");
  std::string verdict = "pending";
  const TTest& deciding(TestKind t) const { return t == TestKind::kPaired ? paired : welch; }
};

constexpr double kAtEntropyNats = 0.05;

struct TuneArmResult {
  std::string name;                                       // "layout=pre,d_model=64" (empty without axes)
  std::string stem;                                       // the arm across rungs: "layout=pre"
  std::vector<std::pair<std::string, std::string>> axes;  // axis key -> value text
  size_t rung = 0;          // index of its ladder value (0 without a ladder)
  std::string rung_value;   // the ladder value as written (empty without a ladder)
  bool searched = true;     // its rung is searched (else its v* is transferred)
  bool transferred = false;  // v* came from the same arm at another rung
  std::string from_rung;    // that rung's ladder value (transferred cells)
  bool given = false;       // v* is tune.given's for its arm (transferred, no from_rung)
  std::vector<double> search;    // m(v) per value; NaN until every search run at v finished
  bool search_finished = false;  // every search run of the cell finished (transferred: its source's)
  // index of v* in the values; -1 until every search run finished (or no m(v) is finite)
  int selected = -1;
  bool at_edge = false;               // v* is the first or the last value (of the rung it comes from)
  double sensitivity = std::nan("");  // mean over v of (min(m(v), l0) - m(v*)); searched cells
  // mean step-0 eval loss of the cell's search runs (transferred cells: of its confirm runs)
  double l0 = std::nan("");
  // The confirm runs at v* that finished (missing or non-finite metric counted as l0): mean,
  // sample std (seed_stats), how many; complete when all confirm seeds finished.
  double confirm_mean = std::nan(""), confirm_std = std::nan("");
  int64_t confirm_n = 0;
  bool confirm_complete = false;
  std::vector<double> confirm_values;  // the values behind confirm_mean, in confirm-seed order
  std::vector<std::string> machines;   // the kinds of machine its finished confirm runs ran on
  // Learned nothing beyond symbol frequencies: its confirm mean is within kAtEntropyNats of (or
  // above) the unigram entropy of its validation data (the mean over its confirm runs; unknown
  // where the data folder has neither floor.json nor manifest.json: then never flagged). Figures
  // draw such an arm apart so that it does not set the axis for the others.
  double unigram_entropy = std::nan("");
  bool at_entropy = false;
  TuneVerdict vs_baseline;
  // tune.fit quadratic (quadratic_optimum over its confirm runs at v* and the values either side):
  // the fitted optimum in the tuned key's unit, its 95 % bootstrap interval over the confirm seeds,
  // and whether it sits at the bracket's edge (the metric still falls beyond it). NaN where v* is
  // at the grid's edge or those runs have not all finished.
  double fitted = std::nan(""), fitted_low = std::nan(""), fitted_high = std::nan("");
  bool fitted_at_edge = false;
  // The runs behind the fit: its bracket (log2 of the three values) and the metric of each confirm
  // seed's run there (fit_y[k][i]); empty without a fit. The transfer audit resamples them.
  std::vector<double> fit_x;
  std::vector<std::vector<double>> fit_y;
  // The middle of the fit's bracket (a grid index): v* itself, or with tune.fit_extend where the
  // walk ended (-1: not decided yet), and the grid index whose confirm runs the walk needs next
  // (-1: none; fit_walk).
  int fit_centre = -1, fit_next = -1;
  // A searched cell's validation curve at each value: per value, (step, val loss averaged over the
  // search seeds) at the eval steps every seed logged (the transfer audit's "larger is better").
  std::vector<std::vector<std::pair<int64_t, double>>> search_curves;
};

// "Larger is better" at one value: a rung against the one before it in the ladder, both run at
// `value`: the eval steps after 0 both logged, and the first where the larger rung's val loss is
// not below the smaller's (-1: below at every one).
struct TuneOrdered {
  std::string smaller, larger;  // ladder values
  int64_t evals = 0;
  int64_t first_not_below = -1;
};

// The optimum of a metric over three values x0 < x1 < x2 (log2 of the tuned values), y[k][i] the
// run with seed k at x_i: the minimum over [x0, x2] of the parabola through the seed means (its
// vertex when it curves up and lies inside, else the lower end), in log2 units, and its 95 %
// percentile interval over `resamples` bootstrap resamples of the seeds (a fixed generator: the
// same runs give the same interval; NaN with one seed). at_edge: the estimate is x0 or x2.
struct QuadraticOptimum {
  double x = std::nan(""), low = std::nan(""), high = std::nan("");
  bool at_edge = false;
};
QuadraticOptimum quadratic_optimum(const std::vector<double>& x, const std::vector<std::vector<double>>& y,
                                   int resamples = 2000);

// One arm's fitted optima over a ladder's rungs, resampled together. rungs[r]: log2 of rung r's
// ladder value; x[r]: its fit bracket (three log2 values, as quadratic_optimum); y[r][k][i]: confirm
// seed k's run at x[r][i] (every rung runs the same seeds, in the same order). slope: the
// least-squares slope of the optima (log2) against rungs; log2_ratio: log2 of the last rung's optimum
// over the first's; each with its 95 % percentile interval over bootstrap resamples that draw the
// same seeds at every rung (a paired resample: a seed that favours higher values at every rung moves
// every rung's optimum together, and its effect on the slope cancels). edge_share: the share of
// resamples in which some rung's minimum sat at an end of its bracket (that end of the interval is
// the bracket's, not the seeds'), and rung_edge_share each rung's own share. Intervals and
// edge_share NaN (rung_edge_share empty) with one seed; all NaN with fewer
// than two rungs or a rung whose runs are not all finite.
struct FittedSlope {
  double slope = std::nan(""), low = std::nan(""), high = std::nan("");
  double log2_ratio = std::nan(""), ratio_low = std::nan(""), ratio_high = std::nan("");
  double edge_share = std::nan("");
  std::vector<double> rung_edge_share;  // per rung, the share of resamples at its bracket's end
};
FittedSlope fitted_slope(const std::vector<double>& rungs, const std::vector<std::vector<double>>& x,
                         const std::vector<std::vector<std::vector<double>>>& y, int resamples = 2000);

// tune.fit_extend: where a cell's fit bracket ends up. means[v]: the cell's confirm mean at grid
// value v (NaN where its runs have not all finished, or were never asked for). From [s - 1, s + 1]
// (s = v*), while the lowest mean of the bracket (the first of equal ones) sits at one of its ends
// and the grid and the budget allow (at most `extend` values past s - 1 downwards and past s + 1
// upwards), the bracket takes the next value beyond that end. centre: the middle of the final
// three-value bracket around the lowest mean (at the grid's or the budget's end: the value next to
// that end); -1 while undecided. next: the value whose confirm runs the walk needs before it can go
// on (-1: none; while a value inside the bracket is unfinished both are -1). No bracket (s at the
// grid's edge or s < 0): both -1.
struct FitWalk {
  int centre = -1, next = -1;
};
FitWalk fit_walk(const std::vector<double>& means, int selected, int extend);

// Decimals a difference needs beside its interval: two significant digits of the interval's
// half-width, at least 2 and at most 6 (4 without a bounded interval). summary.md and the figures
// print Δ, its interval and the mde with them.
int interval_digits(const TTest& t);

// The transfer audit of one arm (two or more searched rungs): its selected value at each searched
// rung and the least-squares slope of log2 v* against log2 of the rung's ladder value.
struct TuneTransfer {
  std::string stem;
  std::vector<std::string> rungs;   // the searched rungs' ladder values
  std::vector<double> selected;     // v* there (NaN: none)
  std::vector<bool> at_edge;
  double slope = std::nan("");      // NaN with fewer than two selections or non-numeric rungs
  // tune.fit quadratic: every rung whose cell has a fitted optimum (searched or transferred), the
  // optimum and its interval there, and the least-squares slope of log2 of it against log2 rung.
  std::vector<std::string> fit_rungs;
  std::vector<double> fitted, fitted_low, fitted_high;
  double fitted_slope = std::nan("");
  // fitted_slope over the rungs with a fit and a numeric ladder value, with its paired-resample
  // interval and log2(last / first) (fitted_slope()); `fitted_slope` above is its point estimate.
  FittedSlope fitted_paired;
  std::vector<std::string> paired_rungs;  // the rungs behind fitted_paired (numeric), smallest first
  // At the value the arm selected at its first searched rung (the rate a transfer would carry):
  // each searched rung against the searched rung before it (TuneOrdered). NaN / empty without one.
  double ordered_value = std::nan("");
  std::vector<TuneOrdered> ordered;
};

// Larger is better on the confirm seeds (ladders): an arm's confirm runs at one rung against its
// confirm runs at the rung before it, and at the last rung against the first (three or more
// rungs), each at the value the arm ran at there. Δ = larger - smaller over the confirm seeds
// (every rung runs the same ones): both tests, the deciding test's p adjusted over the arm's pairs
// (tune.correction), the mde and the verdict (better: the larger model's metric is lower);
// pending until both cells' confirm runs have finished.
struct TuneSizeStep {
  std::string stem, smaller, larger;  // the arm; the two rungs' ladder values
  TuneVerdict v;
  bool at_entropy = false;  // both cells learned nothing (their Δ says nothing about size)
};

struct TuneSummary {
  SweepTune tune;
  std::vector<std::string> rungs;  // the ladder's values ({""} without a ladder)
  std::vector<size_t> baselines;   // per rung: the index of the baseline cell
  // every search run of every searched cell finished: the selections are final and the confirm
  // points known
  bool search_complete = false;
  std::vector<TuneArmResult> arms;   // every cell, in tune_arms' order
  std::vector<TuneTransfer> transfer;  // per arm, with two or more searched rungs
  std::vector<TuneSizeStep> size_steps;  // ladders: per arm, rung against rung (TuneSizeStep)
  // per rung: the kinds of machine (CPU model and device) its finished confirm runs ran on
  std::vector<std::vector<std::string>> rung_machines;
  bool mixed_machines = false;  // some rung's confirm runs come from more than one kind
  std::vector<int> selected() const;  // cells' selected (or transferred) indices (-1: none yet)
};

// The search half of one arm from its runs, search[v][k] the run at value v with search seed k:
// l0, m(v), v*, at_edge, sensitivity (name, axes and the confirm half are left as they are).
void tune_search(const std::vector<std::vector<TuneRun>>& search, TuneArmResult& arm);
// The confirm half from the arm's confirm runs (in confirm-seed order) and its l0.
void tune_confirm(const std::vector<TuneRun>& confirm, TuneArmResult& arm);
// tune.fit quadratic: the cell's fitted optimum from its confirm runs at c - 1, c, c + 1, c its
// fit_centre (v* when unset) (bracket[i][k]: confirm seed k; a failed or non-finite run counted as
// l0). Left NaN where c is at the grid's edge or some run has not finished.
void tune_fit(const std::vector<std::vector<TuneRun>>& bracket, const SweepTune& t, TuneArmResult& arm);
// Both tests of a cell's confirm values against the baseline cell's (in confirm-seed order;
// metrics/stats.h): Welch's and the paired one; verdict left pending.
TuneVerdict tune_tests(const std::vector<double>& arm, const std::vector<double>& baseline);
// The verdicts of one rung's cells against its baseline (the tests filled in): the deciding test's
// p values Holm-adjusted over the cells (or not, correction none), mde, and the verdict with the
// tune block's margin.
void tune_decide(const std::vector<TuneVerdict*>& rung, const SweepTune& t);
// One cell against a baseline on its own: tune_tests, then tune_decide with t's test and margin
// (no other arm, so no correction).
TuneVerdict tune_verdict(const std::vector<double>& arm, const std::vector<double>& baseline,
                         const SweepTune& t = {});

// Reads the search and confirm runs of a tuned sweep from its directory.
TuneSummary summarise_tune(const Sweep& sweep, const std::string& sweep_dir);
// tune.fit_extend: the confirm points (every confirm seed) at each cell's fit_next; empty when no
// walk needs more runs.
std::vector<SweepPoint> fit_extension_points(const Sweep& sweep, const TuneSummary& t);

// summary.md's section and `normlab compare`'s table: the verdict table and the search grid.
std::string tune_markdown(const TuneSummary& t);
// summary.json's "tune" object.
std::string tune_json(const TuneSummary& t);

}  // namespace normlab
