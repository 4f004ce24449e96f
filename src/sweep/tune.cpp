#include "sweep/tune.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <tuple>

#include "core/fs.h"
#include "core/json.h"
#include "data/corpus.h"
#include "metrics/compare.h"
#include "metrics/records.h"
#include "metrics/stats.h"
#include "sweep/summary.h"
#include "sweep/sweep_yaml.h"

namespace normlab {
namespace {
namespace fs = std::filesystem;


// A run's metric, or l0 where it is missing or non-finite (a diverged or failed run).
double counted(const TuneRun& r, double l0) { return std::isfinite(r.metric) ? r.metric : l0; }

TuneRun read_tune_run(const std::string& sweep_dir, const SweepPoint& p, TuneMetric metric) {
  TuneRun r;
  const std::string run = point_run_dir(sweep_dir, p);
  const auto rec = read_point_record(run);
  r.finished = rec && (is_finished(rec->status) || rec->status == PointStatus::kFailed);
  if (!file_exists((fs::path(run) / "metrics.jsonl").string())) return r;
  const RunRecords records = read_run(run);
  r.metric = metric == TuneMetric::kBestVal ? records.derived.best_val_loss
                                            : records.derived.final_val_loss;
  if (auto u = read_unigram_entropy(records.info.val_path)) r.unigram_entropy = *u;
  for (const EvalRecord& e : records.eval) {
    if (e.step == 0) r.step0_val = e.val_loss;  // a resumed run does not repeat it; the last wins
  }
  for (const MachineRecord& m : records.machines) r.machines.push_back(m.kind());
  for (const EvalRecord& e : records.eval) r.evals.emplace_back(e.step, e.val_loss);
  return r;
}

// The mean val loss over runs at the eval steps every run logged (the last record of a step wins,
// as a resumed run may repeat one); empty when some run has none.
std::vector<std::pair<int64_t, double>> seed_mean_curve(const std::vector<TuneRun>& runs) {
  std::vector<std::pair<int64_t, double>> out;
  if (runs.empty()) return out;
  std::map<int64_t, std::pair<double, size_t>> sum;  // step -> (sum, runs with it)
  for (const TuneRun& r : runs) {
    std::map<int64_t, double> last;
    for (const auto& [step, v] : r.evals) last[step] = v;
    for (const auto& [step, v] : last) {
      sum[step].first += v;
      ++sum[step].second;
    }
  }
  for (const auto& [step, sn] : sum) {
    if (sn.second == runs.size()) out.emplace_back(step, sn.first / static_cast<double>(runs.size()));
  }
  return out;
}

// Adds the kinds of `more` that `kinds` lacks.
void add_kinds(std::vector<std::string>& kinds, const std::vector<std::string>& more) {
  for (const auto& k : more) {
    if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) kinds.push_back(k);
  }
}

// A ladder value as a number (NaN when it is not one).
double ladder_number(const std::string& text) {
  char* end = nullptr;
  const double x = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size() ? x : kNaN;
}

template <class T>
std::string list(const std::vector<T>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + fmt::format("{}", v[i]);
  return "[" + out + "]";
}

std::string cell_number(double v, const char* format = "{:.4f}") {
  return std::isfinite(v) ? fmt::format(format, v) : "-";
}

}  // namespace

std::vector<int> TuneSummary::selected() const {
  std::vector<int> out;
  for (const auto& a : arms) out.push_back(a.selected);
  return out;
}

void tune_search(const std::vector<std::vector<TuneRun>>& search, TuneArmResult& arm) {
  std::vector<double> step0;
  bool all_finished = true;
  for (const auto& at_v : search) {
    for (const TuneRun& r : at_v) {
      if (std::isfinite(r.step0_val)) step0.push_back(r.step0_val);
      all_finished = all_finished && r.finished;
    }
  }
  arm.l0 = seed_stats(step0).mean;  // NaN when no search run has a step-0 eval
  arm.search.assign(search.size(), kNaN);
  for (size_t v = 0; v < search.size(); ++v) {
    const bool in = std::all_of(search[v].begin(), search[v].end(),
                                [](const TuneRun& r) { return r.finished; });
    if (!in || search[v].empty()) continue;
    double sum = 0;
    for (const TuneRun& r : search[v]) sum += counted(r, arm.l0);
    arm.search[v] = sum / static_cast<double>(search[v].size());
  }
  arm.search_finished = all_finished;
  arm.selected = -1;
  arm.at_edge = false;
  arm.sensitivity = kNaN;
  if (!all_finished) return;
  for (size_t v = 0; v < arm.search.size(); ++v) {
    // strictly lower: a tie keeps the smaller value
    if (std::isfinite(arm.search[v]) &&
        (arm.selected < 0 || arm.search[v] < arm.search[arm.selected])) {
      arm.selected = static_cast<int>(v);
    }
  }
  if (arm.selected < 0) return;
  arm.at_edge = arm.selected == 0 || arm.selected + 1 == static_cast<int>(arm.search.size());
  double sum = 0;
  for (double m : arm.search) sum += std::min(m, arm.l0) - arm.search[arm.selected];
  arm.sensitivity = sum / static_cast<double>(arm.search.size());
}

namespace {

// The minimum over [x0, x2] of the parabola through (x_i, m_i) and whether it is an end.
std::pair<double, bool> parabola_minimum(const std::vector<double>& x, const std::vector<double>& m) {
  const double x0 = x[0], x1 = x[1], x2 = x[2];
  const double denom = (x0 - x1) * (x0 - x2) * (x1 - x2);
  const double a = (x2 * (m[1] - m[0]) + x1 * (m[0] - m[2]) + x0 * (m[2] - m[1])) / denom;
  const double b = (x2 * x2 * (m[0] - m[1]) + x1 * x1 * (m[2] - m[0]) + x0 * x0 * (m[1] - m[2])) / denom;
  if (a > 0) {
    const double v = -b / (2 * a);
    if (v <= x0) return {x0, true};
    if (v >= x2) return {x2, true};
    return {v, false};
  }
  // Flat or curving down: the lower end (the parabola passes through the end means).
  return {m[0] <= m[2] ? x0 : x2, true};
}

// Three increasing values and, per seed, three finite runs: what a fit needs.
bool fit_runs_usable(const std::vector<double>& x, const std::vector<std::vector<double>>& y) {
  if (x.size() != 3 || y.empty() || !(x[0] < x[1] && x[1] < x[2])) return false;
  return std::all_of(y.begin(), y.end(), [](const std::vector<double>& row) {
    return row.size() == 3 && std::all_of(row.begin(), row.end(), [](double v) { return std::isfinite(v); });
  });
}

// The mean over `seeds` (indices into y, repeats counted) of y[k][i], per i.
std::vector<double> seed_means(const std::vector<std::vector<double>>& y, const std::vector<size_t>& seeds) {
  std::vector<double> m(3, 0.0);
  for (const size_t k : seeds) {
    for (size_t i = 0; i < 3; ++i) m[i] += y[k][i] / static_cast<double>(seeds.size());
  }
  return m;
}

std::vector<size_t> all_seeds(size_t K) {
  std::vector<size_t> all(K);
  for (size_t k = 0; k < K; ++k) all[k] = k;
  return all;
}

// `resamples` draws of K seeds with replacement from a fixed generator: the same runs give the same
// intervals.
std::vector<std::vector<size_t>> seed_resamples(size_t K, int resamples) {
  std::mt19937_64 rng(0x5eed2026);
  std::uniform_int_distribution<size_t> pick(0, K - 1);
  std::vector<std::vector<size_t>> out(static_cast<size_t>(resamples), std::vector<size_t>(K));
  for (auto& seeds : out) {
    for (auto& k : seeds) k = pick(rng);
  }
  return out;
}

// The 2.5 % and 97.5 % points of a bootstrap distribution (lower order statistics).
std::pair<double, double> percentile_95(std::vector<double> boot) {
  std::sort(boot.begin(), boot.end());
  auto at = [&](double q) { return boot[static_cast<size_t>(std::floor(q * static_cast<double>(boot.size() - 1)))]; };
  return {at(0.025), at(0.975)};
}

}  // namespace

