#include "metrics/compare.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/fs.h"
#include "core/json.h"
#include "metrics/records.h"
#include "metrics/stats.h"

namespace normlab {

namespace {
namespace fs = std::filesystem;

// a != b in any bit, NaN equal to NaN.
bool differs(double a, double b) {
  if (std::isnan(a) && std::isnan(b)) return false;
  return !(a == b) || std::signbit(a) != std::signbit(b);
}

// Keeps the largest difference; a value finite on one side only ranks above every finite
// difference and is reported as NaN (JSON null).
void account(SeriesDiff& d, int64_t step, int64_t index, double a, double b) {
  ++d.compared;
  if (!differs(a, b)) return;
  const bool finite = std::isfinite(a) && std::isfinite(b);
  const double rank = finite ? std::fabs(a - b) : std::numeric_limits<double>::infinity();
  const double held = std::isnan(d.max_abs_diff) ? std::numeric_limits<double>::infinity() : d.max_abs_diff;
  if (d.step >= 0 && !(rank > held)) return;
  d.max_abs_diff = finite ? rank : kNaN;
  d.step = step;
  d.index = index;
  d.a = a;
  d.b = b;
}

PairComparison compare_pair(const RunRecords& a, const RunRecords& b) {
  PairComparison p;
  p.a = a.dir;
  p.b = b.dir;
  p.loss.name = "loss";
  p.val_loss.name = "val_loss";
  std::map<int64_t, const TrainRecord*> b_train;
  for (const auto& t : b.train) b_train[t.step] = &t;
  std::map<std::string, SeriesDiff> layers;
  std::vector<std::string> layer_order;
  for (const auto& ta : a.train) {
    const auto it = b_train.find(ta.step);
    if (it == b_train.end()) continue;
    const TrainRecord& tb = *it->second;
    ++p.common_steps;
    if (differs(ta.loss, tb.loss) && !p.first_divergent_step) p.first_divergent_step = ta.step;
    account(p.loss, ta.step, -1, ta.loss, tb.loss);
    for (const auto& [name, va] : ta.layers) {
      const std::vector<double>* vb = tb.layer(name);
      if (!vb || vb->size() != va.size()) continue;
      auto [pos, fresh] = layers.try_emplace(name);
      if (fresh) {
        pos->second.name = "layers." + name;
        layer_order.push_back(name);
      }
      for (size_t i = 0; i < va.size(); ++i) account(pos->second, ta.step, static_cast<int64_t>(i), va[i], (*vb)[i]);
    }
  }
  std::map<int64_t, double> b_val;
  for (const auto& e : b.eval) b_val[e.step] = e.val_loss;
  for (const auto& e : a.eval) {
    const auto it = b_val.find(e.step);
    if (it != b_val.end()) account(p.val_loss, e.step, -1, e.val_loss, it->second);
  }
  for (const auto& name : layer_order) p.layers.push_back(layers[name]);
  p.identical = p.loss.step < 0 && p.val_loss.step < 0;
  for (const auto& l : p.layers) p.identical = p.identical && l.step < 0;
  return p;
}

// The value of a dotted key in a run's config.yaml, as written there.
std::string config_value(const std::string& run, const std::string& key) {
  const std::string path = (fs::path(run) / "config.yaml").string();
  if (!file_exists(path)) throw UsageError(run + ": no config.yaml to read --by " + key + " from");
  YAML::Node n;
  try {
    n = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw UsageError(fmt::format("{}: {}", path, e.what()));
  }
  std::stringstream ss(key);
  std::string part;
  while (std::getline(ss, part, '.')) {
    if (!n.IsMap() || !n[part]) throw UsageError(fmt::format("{}: --by {}: no such key", path, key));
    n = n[part];
  }
  if (n.IsScalar()) return n.Scalar();
  YAML::Emitter out;
  out << YAML::Flow << n;
  return out.c_str();
}

JsonObject diff_json(const SeriesDiff& d) {
  JsonObject j;
  j.add("compared", d.compared).add("max_abs_diff", d.step < 0 ? 0.0 : d.max_abs_diff);
  if (d.step >= 0) {
    j.add("step", d.step);
    if (d.index >= 0) j.add("index", d.index);
    j.add("a", d.a).add("b", d.b);
  } else {
    j.add_raw("step", "null");
  }
  return j;
}

std::string diff_text(const SeriesDiff& d) {
  if (d.compared == 0) return fmt::format("  {:<24} nothing to compare\n", d.name);
  if (d.step < 0) return fmt::format("  {:<24} identical ({} values)\n", d.name, d.compared);
  const std::string where = d.index >= 0 ? fmt::format("step {}, position {}", d.step, d.index)
                                         : fmt::format("step {}", d.step);
  return fmt::format("  {:<24} max |diff| {:.4g} at {} ({:.6g} vs {:.6g})\n", d.name, d.max_abs_diff, where, d.a, d.b);
}

std::string opt_number(const std::optional<double>& v) { return v ? fmt::format("{:.4g}", *v) : "n/a"; }
}  // namespace

WelchResult welch_t_test(const std::vector<double>& a, const std::vector<double>& b) {
  const double na = static_cast<double>(a.size()), nb = static_cast<double>(b.size());
  const SeedStats sa = seed_stats(a), sb = seed_stats(b);  // the inputs are finite: n = size
  const double ma = sa.mean, mb = sb.mean;
  const double qa = sa.std * sa.std / na, qb = sb.std * sb.std / nb;
  WelchResult r;
  const double se2 = qa + qb;
  if (se2 == 0) {
    r.df = na + nb - 2;
    r.t = ma == mb ? 0 : std::copysign(std::numeric_limits<double>::infinity(), ma - mb);
    r.p = ma == mb ? 1 : 0;
    return r;
  }
  r.t = (ma - mb) / std::sqrt(se2);
  r.df = se2 * se2 / (qa * qa / (na - 1) + qb * qb / (nb - 1));
  r.p = 2 * student_t_cdf(-std::fabs(r.t), r.df);
  return r;
}

Comparison compare_runs(const std::vector<std::string>& args, const std::string& by) {
  Comparison c;
  c.by = by;
  for (const auto& a : args) {
    for (auto& r : run_dirs(a)) c.runs.push_back(std::move(r));
  }
  if (c.runs.size() < 2) throw UsageError("compare: needs at least two runs (a sweep counts as its runs)");
  std::vector<RunRecords> recs;
  for (const auto& r : c.runs) recs.push_back(read_run_with_records(r));
  if (by.empty()) {
    for (size_t i = 1; i < recs.size(); ++i) c.pairs.push_back(compare_pair(recs[0], recs[i]));
    return c;
  }
  for (size_t i = 0; i < recs.size(); ++i) {
    const std::string v = config_value(c.runs[i], by);
    auto it = std::find_if(c.groups.begin(), c.groups.end(), [&](const GroupStats& g) { return g.value == v; });
    if (it == c.groups.end()) {
      c.groups.push_back(GroupStats{});
      it = c.groups.end() - 1;
      it->value = v;
    }
    it->runs.push_back(c.runs[i]);
    const double best = recs[i].derived.best_val_loss;
    it->values.push_back(best);
    int64_t seed = -1 - static_cast<int64_t>(i);  // a run without a seed pairs with nothing
    try {
      seed = std::strtoll(config_value(c.runs[i], "seed").c_str(), nullptr, 10);
    } catch (const UsageError&) {
    }
    it->seeds.push_back(seed);
    if (std::isfinite(best)) {
      it->samples.push_back(best);
    } else {
      ++it->without_value;
    }
  }
  for (auto& g : c.groups) {
    if (g.samples.empty()) continue;
    const SeedStats st = seed_stats(g.samples);
    g.mean = st.mean;
    g.std = st.std;
    if (g.samples.size() > 1) {
      const double n = static_cast<double>(g.samples.size());
      const double half = student_t_quantile(0.975, n - 1) * g.std / std::sqrt(n);
      g.ci_low = g.mean - half;
      g.ci_high = g.mean + half;
    }
  }
  for (size_t i = 0; i < c.groups.size(); ++i) {
    for (size_t j = i + 1; j < c.groups.size(); ++j) {
      const GroupStats &a = c.groups[i], &b = c.groups[j];
      GroupTest t;
      t.a = a.value;
      t.b = b.value;
      t.diff = a.samples.empty() || b.samples.empty() ? kNaN : a.mean - b.mean;
      if (a.samples.size() >= 2 && b.samples.size() >= 2) {
        const WelchResult w = welch_t_test(a.samples, b.samples);
        t.t = w.t;
        t.df = w.df;
        t.p = w.p;
      }
      // Paired where both groups ran the same seeds, each once.
      std::vector<int64_t> sa = a.seeds, sb = b.seeds;
      std::sort(sa.begin(), sa.end());
      std::sort(sb.begin(), sb.end());
      if (sa == sb && std::adjacent_find(sa.begin(), sa.end()) == sa.end()) {
        std::vector<double> va, vb;
        for (size_t k = 0; k < a.seeds.size(); ++k) {
          va.push_back(a.values[k]);
          const size_t m = static_cast<size_t>(std::find(b.seeds.begin(), b.seeds.end(), a.seeds[k]) - b.seeds.begin());
          vb.push_back(b.values[m]);
        }
        t.paired = paired_test(va, vb);
      }
      c.tests.push_back(t);
    }
  }
  std::vector<double> p;
  for (const auto& t : c.tests) p.push_back(t.paired ? t.paired->p : t.p.value_or(kNaN));
  const std::vector<double> adjusted = holm_adjust(p);
  for (size_t i = 0; i < c.tests.size(); ++i) {
    if (!std::isnan(adjusted[i])) c.tests[i].p_adj = adjusted[i];
  }
  return c;
}

std::string comparison_text(const Comparison& c) {
  std::string o;
  if (c.by.empty()) {
    o += fmt::format("reference   {}\n", c.runs[0]);
    for (const auto& p : c.pairs) {
      o += fmt::format("\ncompared    {}\n", p.b);
      o += fmt::format("  {:<24} {}\n", "train steps in both", p.common_steps);
      o += fmt::format("  {:<24} {}\n", "first divergent step",
                       p.first_divergent_step ? std::to_string(*p.first_divergent_step)
                                              : std::string("none: the losses are bit-identical"));
      o += diff_text(p.loss);
      o += diff_text(p.val_loss);
      for (const auto& l : p.layers) o += diff_text(l);
    }
    return o;
  }
  o += fmt::format("best validation loss by {} (runs as samples; 95 % interval of the mean, t distribution)\n", c.by);
  for (const auto& g : c.groups) {
    o += fmt::format("  {:<20} n {:<3} mean {:.5f}  std {}  95% [{}, {}]{}\n", g.value, g.samples.size(),
                     g.samples.empty() ? kNaN : g.mean, opt_number(std::isfinite(g.std) ? std::optional(g.std) : std::nullopt),
                     opt_number(g.ci_low), opt_number(g.ci_high),
                     g.without_value ? fmt::format("  ({} without a finite value)", g.without_value) : "");
  }
  if (!c.tests.empty()) {
    o += "Welch's t-test, two-sided; paired t test over the seeds where two groups ran the same seeds; p_adj: the "
         "paired (else Welch's) p, Holm-adjusted over these tests:\n";
  }
  for (const auto& t : c.tests) {
    o += fmt::format("  {} - {}: diff {:.5f}  t {}  df {}  p {}", t.a, t.b, t.diff, opt_number(t.t), opt_number(t.df),
                     t.p ? fmt::format("{:.3g}", *t.p) : "n/a (fewer than 2 runs in a group)");
    if (t.paired) {
      o += fmt::format("  | paired: n {} diff {:.5f}  95% [{}, {}]  p {}", t.paired->n, t.paired->delta,
                       opt_number(t.paired->bounded() ? std::optional(t.paired->ci95_low) : std::nullopt),
                       opt_number(t.paired->bounded() ? std::optional(t.paired->ci95_high) : std::nullopt),
                       std::isnan(t.paired->p) ? std::string("n/a") : fmt::format("{:.3g}", t.paired->p));
    }
    o += fmt::format("  p_adj {}\n", t.p_adj ? fmt::format("{:.3g}", *t.p_adj) : "n/a");
  }
  return o;
}

std::string comparison_json(const Comparison& c) {
  JsonObject j;
  j.add("runs", c.runs);
  if (c.by.empty()) {
    std::string pairs = "[";
    for (size_t i = 0; i < c.pairs.size(); ++i) {
      const auto& p = c.pairs[i];
      JsonObject pj;
      pj.add("a", p.a).add("b", p.b).add("common_steps", p.common_steps);
      if (p.first_divergent_step) {
        pj.add("first_divergent_step", *p.first_divergent_step);
      } else {
        pj.add_raw("first_divergent_step", "null");
      }
      pj.add("identical", p.identical).add("loss", diff_json(p.loss)).add("val_loss", diff_json(p.val_loss));
      JsonObject layers;
      for (const auto& l : p.layers) layers.add(l.name.substr(7), diff_json(l));
      pj.add("layers", layers);
      pairs += (i ? "," : "") + pj.str();
      if (c.pairs.size() == 1) {  // two runs: the pair's findings at the top level too
        if (p.first_divergent_step) {
          j.add("first_divergent_step", *p.first_divergent_step);
        } else {
          j.add_raw("first_divergent_step", "null");
        }
        j.add("identical", p.identical);
      }
    }
    j.add_raw("pairs", pairs + "]");
    return j.str();
  }
  j.add("by", c.by);
  std::string groups = "[";
  for (size_t i = 0; i < c.groups.size(); ++i) {
    const auto& g = c.groups[i];
    JsonObject gj;
    gj.add("value", g.value).add("runs", g.runs).add("n", static_cast<int64_t>(g.samples.size()))
        .add("without_value", g.without_value).add("mean", g.samples.empty() ? kNaN : g.mean).add("std", g.std)
        .add("ci95_low", g.ci_low.value_or(kNaN)).add("ci95_high", g.ci_high.value_or(kNaN));
    groups += (i ? "," : "") + gj.str();
  }
  j.add_raw("groups", groups + "]");
  std::string tests = "[";
  for (size_t i = 0; i < c.tests.size(); ++i) {
    const auto& t = c.tests[i];
    JsonObject tj;
    tj.add("a", t.a).add("b", t.b).add("diff", t.diff).add("t", t.t.value_or(kNaN)).add("df", t.df.value_or(kNaN))
        .add("p_value", t.p.value_or(kNaN));
    if (t.paired) {
      JsonObject pj;
      pj.add("n", t.paired->n).add("diff", t.paired->delta).add("df", t.paired->df).add("p_value", t.paired->p);
      if (t.paired->bounded()) {
        pj.add("ci95", std::vector<double>{t.paired->ci95_low, t.paired->ci95_high});
      } else {
        pj.add_raw("ci95", "null");
      }
      tj.add("paired", pj);
    } else {
      tj.add_raw("paired", "null");
    }
    tj.add("p_adj", t.p_adj.value_or(kNaN));
    tests += (i ? "," : "") + tj.str();
  }
  j.add_raw("tests", tests + "]");
  if (c.tests.size() == 1) j.add("p_value", c.tests[0].p.value_or(kNaN));
  return j.str();
}

}  // namespace normlab
