// A tuned sweep's comparison (configs/sweeps/README.md, "Tuned comparisons"): for every arm the
// mean metric m(v) of its search runs at each tuned value, the selected value v* (ties: the
// smaller), whether it sits at the grid's edge, its sensitivity (Wortsman et al. 2023), and the
// confirm runs at v* against the baseline arm's (Welch's t, 95 % interval, verdict). Every number
// here is computed from the runs' records (src/metrics/records.h) and point.json; the summary
// (summary.h), `normlab report`, `normlab compare` and scripts/plot.py show them and compute none.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sweep/sweep_config.h"

namespace normlab {

// What one run contributes to the comparison.
struct TuneRun {
  bool finished = false;            // point.json says done, diverged or failed: its number is final
  double metric = std::nan("");     // best_val_loss or final_val_loss (NaN: missing or non-finite)
  double step0_val = std::nan("");  // val_loss of its step-0 eval record
};

// An arm's confirm runs against the baseline arm's. verdict: better (the interval lies below 0),
// worse (above 0), tie, baseline (the baseline arm itself), pending (confirm runs of either arm
// not finished), none (no value could be selected for either arm: no finite m(v)).
struct TuneVerdict {
  double delta = std::nan(""), ci_low = std::nan(""), ci_high = std::nan("");
  double p = std::nan(""), df = std::nan("");
  std::string verdict = "pending";
};

struct TuneArmResult {
  std::string name;                                       // "layout=pre" (empty without axes)
  std::vector<std::pair<std::string, std::string>> axes;  // axis key -> value text
  std::vector<double> search;    // m(v) per value; NaN until every search run at v finished
  bool search_finished = false;  // every search run of the arm finished
  // index of v* in the values; -1 until every search run finished (or no m(v) is finite)
  int selected = -1;
  bool at_edge = false;               // v* is the first or the last value
  double sensitivity = std::nan("");  // mean over v of (min(m(v), l0) - m(v*))
  double l0 = std::nan("");           // mean step-0 eval loss of the arm's search runs
  // The confirm runs at v* that finished (missing or non-finite metric counted as l0): mean,
  // sample std (seed_stats), how many; complete when all confirm seeds finished.
  double confirm_mean = std::nan(""), confirm_std = std::nan("");
  int64_t confirm_n = 0;
  bool confirm_complete = false;
  std::vector<double> confirm_values;  // the values behind confirm_mean, in confirm-seed order
  TuneVerdict vs_baseline;
};

struct TuneSummary {
  SweepTune tune;
  size_t baseline = 0;  // index of the baseline arm
  // every search run of every arm finished: the selections are final and the confirm points known
  bool search_complete = false;
  std::vector<TuneArmResult> arms;
  std::vector<int> selected() const;  // arms' selected indices (-1: none yet)
};

// The search half of one arm from its runs, search[v][k] the run at value v with search seed k:
// l0, m(v), v*, at_edge, sensitivity (name, axes and the confirm half are left as they are).
void tune_search(const std::vector<std::vector<TuneRun>>& search, TuneArmResult& arm);
// The confirm half from the arm's confirm runs (in confirm-seed order) and its l0.
void tune_confirm(const std::vector<TuneRun>& confirm, TuneArmResult& arm);
// Welch's comparison of an arm's confirm values against the baseline's (both finite, n >= 1):
// delta = mean - mean_baseline, se = sqrt(s1^2/n1 + s2^2/n2), Welch-Satterthwaite df, two-sided p
// of t = delta / se, 95 % interval delta -+ t_{0.975,df} se. se = 0: p = 0 and the interval
// [delta, delta] if delta != 0, else p = 1 and tie (df NaN). Fewer than 2 values on a side: no
// variance estimate, so the interval is unbounded (NaN), p and df NaN, verdict tie.
TuneVerdict tune_verdict(const std::vector<double>& arm, const std::vector<double>& baseline);

// Reads the search and confirm runs of a tuned sweep from its directory.
TuneSummary summarise_tune(const Sweep& sweep, const std::string& sweep_dir);

// summary.md's section and `normlab compare`'s table: the verdict table and the search grid.
std::string tune_markdown(const TuneSummary& t);
// summary.json's "tune" object.
std::string tune_json(const TuneSummary& t);

}  // namespace normlab