QuadraticOptimum quadratic_optimum(const std::vector<double>& x, const std::vector<std::vector<double>>& y,
                                   int resamples) {
  QuadraticOptimum out;
  if (!fit_runs_usable(x, y)) return out;
  const size_t K = y.size();
  std::tie(out.x, out.at_edge) = parabola_minimum(x, seed_means(y, all_seeds(K)));
  if (K < 2 || resamples < 1) return out;
  std::vector<double> boot;
  for (const auto& seeds : seed_resamples(K, resamples)) boot.push_back(parabola_minimum(x, seed_means(y, seeds)).first);
  std::tie(out.low, out.high) = percentile_95(boot);
  return out;
}

FittedSlope fitted_slope(const std::vector<double>& rungs, const std::vector<std::vector<double>>& x,
                         const std::vector<std::vector<std::vector<double>>>& y, int resamples) {
  FittedSlope out;
  const size_t R = rungs.size();
  if (R < 2 || x.size() != R || y.size() != R) return out;
  const size_t K = y[0].size();
  for (size_t r = 0; r < R; ++r) {
    if (y[r].size() != K || !fit_runs_usable(x[r], y[r])) return out;
  }
  // The optima (log2) of every rung for one draw of the seeds; at_end[r]: rung r's minimum sits at
  // its bracket's end.
  std::vector<bool> at_end(R);
  auto optima = [&](const std::vector<size_t>& seeds) {
    std::vector<double> opt;
    for (size_t r = 0; r < R; ++r) {
      const auto [v, edge] = parabola_minimum(x[r], seed_means(y[r], seeds));
      opt.push_back(v);
      at_end[r] = edge;
    }
    return opt;
  };
  const std::vector<double> point = optima(all_seeds(K));
  out.slope = least_squares_slope(rungs, point);
  out.log2_ratio = point.back() - point.front();
  if (K < 2 || resamples < 1) return out;
  std::vector<double> slopes, ratios;
  std::vector<int> edges(R, 0);
  int any = 0;
  for (const auto& seeds : seed_resamples(K, resamples)) {
    const std::vector<double> opt = optima(seeds);
    slopes.push_back(least_squares_slope(rungs, opt));
    ratios.push_back(opt.back() - opt.front());
    for (size_t r = 0; r < R; ++r) edges[r] += at_end[r] ? 1 : 0;
    any += std::find(at_end.begin(), at_end.end(), true) != at_end.end() ? 1 : 0;
  }
  std::tie(out.low, out.high) = percentile_95(slopes);
  std::tie(out.ratio_low, out.ratio_high) = percentile_95(ratios);
  out.edge_share = static_cast<double>(any) / static_cast<double>(resamples);
  for (const int e : edges) out.rung_edge_share.push_back(static_cast<double>(e) / static_cast<double>(resamples));
  return out;
}

FitWalk fit_walk(const std::vector<double>& means, int selected, int extend) {
  const int n = static_cast<int>(means.size());
  if (selected <= 0 || selected + 1 >= n) return {};
  int lo = selected - 1, hi = selected + 1;
  for (;;) {
    int low = -1;
    for (int v = lo; v <= hi; ++v) {
      if (!std::isfinite(means[static_cast<size_t>(v)])) return {};
      if (low < 0 || means[static_cast<size_t>(v)] < means[static_cast<size_t>(low)]) low = v;
    }
    if (low > lo && low < hi) return {low, -1};
    // The lowest sits at an end: take the value beyond it, where the grid and the budget allow.
    const bool up = low == hi;
    const int beyond = up ? hi + 1 : lo - 1;
    const bool allowed = up ? beyond < n && beyond - (selected + 1) <= extend
                            : beyond >= 0 && (selected - 1) - beyond <= extend;
    if (!allowed) return {up ? hi - 1 : lo + 1, -1};
    if (!std::isfinite(means[static_cast<size_t>(beyond)])) return {-1, beyond};
    (up ? hi : lo) = beyond;
  }
}

void tune_confirm(const std::vector<TuneRun>& confirm, TuneArmResult& arm) {
  arm.confirm_values.clear();
  arm.confirm_complete = !confirm.empty();
  for (const TuneRun& r : confirm) {
    arm.confirm_complete = arm.confirm_complete && r.finished;
    if (r.finished) arm.confirm_values.push_back(counted(r, arm.l0));
  }
  const SeedStats st = seed_stats(arm.confirm_values);
  arm.confirm_mean = st.mean;
  arm.confirm_std = st.std;
  arm.confirm_n = st.n;
}

int interval_digits(const TTest& t) {
  const double half = t.bounded() ? (t.ci95_high - t.ci95_low) / 2 : kNaN;
  return half > 0 ? std::clamp(1 - static_cast<int>(std::floor(std::log10(half))), 2, 6) : 4;
}

