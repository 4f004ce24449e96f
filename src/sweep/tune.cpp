#include "sweep/tune.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "core/fs.h"
#include "core/json.h"
#include "metrics/compare.h"
#include "metrics/records.h"
#include "sweep/summary.h"

namespace normlab {
namespace {
namespace fs = std::filesystem;

const double kNaN = std::nan("");

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
  for (const EvalRecord& e : records.eval) {
    if (e.step == 0) r.step0_val = e.val_loss;  // a resumed run does not repeat it; the last wins
  }
  return r;
}

template <class T>
std::string list(const std::vector<T>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + fmt::format("{}", v[i]);
  return "[" + out + "]";
}

std::string number(double v, const char* format = "{:.4f}") {
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

TuneVerdict tune_verdict(const std::vector<double>& arm, const std::vector<double>& baseline) {
  TuneVerdict v;
  const SeedStats a = seed_stats(arm), b = seed_stats(baseline);
  v.delta = a.mean - b.mean;
  v.verdict = "tie";
  if (a.n < 2 || b.n < 2) return v;  // no variance estimate: the interval is unbounded
  const double n1 = static_cast<double>(a.n), n2 = static_cast<double>(b.n);
  const double q1 = a.std * a.std / n1, q2 = b.std * b.std / n2;
  const double se = std::sqrt(q1 + q2);
  if (se == 0) {
    v.p = v.delta != 0 ? 0 : 1;
    v.ci_low = v.ci_high = v.delta;
  } else {
    v.df = (q1 + q2) * (q1 + q2) / (q1 * q1 / (n1 - 1) + q2 * q2 / (n2 - 1));
    v.p = 2 * student_t_cdf(-std::fabs(v.delta / se), v.df);
    const double half = student_t_quantile(0.975, v.df) * se;
    v.ci_low = v.delta - half;
    v.ci_high = v.delta + half;
  }
  if (v.ci_high < 0) v.verdict = "better";
  if (v.ci_low > 0) v.verdict = "worse";
  return v;
}

TuneSummary summarise_tune(const Sweep& sweep, const std::string& sweep_dir) {
  TuneSummary s;
  s.tune = *sweep.tune;
  const SweepTune& t = s.tune;
  const auto arms = tune_arms(sweep);
  const auto search_points = expand_sweep(sweep);
  s.search_complete = true;
  for (const SweepPoint& arm_point : arms) {
    TuneArmResult arm;
    arm.name = arm_point.name;
    arm.axes = arm_point.overrides;
    std::vector<std::vector<TuneRun>> search(t.values.size());
    for (const SweepPoint& p : search_points) {
      if (p.arm != arm_point.arm) continue;
      const size_t v =
          std::find(t.values.begin(), t.values.end(), p.overrides.back().second) - t.values.begin();
      search[v].push_back(read_tune_run(sweep_dir, p, t.metric));
    }
    tune_search(search, arm);
    s.search_complete = s.search_complete && arm.search_finished;
    const bool match = std::all_of(t.baseline.begin(), t.baseline.end(), [&](const auto& kv) {
      return std::find(arm.axes.begin(), arm.axes.end(), kv) != arm.axes.end();
    });
    if (match) s.baseline = s.arms.size();
    s.arms.push_back(arm);
  }
  // Confirm runs exist only for arms with a selection (their names carry v*).
  const auto confirm = confirm_points(sweep, s.selected());
  for (size_t i = 0; i < s.arms.size(); ++i) {
    std::vector<TuneRun> runs;
    for (const SweepPoint& p : confirm) {
      if (p.arm == i) runs.push_back(read_tune_run(sweep_dir, p, t.metric));
    }
    tune_confirm(runs, s.arms[i]);
  }
  const TuneArmResult& base = s.arms[s.baseline];
  for (size_t i = 0; i < s.arms.size(); ++i) {
    TuneArmResult& arm = s.arms[i];
    if (i == s.baseline) {
      arm.vs_baseline.verdict = "baseline";
    } else if (arm.confirm_complete && base.confirm_complete) {
      arm.vs_baseline = tune_verdict(arm.confirm_values, base.confirm_values);
    } else {
      const bool stuck =
          (arm.selected < 0 && arm.search_finished) || (base.selected < 0 && base.search_finished);
      arm.vs_baseline.verdict = stuck ? "none" : "pending";
    }
  }
  return s;
}

std::string tune_markdown(const TuneSummary& s) {
  const SweepTune& t = s.tune;
  const std::string metric = tune_metric_name(t.metric);
  const std::string base_name =
      s.arms[s.baseline].name.empty() ? "baseline" : s.arms[s.baseline].name;
  std::string out = fmt::format("## Tuned comparison: {} per arm, by {}\n\n", t.key, metric);
  out += fmt::format(
      "Search: every arm at {} = {} with seeds {}; m(v) = mean {} over the search seeds, a failed "
      "or "
      "non-finite run counted as l0 (the arm's mean step-0 eval loss); selected = argmin m(v) "
      "(ties: "
      "the smaller value); edge: the selected value is the first or last of the grid (widen it); "
      "sensitivity = mean over v of (min(m(v), l0) - m(selected)). Confirm: every arm at its "
      "selected value with the fresh seeds {}; mean ± sample std (n). Δ = confirm mean - the "
      "baseline's ({}), 95 % interval from Welch's t (Welch-Satterthwaite df), p two-sided; "
      "verdict better / worse when the interval lies below / above 0, else tie.\n\n",
      t.key, list(t.values), list(t.seeds), metric, list(t.confirm_seeds), base_name);
  out += fmt::format(
      "| arm | selected {} | edge | sensitivity | confirm mean ± std (n) | Δ [95 % interval] | p | "
      "verdict |\n",
      t.key);
  out += "|---|---:|---|---:|---:|---:|---:|---|\n";
  for (const TuneArmResult& a : s.arms) {
    const TuneVerdict& v = a.vs_baseline;
    std::string confirm = "-";
    if (a.confirm_n > 0) {
      confirm =
          number(a.confirm_mean) +
          (std::isfinite(a.confirm_std) ? " ± " + number(a.confirm_std) : "") +
          fmt::format(" ({}{})", a.confirm_n,
                      a.confirm_complete ? "" : fmt::format(" of {}", t.confirm_seeds.size()));
    }
    std::string delta = "-";
    if (std::isfinite(v.delta)) {
      delta = fmt::format("{:+.4f}", v.delta) +
              (std::isfinite(v.ci_low) ? fmt::format(" [{:+.4f}, {:+.4f}]", v.ci_low, v.ci_high)
                                       : " [unbounded]");
    }
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                       a.name.empty() ? "(all)" : a.name,
                       a.selected >= 0 ? t.values[a.selected] : "-", a.at_edge ? "edge" : "",
                       number(a.sensitivity), confirm, delta, number(v.p, "{:.3g}"), v.verdict);
  }
  out += fmt::format(
      "\nSearch grid: m(v), mean {} over the search seeds (* the selected value; - runs not "
      "finished)\n\n| arm | l0 |",
      metric);
  std::string rule = "|---|---:|";
  for (const auto& v : t.values) {
    out += " " + v + " |";
    rule += "---:|";
  }
  out += "\n" + rule + "\n";
  for (const TuneArmResult& a : s.arms) {
    out += fmt::format("| {} | {} |", a.name.empty() ? "(all)" : a.name, number(a.l0));
    for (size_t v = 0; v < a.search.size(); ++v) {
      out += " " + number(a.search[v]) + (static_cast<int>(v) == a.selected ? "*" : "") + " |";
    }
    out += "\n";
  }
  return out;
}

std::string tune_json(const TuneSummary& s) {
  const SweepTune& t = s.tune;
  JsonObject baseline;
  for (const auto& [k, v] : t.baseline) baseline.add(k, v);
  std::vector<JsonObject> arms;
  for (const TuneArmResult& a : s.arms) {
    JsonObject axes;
    for (const auto& [k, v] : a.axes) axes.add(k, v);
    JsonObject arm;
    arm.add("name", a.name).add("axes", axes).add("values", t.numbers).add("search", a.search);
    if (a.selected >= 0) {
      arm.add("selected", t.numbers[a.selected]);
    } else {
      arm.add_raw("selected", "null");
    }
    arm.add("at_edge", a.at_edge).add("sensitivity", a.sensitivity).add("l0", a.l0);
    arm.add("confirm", JsonObject()
                           .add("mean", a.confirm_mean)
                           .add("std", a.confirm_std)
                           .add("n", a.confirm_n)
                           .add("values", a.confirm_values)
                           .add("complete", a.confirm_complete));
    const TuneVerdict& v = a.vs_baseline;
    JsonObject vs;
    vs.add("delta", v.delta);
    if (std::isfinite(v.ci_low)) {
      vs.add("ci", std::vector<double>{v.ci_low, v.ci_high});
    } else {
      vs.add_raw("ci", "null");
    }
    vs.add("p", v.p).add("df", v.df).add("verdict", v.verdict);
    arm.add("vs_baseline", vs);
    arms.push_back(arm);
  }
  return JsonObject()
      .add("key", t.key)
      .add("metric", tune_metric_name(t.metric))
      .add("values", t.numbers)
      .add("seeds", t.seeds)
      .add("confirm_seeds", t.confirm_seeds)
      .add("baseline", baseline)
      .add("search_complete", s.search_complete)
      .add("arms", arms)
      .str();
}

}  // namespace normlab