void tune_fit(const std::vector<std::vector<TuneRun>>& bracket, const SweepTune& t, TuneArmResult& arm) {
  arm.fitted = arm.fitted_low = arm.fitted_high = kNaN;
  arm.fitted_at_edge = false;
  arm.fit_x.clear();
  arm.fit_y.clear();
  const int s = arm.fit_centre >= 0 ? arm.fit_centre : arm.selected;
  if (s <= 0 || s + 1 >= static_cast<int>(t.numbers.size())) return;  // at the grid's edge: no bracket
  const size_t K = t.confirm_seeds.size();
  std::vector<std::vector<double>> y(K, std::vector<double>(3, kNaN));
  for (size_t i = 0; i < 3; ++i) {
    if (bracket[i].size() != K) return;
    for (size_t k = 0; k < K; ++k) {
      if (!bracket[i][k].finished) return;
      y[k][i] = counted(bracket[i][k], arm.l0);
    }
  }
  std::vector<double> x;
  for (int v = s - 1; v <= s + 1; ++v) x.push_back(std::log2(t.numbers[static_cast<size_t>(v)]));
  const QuadraticOptimum q = quadratic_optimum(x, y);
  arm.fit_x = x;
  arm.fit_y = y;
  arm.fitted = std::exp2(q.x);
  arm.fitted_low = std::exp2(q.low);
  arm.fitted_high = std::exp2(q.high);
  arm.fitted_at_edge = q.at_edge;
}

TuneVerdict tune_tests(const std::vector<double>& arm, const std::vector<double>& baseline) {
  TuneVerdict v;
  v.welch = welch_test(arm, baseline);
  v.paired = paired_test(arm, baseline);
  return v;
}

void tune_decide(const std::vector<TuneVerdict*>& rung, const SweepTune& t) {
  std::vector<double> p;
  for (const TuneVerdict* v : rung) p.push_back(v->deciding(t.test).p);
  const std::vector<double> adjusted = t.correction == Correction::kHolm ? holm_adjust(p) : p;
  for (size_t i = 0; i < rung.size(); ++i) {
    TuneVerdict& v = *rung[i];
    const TTest& d = v.deciding(t.test);
    v.p_adj = adjusted[i];
    v.mde = minimum_detectable_effect(d);
    v.verdict = decide(d, std::isnan(v.p_adj) ? 1.0 : v.p_adj, t.margin);
  }
}

TuneVerdict tune_verdict(const std::vector<double>& arm, const std::vector<double>& baseline, const SweepTune& t) {
  TuneVerdict v = tune_tests(arm, baseline);
  SweepTune alone = t;
  alone.correction = Correction::kNone;
  tune_decide({&v}, alone);
  return v;
}

std::vector<SweepPoint> fit_extension_points(const Sweep& sweep, const TuneSummary& t) {
  std::vector<int> next;
  for (const TuneArmResult& a : t.arms) next.push_back(a.fit_next);
  return confirm_points_at(sweep, next);
}

TuneSummary summarise_tune(const Sweep& sweep, const std::string& sweep_dir) {
  TuneSummary s;
  s.tune = *sweep.tune;
  const SweepTune& t = s.tune;
  const auto cells = tune_arms(sweep);
  const bool has_ladder = ladder_axis(sweep) >= 0;
  s.rungs = ladder_rungs(sweep);
  s.baselines.assign(s.rungs.size(), 0);
  const auto search_points = expand_sweep(sweep);
  s.search_complete = true;
  for (const SweepPoint& cell : cells) {
    TuneArmResult arm;
    arm.name = cell.name;
    arm.stem = cell.stem;
    arm.axes = cell.overrides;
    arm.rung = cell.rung;
    arm.rung_value = has_ladder ? s.rungs[cell.rung] : "";
    arm.searched = rung_searched(sweep, cell.rung);
    if (arm.searched) {
      std::vector<std::vector<TuneRun>> search(t.values.size());
      for (const SweepPoint& p : search_points) {
        if (p.arm != cell.arm) continue;
        const size_t v =
            std::find(t.values.begin(), t.values.end(), p.overrides.back().second) - t.values.begin();
        search[v].push_back(read_tune_run(sweep_dir, p, t.metric));
      }
      tune_search(search, arm);
      s.search_complete = s.search_complete && arm.search_finished;
      for (const auto& at_v : search) arm.search_curves.push_back(seed_mean_curve(at_v));
    }
    const bool match = std::all_of(t.baseline.begin(), t.baseline.end(), [&](const auto& kv) {
      return std::find(arm.axes.begin(), arm.axes.end(), kv) != arm.axes.end();
    });
    if (match) s.baselines[cell.rung] = s.arms.size();
    s.arms.push_back(arm);
  }
  // Transferred selections: the same arm's at the nearest searched rung before, else the first
  // searched rung.
  for (TuneArmResult& arm : s.arms) {
    if (arm.searched) continue;
    const TuneArmResult *before = nullptr, *first = nullptr;
    for (const TuneArmResult& o : s.arms) {
      if (o.stem != arm.stem || !o.searched) continue;
      if (o.rung < arm.rung && (!before || o.rung > before->rung)) before = &o;
      if (!first || o.rung < first->rung) first = &o;
    }
    const int given = before ? -1 : given_index(t, arm.axes);
    const TuneArmResult* from = before ? before : first;
    arm.transferred = true;
    if (given >= 0) {  // chosen elsewhere: no search behind it here
      arm.given = true;
      arm.selected = given;
      arm.search_finished = true;
      continue;
    }
    if (!from) continue;
    arm.from_rung = from->rung_value;
    arm.selected = from->selected;
    arm.at_edge = from->at_edge;
    arm.search_finished = from->search_finished;
  }
  // Confirm runs exist only for cells with a selection (their names carry v*); with a fit, also
  // at the values either side of v*; with fit_extend, wherever a walk took them (read at every value).
  const size_t n_values = t.values.size();
  std::vector<SweepPoint> confirm;
  if (t.fit_extend > 0) {
    for (size_t v = 0; v < n_values; ++v) {
      const auto at_v = confirm_points_at(sweep, std::vector<int>(s.arms.size(), static_cast<int>(v)));
      confirm.insert(confirm.end(), at_v.begin(), at_v.end());
    }
  } else {
    confirm = confirm_points(sweep, s.selected());
  }
  for (size_t i = 0; i < s.arms.size(); ++i) {
    TuneArmResult& arm = s.arms[i];
    std::vector<std::vector<TuneRun>> at_value(n_values);  // confirm-seed order at each value
    for (const SweepPoint& p : confirm) {
      if (p.arm != i) continue;
      const size_t v = static_cast<size_t>(
          std::find(t.values.begin(), t.values.end(), p.overrides.back().second) - t.values.begin());
      at_value[v].push_back(read_tune_run(sweep_dir, p, t.metric));
    }
    const std::vector<TuneRun> runs = arm.selected >= 0 ? at_value[static_cast<size_t>(arm.selected)] : std::vector<TuneRun>{};
    if (arm.transferred) {  // no search runs: l0 from its confirm runs' step-0 evals
      std::vector<double> step0;
      for (const TuneRun& r : runs) step0.push_back(r.step0_val);
      arm.l0 = seed_stats(step0).mean;
    }
    tune_confirm(runs, arm);
    if (t.fit && arm.selected >= 0) {
      arm.fit_centre = arm.selected;
      if (t.fit_extend > 0) {
        std::vector<double> means(n_values, kNaN);
        for (size_t v = 0; v < n_values; ++v) {
          const auto& at = at_value[v];
          if (at.size() != t.confirm_seeds.size() ||
              !std::all_of(at.begin(), at.end(), [](const TuneRun& r) { return r.finished; })) {
            continue;
          }
          double sum = 0;
          for (const TuneRun& r : at) sum += counted(r, arm.l0);
          means[v] = sum / static_cast<double>(at.size());
        }
        const FitWalk walk = fit_walk(means, arm.selected, t.fit_extend);
        arm.fit_centre = walk.centre;
        arm.fit_next = walk.next;
      }
      const int c = arm.fit_centre;
      if (c > 0 && c + 1 < static_cast<int>(n_values)) {
        tune_fit({at_value[static_cast<size_t>(c - 1)], at_value[static_cast<size_t>(c)],
                  at_value[static_cast<size_t>(c + 1)]},
                 t, arm);
      }
    }
    std::vector<double> floors;
    for (const TuneRun& r : runs) {
      if (!r.finished) continue;
      add_kinds(arm.machines, r.machines);
      floors.push_back(r.unigram_entropy);
    }
    arm.unigram_entropy = seed_stats(floors).mean;
    arm.at_entropy = std::isfinite(arm.unigram_entropy) && std::isfinite(arm.confirm_mean) &&
                     arm.confirm_mean >= arm.unigram_entropy - kAtEntropyNats;
  }
  // Verdicts per rung, corrected over the rung's arms; the machines of each rung's confirm runs.
  s.rung_machines.assign(s.rungs.size(), {});
  for (size_t r = 0; r < s.rungs.size(); ++r) {
    const TuneArmResult& base = s.arms[s.baselines[r]];
    std::vector<TuneVerdict*> decided;
    for (size_t i = 0; i < s.arms.size(); ++i) {
      TuneArmResult& arm = s.arms[i];
      if (arm.rung != r) continue;
      add_kinds(s.rung_machines[r], arm.machines);
      if (i == s.baselines[r]) {
        arm.vs_baseline.verdict = "baseline";
      } else if (arm.confirm_complete && base.confirm_complete) {
        arm.vs_baseline = tune_tests(arm.confirm_values, base.confirm_values);
        decided.push_back(&arm.vs_baseline);
      } else {
        const bool stuck =
            (arm.selected < 0 && arm.search_finished) || (base.selected < 0 && base.search_finished);
        arm.vs_baseline.verdict = stuck ? "none" : "pending";
      }
    }
    tune_decide(decided, t);
    s.mixed_machines = s.mixed_machines || s.rung_machines[r].size() > 1;
  }
  // The transfer audit (two or more searched rungs) and the fitted optimum against the ladder
  // (tune.fit with two or more rungs, searched or not: µP's protocol searches the base rung only
  // and carries v* up, and the fits at the rungs it carries to are what say where their optima sit).
  std::vector<size_t> searched;
  for (size_t r = 0; r < s.rungs.size(); ++r) {
    if (has_ladder && rung_searched(sweep, r)) searched.push_back(r);
  }
  std::vector<std::string> stems;  // the arms across rungs, in order
  for (const TuneArmResult& a : s.arms) {
    if (std::find(stems.begin(), stems.end(), a.stem) == stems.end()) stems.push_back(a.stem);
  }
  if (searched.size() >= 2 || (has_ladder && t.fit && s.rungs.size() >= 2)) {
    for (const std::string& stem : stems) {
      TuneTransfer tr;
      tr.stem = stem;
      std::vector<double> x, y;
      for (size_t r : searched) {
        for (const TuneArmResult& a : s.arms) {
          if (a.stem != stem || a.rung != r) continue;
          tr.rungs.push_back(a.rung_value);
          tr.selected.push_back(a.selected >= 0 ? t.numbers[static_cast<size_t>(a.selected)] : kNaN);
          tr.at_edge.push_back(a.at_edge);
          const double rung = ladder_number(a.rung_value);
          if (a.selected >= 0 && rung > 0) {
            x.push_back(std::log2(rung));
            y.push_back(std::log2(tr.selected.back()));
          }
        }
      }
      tr.slope = least_squares_slope(x, y);
      std::vector<const TuneArmResult*> numeric;  // fitted, at a numeric rung: the slope's cells
      for (const TuneArmResult& a : s.arms) {
        if (a.stem != stem || !std::isfinite(a.fitted)) continue;
        tr.fit_rungs.push_back(a.rung_value);
        tr.fitted.push_back(a.fitted);
        tr.fitted_low.push_back(a.fitted_low);
        tr.fitted_high.push_back(a.fitted_high);
        if (ladder_number(a.rung_value) > 0) numeric.push_back(&a);
      }
      // Smallest rung first, whatever the file's order: log2_ratio is largest over smallest.
      std::stable_sort(numeric.begin(), numeric.end(), [](const TuneArmResult* p, const TuneArmResult* q) {
        return ladder_number(p->rung_value) < ladder_number(q->rung_value);
      });
      std::vector<double> fx;
      std::vector<std::vector<double>> brackets;
      std::vector<std::vector<std::vector<double>>> runs;
      for (const TuneArmResult* a : numeric) {
        fx.push_back(std::log2(ladder_number(a->rung_value)));
        brackets.push_back(a->fit_x);
        runs.push_back(a->fit_y);
        tr.paired_rungs.push_back(a->rung_value);
      }
      tr.fitted_paired = fitted_slope(fx, brackets, runs);
      tr.fitted_slope = tr.fitted_paired.slope;  // through each rung's fitted optimum (all seeds)
      // Larger is better at the first searched rung's selection, rung against rung.
      const TuneArmResult* prev = nullptr;
      int v0 = -1;
      for (size_t r : searched) {
        for (const TuneArmResult& a : s.arms) {
          if (a.stem != stem || a.rung != r) continue;
          if (!prev) {
            v0 = a.selected;
          } else if (v0 >= 0 && static_cast<size_t>(v0) < a.search_curves.size() &&
                     static_cast<size_t>(v0) < prev->search_curves.size()) {
            TuneOrdered o;
            o.smaller = prev->rung_value;
            o.larger = a.rung_value;
            std::map<int64_t, double> small(prev->search_curves[static_cast<size_t>(v0)].begin(),
                                            prev->search_curves[static_cast<size_t>(v0)].end());
            for (const auto& [step, v] : a.search_curves[static_cast<size_t>(v0)]) {
              const auto it = small.find(step);
              if (step == 0 || it == small.end()) continue;
              ++o.evals;
              if (o.first_not_below < 0 && !(v < it->second)) o.first_not_below = step;
            }
            tr.ordered.push_back(o);
          }
          prev = &a;
        }
      }
      if (v0 >= 0) tr.ordered_value = t.numbers[static_cast<size_t>(v0)];
      s.transfer.push_back(tr);
    }
  }
  // Larger is better on the confirm seeds: every ladder, each arm rung against rung.
  if (has_ladder && s.rungs.size() >= 2) {
    for (const std::string& stem : stems) {
      std::vector<const TuneArmResult*> at(s.rungs.size(), nullptr);
      for (const TuneArmResult& a : s.arms) {
        if (a.stem == stem) at[a.rung] = &a;
      }
      std::vector<std::pair<size_t, size_t>> pairs;
      for (size_t r = 1; r < at.size(); ++r) pairs.emplace_back(r - 1, r);
      if (at.size() >= 3) pairs.emplace_back(0, at.size() - 1);
      const size_t first = s.size_steps.size();
      std::vector<bool> complete;
      for (const auto& [i, j] : pairs) {
        if (!at[i] || !at[j]) continue;
        TuneSizeStep st;
        st.stem = stem;
        st.smaller = at[i]->rung_value;
        st.larger = at[j]->rung_value;
        st.at_entropy = at[i]->at_entropy && at[j]->at_entropy;
        complete.push_back(at[i]->confirm_complete && at[j]->confirm_complete);
        if (complete.back()) st.v = tune_tests(at[j]->confirm_values, at[i]->confirm_values);
        s.size_steps.push_back(st);
      }
      std::vector<TuneVerdict*> decided;
      for (size_t k = first; k < s.size_steps.size(); ++k) {
        if (complete[k - first]) decided.push_back(&s.size_steps[k].v);
      }
      tune_decide(decided, t);
    }
  }
  return s;
}

// "Δ [95 % interval]" at dec decimals ("-" without a Δ).
static std::string delta_cell(const TTest& d, int dec) {
  if (!std::isfinite(d.delta)) return "-";
  return fmt::format("{:+.{}f}", d.delta, dec) +
         (d.bounded() ? fmt::format(" [{:+.{}f}, {:+.{}f}]", d.ci95_low, dec, d.ci95_high, dec) : " [unbounded]");
}

// "54 % (128: 30 %, 256: 30 %)": the share of resamples with some rung at its bracket's end, and
// each rung's own share where it is above 0.
static std::string edge_cell(const FittedSlope& f, const std::vector<std::string>& rungs) {
  if (!std::isfinite(f.edge_share)) return "-";
  std::string by_rung;
  for (size_t r = 0; r < f.rung_edge_share.size() && r < rungs.size(); ++r) {
    if (f.rung_edge_share[r] > 0) {
      by_rung += fmt::format("{}{}: {:.0f} %", by_rung.empty() ? "" : ", ", rungs[r], 100 * f.rung_edge_share[r]);
    }
  }
  return fmt::format("{:.0f} %", 100 * f.edge_share) + (by_rung.empty() ? "" : " (" + by_rung + ")");
}

// The fitted optimum against the ladder (tune.fit with two or more fitted rungs): per arm, the slope
// and log2(largest / smallest rung's) with their paired-resample intervals (fitted_slope()).
static std::string fitted_slope_lines(const std::vector<TuneTransfer>& transfer, const std::string& ladder) {
  std::string out = fmt::format(
      "Fitted optimum against {0}: the least-squares slope of log2 (fitted optimum) against log2 {0} over the "
      "rungs with a fit, and log2 of the largest such rung's optimum over the smallest's, each with its 95 % "
      "interval over bootstrap resamples of the confirm seeds drawn alike at every rung (paired: every rung ran "
      "the same seeds; each bracket taken as fixed); edge: the share of resamples in which some rung's minimum "
      "sat at an end of its bracket, and in brackets each such rung's own share (there the interval is partly "
      "the bracket's, not the seeds')\n\n"
      "| arm | rungs | slope [95 % interval] | log2 largest / smallest [95 % interval] | edge |\n"
      "|---|---|---:|---:|---:|\n",
      ladder);
  auto with_interval = [](double v, double low, double high) {
    if (!std::isfinite(v)) return std::string("-");
    return fmt::format("{:+.2f}", v) +
           (std::isfinite(low) ? fmt::format(" [{:+.2f}, {:+.2f}]", low, high) : std::string());
  };
  for (const TuneTransfer& tr : transfer) {
    const FittedSlope& f = tr.fitted_paired;
    std::string rungs;
    for (const std::string& r : tr.paired_rungs) rungs += (rungs.empty() ? "" : ", ") + r;
    out += fmt::format("| {} | {} | {} | {} | {} |\n", tr.stem.empty() ? "(all)" : tr.stem,
                       rungs.empty() ? "-" : rungs, with_interval(f.slope, f.low, f.high),
                       with_interval(f.log2_ratio, f.ratio_low, f.ratio_high),
                       edge_cell(f, tr.paired_rungs));
  }
  return out + "\n";
}

std::string tune_markdown(const TuneSummary& s) {
  const SweepTune& t = s.tune;
  const std::string metric = tune_metric_name(t.metric);
  const bool ladder = !t.ladder.empty();
  const TuneArmResult& base0 = s.arms[s.baselines[0]];
  const std::string base_name = base0.stem.empty() ? "baseline" : base0.stem;
  const char* test = t.test == TestKind::kPaired ? "the paired t test over the confirm seeds (df n - 1)"
                                                 : "Welch's t (Welch-Satterthwaite df)";
  std::string out = fmt::format("## Tuned comparison: {} per arm, by {}\n\n", t.key, metric);
  const bool any_searched =
      std::any_of(s.arms.begin(), s.arms.end(), [](const TuneArmResult& a) { return a.searched; });
  const std::string search =
      any_searched
          ? fmt::format("Search: every arm{} at {} = {} with seeds {}; m(v) = mean {} over the search seeds, a "
                        "failed or non-finite run counted as l0 (the arm's mean step-0 eval loss); selected = "
                        "argmin m(v) (ties: the smaller value); edge: the selected value is the first or last of "
                        "the grid (widen it); sensitivity = mean over v of (min(m(v), l0) - m(selected)).",
                        ladder ? " at each searched rung" : "", t.key, list(t.values), list(t.seeds), metric)
          : fmt::format("Search: none; every arm runs at the {} tune.given names for it, one of {} (Given, "
                        "below).",
                        t.key, list(t.values));
  out += fmt::format(
      "{} Confirm: every arm{} at its selected value with the "
      "fresh seeds {}; mean ± sample std (n). Δ = confirm mean - the baseline's ({}{}), its 95 % interval "
      "and p (two-sided) from {}; p_adj: {}; verdict better / worse when the interval lies below / above 0 "
      "and p_adj < 0.05, {}. mde: the smallest |Δ| this test detects with 80 % power (a tie says nothing "
      "about differences below it). The intervals are not adjusted for the number of arms.\n\n",
      search, ladder ? " at each rung" : "", list(t.confirm_seeds), base_name, ladder ? " at the same rung" : "", test,
      t.correction == Correction::kHolm ? "Holm's step-down correction over the arms against the baseline"
                                        : "p (no correction)",
      t.margin > 0 ? fmt::format("equivalent when the 90 % interval lies inside ±{} (two one-sided tests at 5 %), "
                                 "else inconclusive",
                                 t.margin)
                   : "else tie");
  if (ladder) {
    std::vector<std::string> searched;
    for (size_t r = 0; r < s.rungs.size(); ++r) {
      bool any = false;
      for (const auto& a : s.arms) any = any || (a.rung == r && a.searched);
      if (any) searched.push_back(s.rungs[r]);
    }
    out += fmt::format(
        "Ladder: {} = {}, searched at {}; at any other rung an arm runs at the value it selected at the "
        "nearest searched rung before ({}): `from X` in the table.\n\n",
        t.ladder, list(s.rungs), searched.empty() ? std::string("none") : list(searched),
        t.given.empty() ? "the first searched rung when none comes before"
                        : "its given value when none comes before");
  }
  if (!t.given.empty()) {
    out += "Given: where no searched rung comes before it, an arm runs at the value tune.given names for it, "
           "chosen outside this sweep (`given` in the table; no search of its own here, so no edge and no "
           "sensitivity).\n\n";
  }
  for (size_t r = 0; r < s.rungs.size(); ++r) {
    if (s.rung_machines[r].size() > 1) {
      out += fmt::format(
          "**Machines mixed{}**: the confirm runs come from {} kinds of machine ({}); float differences "
          "between machines grow over a run near a stability cliff, so these verdicts mix two effects.\n\n",
          ladder ? " at " + t.ladder + " = " + s.rungs[r] : "", s.rung_machines[r].size(),
          sweep_yaml::join(s.rung_machines[r], "; "));
    }
  }
  for (size_t r = 0; r < s.rungs.size(); ++r) {
    if (ladder) out += fmt::format("### {} = {}\n\n", t.ladder, s.rungs[r]);
    out += fmt::format(
        "| arm | selected {} | edge | sensitivity | confirm mean ± std (n) | Δ [95 % interval] | p | p_adj | mde "
        "| verdict |\n",
        t.key);
    out += "|---|---:|---|---:|---:|---:|---:|---:|---:|---|\n";
    for (const TuneArmResult& a : s.arms) {
      if (a.rung != r) continue;
      const TuneVerdict& v = a.vs_baseline;
      const TTest& d = v.deciding(t.test);
      std::string confirm = "-";
      if (a.confirm_n > 0) {
        confirm = cell_number(a.confirm_mean) + (std::isfinite(a.confirm_std) ? " ± " + cell_number(a.confirm_std) : "") +
                  fmt::format(" ({}{})", a.confirm_n,
                              a.confirm_complete ? "" : fmt::format(" of {}", t.confirm_seeds.size()));
      }
      const int dec = interval_digits(d);
      const std::string delta = delta_cell(d, dec);
      std::string selected = a.selected >= 0 ? t.values[static_cast<size_t>(a.selected)] : "-";
      if (a.transferred && a.selected >= 0) selected += a.given ? " given" : " from " + a.from_rung;
      const std::string name = (ladder ? a.stem : a.name).empty() ? "(all)" : (ladder ? a.stem : a.name);
      out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", name, selected,
                         a.at_edge ? "edge" : "", cell_number(a.sensitivity), confirm, delta, cell_number(d.p, "{:.2g}"),
                         cell_number(v.p_adj, "{:.2g}"), std::isfinite(v.mde) ? fmt::format("{:.{}f}", v.mde, dec) : "-",
                         v.verdict + (a.at_entropy ? " (learned nothing: at the unigram entropy)" : ""));
    }
    out += "\n";
  }
  if (!s.transfer.empty() && s.transfer[0].rungs.size() >= 2) {
    out += fmt::format("Transfer audit: the value each arm selected at each searched rung, and the least-squares "
                       "slope of log2 {} against log2 {} (about -1 where the optimum falls in proportion; about 0 "
                       "where it transfers)\n\n| arm |",
                       t.key, t.ladder);
    std::string rule = "|---|";
    for (const auto& rung : s.transfer[0].rungs) {
      out += " " + t.ladder + " = " + rung + " |";
      rule += "---:|";
    }
    out += " slope |\n" + rule + "---:|\n";
    for (const TuneTransfer& tr : s.transfer) {
      out += "| " + (tr.stem.empty() ? std::string("(all)") : tr.stem) + " |";
      for (size_t i = 0; i < tr.selected.size(); ++i) {
        out += " " + cell_number(tr.selected[i], "{:g}") + (tr.at_edge[i] ? " (edge)" : "") + " |";
      }
      out += " " + cell_number(tr.slope, "{:+.2f}") + " |\n";
    }
    out += "\n";
    out += fmt::format("Larger is better? Each arm at the value it selected at its first searched rung (the rate a "
                       "transfer carries), each searched rung against the one before it: is the larger one's val loss "
                       "(mean over the search seeds) below at every evaluation after step 0?\n\n");
    for (const TuneTransfer& tr : s.transfer) {
      if (tr.ordered.empty()) continue;
      out += "- " + (tr.stem.empty() ? std::string("(all)") : tr.stem) + " at " + cell_number(tr.ordered_value, "{:g}") + ":";
      for (const TuneOrdered& o : tr.ordered) {
        out += fmt::format(" {} -> {} {};", o.smaller, o.larger,
                           o.evals == 0                ? "no common evaluation"
                           : o.first_not_below < 0 ? fmt::format("below at all {}", o.evals)
                                                     : fmt::format("not below at step {}", o.first_not_below));
      }
      out.back() = '\n';
    }
    out += "\n";
  }
  if (!s.size_steps.empty()) {
    out += fmt::format(
        "Larger is better on the confirm seeds? Each arm's confirm runs at a rung against its runs at the rung "
        "before it{}, each at the value the arm ran at there: Δ = larger - smaller from {}, its 95 % interval, "
        "p_adj ({} over the arm's pairs), mde and verdict (better: the larger model's {} is lower)\n\n"
        "| arm | smaller -> larger | Δ [95 % interval] | p | p_adj | mde | verdict |\n"
        "|---|---|---:|---:|---:|---:|---|\n",
        s.rungs.size() >= 3 ? " and the last rung against the first" : "", test,
        t.correction == Correction::kHolm ? "Holm's correction" : "no correction", metric);
    for (const TuneSizeStep& st : s.size_steps) {
      const TTest& d = st.v.deciding(t.test);
      const int dec = interval_digits(d);
      const std::string delta = delta_cell(d, dec);
      out += fmt::format("| {} | {} -> {} | {} | {} | {} | {} | {} |\n", st.stem.empty() ? "(all)" : st.stem,
                         st.smaller, st.larger, delta, cell_number(d.p, "{:.2g}"), cell_number(st.v.p_adj, "{:.2g}"),
                         std::isfinite(st.v.mde) ? fmt::format("{:.{}f}", st.v.mde, dec) : "-",
                         st.v.verdict + (st.at_entropy ? " (learned nothing at either size)" : ""));
    }
    out += "\n";
  }
  if (t.fit) {
    out += fmt::format(
        "Fitted optimum (tune.fit quadratic): per cell, the minimum over [v*-, v*+] (the grid values either side "
        "of the selected one) of the parabola through the confirm runs' seed means of {} against log2 {}, with "
        "its 95 % bootstrap interval over the confirm seeds; edge: the minimum is at an end of that bracket (the "
        "metric still falls beyond it); - where the selected value is at the grid's edge or runs are not finished\n\n",
        metric, t.key);
    if (t.fit_extend > 0) {
      out += fmt::format(
          "With tune.fit_extend {0}: while the lowest confirm mean of a cell's bracket sat at an end of it, the "
          "confirm seeds also ran at the next grid value beyond that end (at most {0} past v*- and past v*+); the "
          "bracket is then the lowest value and the two either side (at the grid's or the budget's end: the "
          "three values ending there); walking: the runs at that value are not all finished\n\n"
          "| cell | selected | bracket | fitted [95 % interval] |\n|---|---:|---|---:|\n",
          t.fit_extend);
    } else {
      out += "| cell | selected | fitted [95 % interval] |\n|---|---:|---:|\n";
    }
    for (const TuneArmResult& a : s.arms) {
      const std::string sel = a.selected >= 0 ? t.values[static_cast<size_t>(a.selected)] : "-";
      std::string fit = "-";
      if (std::isfinite(a.fitted)) {
        fit = cell_number(a.fitted, "{:.3g}") +
              (std::isfinite(a.fitted_low)
                   ? " [" + cell_number(a.fitted_low, "{:.3g}") + ", " + cell_number(a.fitted_high, "{:.3g}") + "]"
                   : "") +
              (a.fitted_at_edge ? " (edge)" : "");
      }
      if (t.fit_extend > 0) {
        const int c = a.fit_centre;
        const std::string bracket =
            c > 0 && c + 1 < static_cast<int>(t.values.size())
                ? t.values[static_cast<size_t>(c - 1)] + " .. " + t.values[static_cast<size_t>(c + 1)]
                : a.fit_next >= 0 ? "walking: " + t.values[static_cast<size_t>(a.fit_next)] : "-";
        out += fmt::format("| {} | {} | {} | {} |\n", a.name.empty() ? "(all)" : a.name, sel, bracket, fit);
      } else {
        out += fmt::format("| {} | {} | {} |\n", a.name.empty() ? "(all)" : a.name, sel, fit);
      }
    }
    out += "\n";
    if (!s.transfer.empty()) out += fitted_slope_lines(s.transfer, t.ladder);
  }
  if (!any_searched) return out;  // every value given: no search grid
  out += fmt::format(
      "Search grid: m(v), mean {} over the search seeds (* the selected value; - runs not finished)\n\n| arm | l0 |",
      metric);
  std::string rule = "|---|---:|";
  for (const auto& v : t.values) {
    out += " " + v + " |";
    rule += "---:|";
  }
  out += "\n" + rule + "\n";
  for (const TuneArmResult& a : s.arms) {
    if (!a.searched) continue;
    // Enough digits to show the order of the grid's lowest two values.
    int dec = 4;
    std::vector<double> sorted;
    for (double m : a.search) {
      if (std::isfinite(m)) sorted.push_back(m);
    }
    std::sort(sorted.begin(), sorted.end());
    while (sorted.size() >= 2 && sorted[0] != sorted[1] && dec < 8 &&
           fmt::format("{:.{}f}", sorted[0], dec) == fmt::format("{:.{}f}", sorted[1], dec)) {
      ++dec;
    }
    out += fmt::format("| {} | {} |", a.name.empty() ? "(all)" : a.name, cell_number(a.l0));
    for (size_t v = 0; v < a.search.size(); ++v) {
      out += " " + (std::isfinite(a.search[v]) ? fmt::format("{:.{}f}", a.search[v], dec) : "-") +
             (static_cast<int>(v) == a.selected ? "*" : "") + " |";
    }
    out += "\n";
  }
  return out;
}

namespace {

JsonObject ttest_json(const TTest& t) {
  JsonObject j;
  j.add("delta", t.delta);
  if (t.bounded()) {
    j.add("ci", std::vector<double>{t.ci95_low, t.ci95_high});
  } else {
    j.add_raw("ci", "null");
  }
  j.add("p", t.p).add("df", t.df);
  return j;
}

// A ladder value as JSON: the number where it is one, else the text.
void add_rung(JsonObject& j, const std::string& key, const std::string& text) {
  const double x = ladder_number(text);
  if (std::isfinite(x)) {
    j.add(key, x);
  } else {
    j.add(key, text);
  }
}

}  // namespace

std::string tune_json(const TuneSummary& s) {
  const SweepTune& t = s.tune;
  const bool ladder = !t.ladder.empty();
  JsonObject baseline;
  for (const auto& [k, v] : t.baseline) baseline.add(k, v);
  std::vector<JsonObject> arms;
  for (const TuneArmResult& a : s.arms) {
    JsonObject axes;
    for (const auto& [k, v] : a.axes) axes.add(k, v);
    JsonObject arm;
    arm.add("name", a.name).add("stem", a.stem).add("axes", axes);
    if (ladder) add_rung(arm, "rung", a.rung_value);
    arm.add("transferred", a.transferred);
    if (a.transferred && !a.given) add_rung(arm, "from_rung", a.from_rung);
    if (a.transferred && a.given) arm.add_raw("from_rung", "null");
    arm.add("given", a.given);
    arm.add("values", t.numbers).add("search", a.searched ? a.search : std::vector<double>{});
    if (a.selected >= 0) {
      arm.add("selected", t.numbers[static_cast<size_t>(a.selected)]);
    } else {
      arm.add_raw("selected", "null");
    }
    arm.add("at_edge", a.at_edge).add("sensitivity", a.sensitivity).add("l0", a.l0);
    arm.add("confirm", JsonObject()
                           .add("mean", a.confirm_mean)
                           .add("std", a.confirm_std)
                           .add("n", a.confirm_n)
                           .add("values", a.confirm_values)
                           .add("complete", a.confirm_complete)
                           .add("machines", a.machines));
    const TuneVerdict& v = a.vs_baseline;
    JsonObject vs = ttest_json(v.welch);  // the Welch fields at the top, as without the paired test
    vs.add("paired", ttest_json(v.paired)).add("test", test_name(t.test)).add("p_adj", v.p_adj).add("mde", v.mde);
    const TTest& d = v.deciding(t.test);
    if (std::isfinite(d.ci90_low)) {
      vs.add("ci90", std::vector<double>{d.ci90_low, d.ci90_high});
    } else {
      vs.add_raw("ci90", "null");
    }
    vs.add("digits", static_cast<int64_t>(interval_digits(d))).add("verdict", v.verdict);
    arm.add("unigram_entropy", a.unigram_entropy).add("at_entropy", a.at_entropy);
    if (t.fit) {
      // The points behind the fit: its bracket's three values and the confirm seeds' mean at each
      // (the figures draw them where a rung ran no search).
      std::vector<double> points, means;
      for (size_t i = 0; i < a.fit_x.size(); ++i) {
        points.push_back(std::exp2(a.fit_x[i]));
        double sum = 0;
        for (const auto& seed : a.fit_y) sum += seed[i];
        means.push_back(sum / static_cast<double>(a.fit_y.size()));
      }
      arm.add("fit", JsonObject()
                         .add("value", a.fitted)
                         .add("low", a.fitted_low)
                         .add("high", a.fitted_high)
                         .add("at_edge", a.fitted_at_edge)
                         .add("points", points)
                         .add("means", means));
      if (t.fit_extend > 0) {
        const int c = a.fit_centre;
        const bool inside = c > 0 && c + 1 < static_cast<int>(t.numbers.size());
        arm.add("fit_centre", inside ? t.numbers[static_cast<size_t>(c)] : std::nan(""))
            .add("fit_next", a.fit_next >= 0 ? t.numbers[static_cast<size_t>(a.fit_next)] : std::nan(""));
      }
    }
    arm.add("vs_baseline", vs);
    arms.push_back(arm);
  }
  JsonObject j;
  j.add("key", t.key)
      .add("metric", tune_metric_name(t.metric))
      .add("values", t.numbers)
      .add("seeds", t.seeds)
      .add("confirm_seeds", t.confirm_seeds)
      .add("baseline", baseline)
      .add("test", test_name(t.test))
      .add("margin", t.margin)
      .add("correction", correction_name(t.correction))
      .add("fit", t.fit ? "quadratic" : "none");
  if (t.fit_extend > 0) j.add("fit_extend", static_cast<int64_t>(t.fit_extend));
  if (ladder) {
    j.add("ladder", t.ladder).add("rungs", s.rungs);
    std::vector<std::string> searched;
    for (size_t r = 0; r < s.rungs.size(); ++r) {
      if (std::any_of(s.arms.begin(), s.arms.end(), [&](const auto& a) { return a.rung == r && a.searched; }))
        searched.push_back(s.rungs[r]);
    }
    j.add("search_at", searched);
  }
  if (!t.given.empty()) {
    std::vector<JsonObject> given;
    for (const SweepTune::Given& g : t.given) {
      JsonObject o;
      for (const auto& [k, v] : g.arm) o.add(k, v);
      const int v = given_index(t, g.arm);
      if (v >= 0) o.add("value", t.numbers[static_cast<size_t>(v)]);
      given.push_back(o);
    }
    j.add("given", given);
  }
  std::vector<JsonObject> machines;
  for (size_t r = 0; r < s.rungs.size(); ++r) {
    JsonObject m;
    if (ladder) add_rung(m, "rung", s.rungs[r]);
    m.add("kinds", s.rung_machines[r]);
    machines.push_back(m);
  }
  j.add("machines", machines).add("mixed_machines", s.mixed_machines);
  std::vector<JsonObject> transfer;
  for (const TuneTransfer& tr : s.transfer) {
    std::vector<JsonObject> at;
    for (size_t i = 0; i < tr.rungs.size(); ++i) {
      JsonObject e;
      add_rung(e, "rung", tr.rungs[i]);
      e.add("selected", tr.selected[i]).add("at_edge", static_cast<bool>(tr.at_edge[i]));
      at.push_back(e);
    }
    JsonObject tj;
    tj.add("stem", tr.stem).add("searched", at).add("slope", tr.slope);
    std::vector<JsonObject> ordered;
    for (const TuneOrdered& o : tr.ordered) {
      JsonObject e;
      add_rung(e, "smaller", o.smaller);
      add_rung(e, "larger", o.larger);
      e.add("evals", o.evals).add("first_not_below", o.first_not_below);
      ordered.push_back(e);
    }
    tj.add("ordered_value", tr.ordered_value).add("ordered", ordered);
    if (t.fit) {
      std::vector<JsonObject> fit;
      for (size_t i = 0; i < tr.fit_rungs.size(); ++i) {
        JsonObject e;
        add_rung(e, "rung", tr.fit_rungs[i]);
        e.add("value", tr.fitted[i]).add("low", tr.fitted_low[i]).add("high", tr.fitted_high[i]);
        fit.push_back(e);
      }
      const FittedSlope& fp = tr.fitted_paired;
      tj.add("fitted", fit).add("fitted_slope", tr.fitted_slope);
      tj.add("fitted_slope_low", fp.low).add("fitted_slope_high", fp.high);
      tj.add("fitted_log2_ratio", fp.log2_ratio).add("fitted_log2_ratio_low", fp.ratio_low);
      tj.add("fitted_log2_ratio_high", fp.ratio_high).add("fitted_edge_share", fp.edge_share);
      std::vector<JsonObject> by_rung;
      for (size_t r = 0; r < fp.rung_edge_share.size() && r < tr.paired_rungs.size(); ++r) {
        JsonObject e;
        add_rung(e, "rung", tr.paired_rungs[r]);
        e.add("share", fp.rung_edge_share[r]);
        by_rung.push_back(e);
      }
      tj.add("fitted_edge_share_by_rung", by_rung);
    }
    transfer.push_back(tj);
  }
  if (ladder) {
    j.add("transfer", transfer);
    std::vector<JsonObject> steps;
    for (const TuneSizeStep& st : s.size_steps) {
      JsonObject e;
      e.add("stem", st.stem);
      add_rung(e, "smaller", st.smaller);
      add_rung(e, "larger", st.larger);
      const TTest& d = st.v.deciding(t.test);
      e.add("test", test_name(t.test)).add("delta", d.delta).add("p", d.p).add("p_adj", st.v.p_adj);
      if (d.bounded()) {
        e.add("ci95", std::vector<double>{d.ci95_low, d.ci95_high});
      } else {
        e.add_raw("ci95", "null");
      }
      e.add("n", d.n).add("mde", st.v.mde).add("verdict", st.v.verdict).add("at_entropy", st.at_entropy);
      steps.push_back(e);
    }
    j.add("size_steps", steps);
  }
  return j.add("search_complete", s.search_complete).add("arms", arms).str();
}

}  // namespace normlab
