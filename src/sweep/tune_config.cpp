// The `tune:` block of a sweep file (configs/sweeps/README.md, "Tuned comparisons" and
// "Ladders"): its keys as written, the quick: variant's replacements, its relations to the axes
// (the tuned key, the baseline, the ladder and its searched rungs), and the ladder's rungs as the
// points, the runner and the summary read them.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "config/load.h"
#include "core/errors.h"
#include "core/fs.h"
#include "sweep/sweep_points.h"
#include "sweep/sweep_yaml.h"

namespace normlab {
namespace {
using namespace sweep_yaml;

// A config key as `tune.key` names it: dotted like an axis key, and not one the sweep owns.
bool check_tune_key(const std::string& key, const std::string& where, Problems& problems) {
  const bool well_formed =
      !key.empty() && key.front() != '.' && key.back() != '.' &&
      key.find("..") == std::string::npos && std::all_of(key.begin(), key.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
      });
  if (!well_formed) {
    problems.add_at(where, "tune.key", "expected a dotted numeric config key such as optim.lr, got '" + key + "'");
    return false;
  }
  if (key == "seed") {
    problems.add_at(where, "tune.key",
                    "seed cannot be tuned; the seeds are tune.seeds (search) and tune.confirm_seeds");
    return false;
  }
  if (key == "out_dir") {
    problems.add_at(where, "tune.key", "out_dir cannot be tuned; expected a numeric config key such as optim.lr");
    return false;
  }
  return true;
}

// `tune.values` (and `quick.tune.values`): at least 3 numbers > 0, strictly ascending.
void parse_tune_values(const YAML::Node& n, const std::string& file, const std::string& section,
                       SweepTune& t, Problems& problems) {
  t.values.clear();
  t.numbers.clear();
  if (!n.IsSequence() || n.size() < 3) {
    problems.add_at(at(file, n), section,
                    "expected a list of at least 3 ascending numbers > 0, got " +
                        (n.IsSequence() ? fmt::format("{} value{}", n.size(), n.size() == 1 ? "" : "s")
                                        : describe_node(n)));
    return;
  }
  for (const auto& v : n) {
    double x = std::nan("");
    try {
      const std::string text = v.IsScalar() ? v.Scalar() : "";
      if (text != "true" && text != "false") x = v.as<double>();
    } catch (const YAML::Exception&) {
    }
    if (!std::isfinite(x) || !(x > 0)) {
      problems.add_at(at(file, v), section, "expected a number > 0, got " + describe_node(v));
      return;
    }
    if (!t.numbers.empty() && !(x > t.numbers.back())) {
      problems.add_at(at(file, v), section,
                      fmt::format("values must be ascending, got {} after {}", v.Scalar(), t.values.back()));
      return;
    }
    t.values.push_back(value_text(v));
    t.numbers.push_back(x);
  }
}

// Two texts naming the same ladder value: equal as written, or as numbers ("64" and "6.4e1").
bool same_value(const std::string& a, const std::string& b) {
  if (a == b) return true;
  char *ea = nullptr, *eb = nullptr;
  const double x = std::strtod(a.c_str(), &ea), y = std::strtod(b.c_str(), &eb);
  return !a.empty() && !b.empty() && ea == a.c_str() + a.size() && eb == b.c_str() + b.size() && x == y;
}

// `tune.search_at` (and `quick.tune.search_at`): a non-empty list of values, none twice.
void parse_search_at(const YAML::Node& n, const std::string& file, const std::string& section, SweepTune& t,
                     Problems& problems) {
  t.where["search_at"] = at(file, n);
  t.search_at.clear();
  if (!n.IsSequence() || n.size() == 0) {
    problems.add_at(at(file, n), section, "expected a non-empty list of the ladder's values, got " + describe_node(n));
    return;
  }
  for (const auto& v : n) {
    if (!v.IsScalar()) {
      problems.add_at(at(file, v), section, "expected a value of the ladder, got " + describe_node(v));
      continue;
    }
    const std::string text = value_text(v);
    for (const auto& seen : t.search_at) {
      if (same_value(seen, text)) problems.add_at(at(file, v), section, fmt::format("{} is listed twice", text));
    }
    t.search_at.push_back(text);
  }
}

// `tune.given` (and `quick.tune.given`): a non-empty list of mappings, each the axis values naming
// one arm and its `value`; check_tune matches them to the arms and the value to the grid.
void parse_given(const YAML::Node& n, const std::string& file, const std::string& section, SweepTune& t,
                 Problems& problems) {
  t.where["given"] = at(file, n);
  t.given.clear();
  if (!n.IsSequence() || n.size() == 0) {
    problems.add_at(at(file, n), section,
                    "expected a non-empty list of mappings, each an arm's axis values and its value, e.g. "
                    "[{model.layout: pre, value: 8.0e-3}], got " + describe_node(n));
    return;
  }
  for (const auto& e : n) {
    if (!e.IsMap() || !e["value"] || !e["value"].IsScalar()) {
      problems.add_at(at(file, e), section,
                      "expected a mapping of an arm's axis values and its value, e.g. {model.layout: pre, value: "
                      "8.0e-3}, got " + describe_node(e));
      continue;
    }
    SweepTune::Given g;
    g.text = value_text(e["value"]);
    for (const auto& kv : e) {
      if (kv.first.Scalar() == "value") continue;
      if (!kv.second.IsScalar()) {
        problems.add_at(at(file, kv.first), section + "." + kv.first.Scalar(),
                        "expected one value of the axis, got " + describe_node(kv.second));
        continue;
      }
      g.arm.emplace_back(kv.first.Scalar(), kv.second.Scalar());
    }
    t.given.push_back(g);
  }
}

// ladder, search_at, test, margin, correction (contract: the ladder and the paired verdicts), fit.
void parse_ladder_and_tests(const YAML::Node& n, const std::string& file, SweepTune& t, Problems& problems) {
  if (const YAML::Node l = n["ladder"]) {
    t.where["ladder"] = at(file, l);
    if (!l.IsScalar() || l.Scalar().empty()) {
      problems.add_at(at(file, l), "tune.ladder", "expected one axis key such as model.d_model, got " + describe_node(l));
    } else {
      t.ladder = l.Scalar();
    }
  }
  if (const YAML::Node v = n["search_at"]) parse_search_at(v, file, "tune.search_at", t, problems);
  if (const YAML::Node v = n["given"]) parse_given(v, file, "tune.given", t, problems);
  if (const YAML::Node v = n["test"]) {
    t.where["test"] = at(file, v);
    const std::string text = v.IsScalar() ? v.Scalar() : "";
    if (text == test_name(TestKind::kWelch)) {
      t.test = TestKind::kWelch;
    } else if (text == test_name(TestKind::kPaired)) {
      t.test = TestKind::kPaired;
    } else {
      problems.add_at(at(file, v), "tune.test", "expected welch or paired, got " + describe_node(v));
    }
  }
  if (const YAML::Node v = n["correction"]) {
    t.where["correction"] = at(file, v);
    const std::string text = v.IsScalar() ? v.Scalar() : "";
    if (text == correction_name(Correction::kHolm)) {
      t.correction = Correction::kHolm;
    } else if (text == correction_name(Correction::kNone)) {
      t.correction = Correction::kNone;
    } else {
      problems.add_at(at(file, v), "tune.correction", "expected holm or none, got " + describe_node(v));
    }
  }
  if (const YAML::Node v = n["fit"]) {
    t.where["fit"] = at(file, v);
    const std::string text = v.IsScalar() ? v.Scalar() : "";
    if (text == "quadratic" || text == "none") {
      t.fit = text == "quadratic";
    } else {
      problems.add_at(at(file, v), "tune.fit", "expected quadratic or none, got " + describe_node(v));
    }
  }
  if (const YAML::Node v = n["fit_extend"]) {
    t.where["fit_extend"] = at(file, v);
    int x = -1;
    try {
      if (v.IsScalar()) x = v.as<int>();
    } catch (const YAML::Exception&) {
    }
    if (x < 0) {
      problems.add_at(at(file, v), "tune.fit_extend",
                      "expected a whole number >= 0 (how many grid values past v*'s neighbours the fit's "
                      "bracket may move), got " + describe_node(v));
    } else if (x > 0 && !t.fit) {
      problems.add_at(at(file, v), "tune.fit_extend", "needs tune.fit: quadratic (it moves the fit's bracket)");
    } else {
      t.fit_extend = x;
    }
  }
  if (const YAML::Node v = n["margin"]) {
    t.where["margin"] = at(file, v);
    double x = std::nan("");
    try {
      const std::string text = v.IsScalar() ? v.Scalar() : "";
      if (text != "true" && text != "false") x = v.as<double>();
    } catch (const YAML::Exception&) {
    }
    if (!std::isfinite(x) || x < 0) {
      problems.add_at(at(file, v), "tune.margin",
                      "expected a number >= 0 in the metric's unit (nats), e.g. 0.01, got " + describe_node(v));
    } else {
      t.margin = x;
    }
  }
}

// The ladder against the axes: an axis key, and search_at naming its values. False when the
// ladder cannot be used (the lines say why).
bool check_ladder(const Sweep& s, const std::string& what, Problems& problems) {
  const SweepTune& t = *s.tune;
  if (t.ladder.empty()) {
    if (!t.search_at.empty()) {
      problems.add_at(t.where.at("search_at"), what + "tune.search_at",
                      "needs tune.ladder (the axis whose values the searched rungs name)");
      return false;
    }
    return true;
  }
  const int a = ladder_axis(s);
  if (a < 0) {
    const auto keys = s.axis_keys();
    problems.add_at(t.where.at("ladder"), what + "tune.ladder",
                    fmt::format("'{}' is not an axis; expected one of the sweep's axis keys ({})", t.ladder,
                                keys.empty() ? "the sweep has no axes" : join(keys, ", ")));
    return false;
  }
  const auto rungs = ladder_rungs(s);
  bool ok = true;
  for (const auto& v : t.search_at) {
    if (std::none_of(rungs.begin(), rungs.end(), [&](const std::string& r) { return same_value(r, v); })) {
      problems.add_at(t.where.at("search_at"), what + "tune.search_at",
                      fmt::format("{} is not a value of the ladder {}; expected some of: {}", v, t.ladder,
                                  join(rungs, ", ")));
      ok = false;
    }
  }
  return ok;
}

// An arm (its axis values) named by a mapping of axis keys to values: every pair is the arm's.
bool names_arm(const std::vector<std::pair<std::string, std::string>>& names,
               const std::vector<std::pair<std::string, std::string>>& arm) {
  return std::all_of(names.begin(), names.end(),
                     [&](const auto& kv) { return std::find(arm.begin(), arm.end(), kv) != arm.end(); });
}

// tune.given against the axes and the grid: axis keys only (not the ladder's), each entry naming
// exactly one arm, every arm named once, each value one of tune.values.
void check_given(const Sweep& s, const std::string& what, Problems& problems) {
  const SweepTune& t = *s.tune;
  if (t.given.empty()) return;
  const std::string& where = t.where.at("given");
  std::vector<std::string> ladder_keys, keys;  // the arms' axis keys: every axis's but the ladder's
  if (ladder_axis(s) >= 0) ladder_keys = s.axes[static_cast<size_t>(ladder_axis(s))].keys;
  for (const std::string& k : s.axis_keys()) {
    if (std::find(ladder_keys.begin(), ladder_keys.end(), k) == ladder_keys.end()) keys.push_back(k);
  }
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> arms;  // stem, axes
  for (const SweepPoint& cell : tune_arms(s)) {
    if (std::none_of(arms.begin(), arms.end(), [&](const auto& a) { return a.first == cell.stem; })) {
      arms.emplace_back(cell.stem, cell.overrides);
    }
  }
  std::vector<size_t> named(arms.size(), 0);
  for (const SweepTune::Given& g : t.given) {
    bool keys_ok = true;
    for (const auto& [k, v] : g.arm) {
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
        problems.add_at(where, what + "tune.given." + k,
                        fmt::format("{}; expected axis keys naming one arm ({})",
                                    std::find(ladder_keys.begin(), ladder_keys.end(), k) != ladder_keys.end()
                                        ? "belongs to the ladder's axis (a given value serves the arm at every rung)"
                                        : "not an axis",
                                    keys.empty() ? "the arms have no axes: {value: V}" : join(keys, ", ")));
        keys_ok = false;
      }
    }
    if (std::none_of(t.values.begin(), t.values.end(), [&](const std::string& v) { return same_value(v, g.text); })) {
      problems.add_at(where, what + "tune.given",
                      fmt::format("value {} is not in tune.values ({}); the confirm runs run at grid values", g.text,
                                  join(t.values, ", ")));
    }
    if (!keys_ok) continue;
    std::vector<std::string> matches;
    for (size_t a = 0; a < arms.size(); ++a) {
      if (!names_arm(g.arm, arms[a].second)) continue;
      matches.push_back(arms[a].first.empty() ? "(the one arm)" : arms[a].first);
      ++named[a];
    }
    if (matches.size() != 1) {
      std::vector<std::string> all;
      for (const auto& a : arms) all.push_back(a.first.empty() ? "(the one arm)" : a.first);
      problems.add_at(where, what + "tune.given",
                      matches.empty() ? fmt::format("an entry names no arm; expected the axis values of one of: {}",
                                                    join(all, "; "))
                                      : fmt::format("an entry names {} arms ({}); expected the axis values of exactly one",
                                                    matches.size(), join(matches, "; ")));
    }
  }
  for (size_t a = 0; a < arms.size(); ++a) {
    if (named[a] == 1) continue;
    const std::string name = arms[a].first.empty() ? "(the one arm)" : arms[a].first;
    problems.add_at(where, what + "tune.given",
                    named[a] == 0 ? fmt::format("gives no value for the arm {}; every arm needs one", name)
                                  : fmt::format("gives {} values for the arm {}; expected one", named[a], name));
  }
}

}  // namespace

namespace sweep_yaml {

// The `tune:` block as written; its relations to the rest of the sweep are check_tune's.
std::optional<SweepTune> parse_tune(const YAML::Node& n, const std::string& file, Problems& problems) {
  if (!n.IsMap()) {
    problems.add_at(at(file, n), "tune",
                    "expected a mapping {key, values, seeds, confirm_seeds, metric, baseline, ladder, "
                    "search_at, given, test, margin, correction, fit, fit_extend}, got " +
                        describe_node(n));
    return std::nullopt;
  }
  const size_t before = problems.lines().size();
  reject_unknown(n, file, "tune.",
                 {"key", "values", "seeds", "confirm_seeds", "metric", "baseline", "ladder", "search_at", "given",
                  "test", "margin", "correction", "fit", "fit_extend"},
                 problems);
  SweepTune t;
  t.where["tune"] = at(file, n);
  for (const char* k : {"key", "values", "seeds", "confirm_seeds", "baseline"}) {
    if (!n[k]) {
      problems.add_at(at(file, n), fmt::format("tune.{}", k), "missing; tune: needs key, values, seeds, "
                                                            "confirm_seeds and baseline (metric, ladder, search_at, "
                                                            "given, test, margin, correction, fit and fit_extend are "
                                                            "optional)");
    }
  }
  if (const YAML::Node k = n["key"]) {
    t.where["key"] = at(file, k);
    if (!k.IsScalar()) {
      problems.add_at(at(file, k), "tune.key", "expected a dotted numeric config key such as optim.lr, got " +
                                                   describe_node(k));
    } else if (check_tune_key(k.Scalar(), at(file, k), problems)) {
      t.key = k.Scalar();
    }
  }
  if (const YAML::Node v = n["values"]) {
    t.where["values"] = at(file, v);
    parse_tune_values(v, file, "tune.values", t, problems);
  }
  if (const YAML::Node v = n["seeds"]) {
    t.where["seeds"] = at(file, v);
    t.seeds = parse_seeds(v, file, "tune.seeds", problems);
  }
  if (const YAML::Node v = n["confirm_seeds"]) {
    t.where["confirm_seeds"] = at(file, v);
    t.confirm_seeds = parse_seeds(v, file, "tune.confirm_seeds", problems);
  }
  if (const YAML::Node m = n["metric"]) {
    t.where["metric"] = at(file, m);
    const std::string text = m.IsScalar() ? m.Scalar() : "";
    if (text == tune_metric_name(TuneMetric::kBestVal)) {
      t.metric = TuneMetric::kBestVal;
    } else if (text == tune_metric_name(TuneMetric::kFinalVal)) {
      t.metric = TuneMetric::kFinalVal;
    } else {
      problems.add_at(at(file, m), "tune.metric", "expected best_val or final_val, got " + describe_node(m));
    }
  }
  if (const YAML::Node b = n["baseline"]) {
    t.where["baseline"] = at(file, b);
    if (!b.IsMap()) {
      problems.add_at(at(file, b), "tune.baseline",
                      "expected a mapping of axis keys to values naming one arm, e.g. {model.layout: pre}, got " +
                          describe_node(b));
    } else {
      for (const auto& kv : b) {
        if (!kv.second.IsScalar()) {
          problems.add_at(at(file, kv.first), "tune.baseline." + kv.first.Scalar(),
                          "expected one value of the axis, got " + describe_node(kv.second));
          continue;
        }
        t.baseline.emplace_back(kv.first.Scalar(), kv.second.Scalar());
      }
    }
  }
  parse_ladder_and_tests(n, file, t, problems);
  if (problems.lines().size() != before) return std::nullopt;
  return t;
}

// `quick.tune:` replaces the search grid and seeds of the file's tune block.
void parse_quick_tune(const YAML::Node& n, const std::string& file, SweepTune& t, Problems& problems) {
  if (!n.IsMap()) {
    problems.add_at(at(file, n), "quick.tune",
                    "expected a mapping with any of values, seeds, confirm_seeds, search_at, given, got " +
                        describe_node(n));
    return;
  }
  reject_unknown(n, file, "quick.tune.", {"values", "seeds", "confirm_seeds", "search_at", "given"}, problems);
  if (const YAML::Node v = n["search_at"]) parse_search_at(v, file, "quick.tune.search_at", t, problems);
  if (const YAML::Node v = n["given"]) parse_given(v, file, "quick.tune.given", t, problems);
  if (const YAML::Node v = n["values"]) {
    t.where["values"] = at(file, v);
    parse_tune_values(v, file, "quick.tune.values", t, problems);
  }
  if (const YAML::Node v = n["seeds"]) {
    t.where["seeds"] = at(file, v);
    t.seeds = parse_seeds(v, file, "quick.tune.seeds", problems);
  }
  if (const YAML::Node v = n["confirm_seeds"]) {
    t.where["confirm_seeds"] = at(file, v);
    t.confirm_seeds = parse_seeds(v, file, "quick.tune.confirm_seeds", problems);
  }
}

// The tune block against the rest of the sweep: the key is no axis, zip key or set: key, the
// seed lists are disjoint and replace `seeds:`, and the baseline names exactly one arm. `what`
// says which variant ("" or "quick.") for the lines.
void check_tune(const Sweep& s, const std::string& what, Problems& problems) {
  if (!s.tune) return;
  const SweepTune& t = *s.tune;
  if (!t.key.empty()) {
    for (const auto& a : s.axes) {
      if (std::find(a.keys.begin(), a.keys.end(), t.key) == a.keys.end()) continue;
      problems.add_at(t.where.at("key"), "tune.key",
                      fmt::format("{} is {} ({}); the tuned key is searched per arm and cannot also be one",
                                  t.key, a.zip ? "a zip key" : "an axis", s.where.count(t.key) ? s.where.at(t.key) : s.file));
    }
    for (const auto& [k, v] : s.set) {
      if (k != t.key) continue;
      problems.add_at(s.where.count(k) ? s.where.at(k) : s.file, what + "set." + k,
                      "the tuned key takes its values from tune.values; remove it from set: / --set");
    }
  }
  for (int64_t seed : t.seeds) {
    if (std::find(t.confirm_seeds.begin(), t.confirm_seeds.end(), seed) != t.confirm_seeds.end()) {
      problems.add_at(t.where.count("confirm_seeds") ? t.where.at("confirm_seeds") : t.where.at("tune"),
                      what + "tune.confirm_seeds",
                      fmt::format("seed {} is also a search seed; confirm seeds must be fresh (disjoint from "
                                  "tune.seeds)", seed));
    }
  }
  const bool ladder_ok = check_ladder(s, what, problems);
  if (ladder_ok) check_given(s, what, problems);
  // The baseline: axis keys only (not the ladder's), matching exactly one arm.
  const auto keys = s.axis_keys();
  bool keys_ok = true;
  for (const auto& [k, v] : t.baseline) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
      problems.add_at(t.where.at("baseline"), what + "tune.baseline." + k,
                      fmt::format("not an axis; expected axis keys naming one arm ({})",
                                  keys.empty() ? "the sweep has no axes: baseline: {}" : join(keys, ", ")));
      keys_ok = false;
    } else if (ladder_ok && ladder_axis(s) >= 0) {
      const auto& lk = s.axes[static_cast<size_t>(ladder_axis(s))].keys;
      if (std::find(lk.begin(), lk.end(), k) != lk.end()) {
        problems.add_at(t.where.at("baseline"), what + "tune.baseline." + k,
                        fmt::format("belongs to the ladder's axis; the baseline names an arm by the other axes and is compared "
                                    "with every arm at each rung"));
        keys_ok = false;
      }
    }
  }
  if (!keys_ok || !ladder_ok || !t.where.count("baseline")) return;
  size_t arms = 1;
  for (const auto& a : s.axes) arms = arms > kMaxPoints ? arms : arms * a.values.size();
  if (arms > kMaxPoints) return;  // expand_sweep says the sweep is too large
  std::vector<std::string> matches, all;  // arms by their stem: a ladder's cells of one arm count once
  for (const SweepPoint& arm : tune_arms(s)) {
    const std::string name = arm.stem.empty() ? "(the one arm)" : arm.stem;
    if (std::find(all.begin(), all.end(), name) != all.end()) continue;
    all.push_back(name);
    const bool match = std::all_of(t.baseline.begin(), t.baseline.end(), [&](const auto& kv) {
      return std::find(arm.overrides.begin(), arm.overrides.end(), kv) != arm.overrides.end();
    });
    if (match) matches.push_back(all.back());
  }
  if (matches.size() == 1) return;
  problems.add_at(t.where.at("baseline"), what + "tune.baseline",
                  matches.empty()
                      ? fmt::format("names no arm; expected the axis values of one of: {}", join(all, "; "))
                      : fmt::format("names {} arms ({}); expected the axis values of exactly one",
                                    matches.size(), join(matches, "; ")));
}

// A tuned key must be numeric in the run config the points start from (base with set:).
void check_tune_key_is_numeric(const Sweep& s, Problems& problems) {
  if (!s.tune || s.tune->key.empty() || !file_exists(s.base)) return;
  std::vector<std::string> overrides;
  for (const auto& [k, v] : s.set) overrides.push_back(k + "=" + v);
  std::vector<std::pair<std::string, std::string>> flat;
  try {
    flat = flat_values(parse_config_file(s.base, overrides).config);
  } catch (const std::exception&) {
    return;  // the points' validation names the problem
  }
  const auto it = std::find_if(flat.begin(), flat.end(), [&](const auto& kv) { return kv.first == s.tune->key; });
  if (it == flat.end()) {
    problems.add_at(s.tune->where.at("key"), "tune.key",
                    fmt::format("'{}' is not a config key (build/normlab keys lists them); expected a numeric "
                                "key such as optim.lr", s.tune->key));
    return;
  }
  char* end = nullptr;
  const std::string& text = it->second;
  std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) {
    problems.add_at(s.tune->where.at("key"), "tune.key",
                    fmt::format("{} is not numeric (its value is '{}'); expected a numeric key such as optim.lr",
                                s.tune->key, text));
  }
}

}  // namespace sweep_yaml

int ladder_axis(const Sweep& sweep) {
  if (!sweep.tune || sweep.tune->ladder.empty()) return -1;
  for (size_t a = 0; a < sweep.axes.size(); ++a) {
    const auto& keys = sweep.axes[a].keys;
    if (std::find(keys.begin(), keys.end(), sweep.tune->ladder) != keys.end()) return static_cast<int>(a);
  }
  return -1;
}

std::vector<std::string> ladder_rungs(const Sweep& sweep) {
  const int a = ladder_axis(sweep);
  if (a < 0) return {""};
  const SweepAxis& axis = sweep.axes[static_cast<size_t>(a)];
  const size_t k = static_cast<size_t>(
      std::find(axis.keys.begin(), axis.keys.end(), sweep.tune->ladder) - axis.keys.begin());
  std::vector<std::string> out;
  for (const auto& v : axis.values) out.push_back(v[k]);
  return out;
}

bool rung_searched(const Sweep& sweep, size_t rung) {
  if (!sweep.tune) return true;
  if (sweep.tune->given.empty() && (ladder_axis(sweep) < 0 || sweep.tune->search_at.empty())) return true;
  if (ladder_axis(sweep) < 0) return false;  // given values, no ladder: nothing is searched
  const auto rungs = ladder_rungs(sweep);
  return rung < rungs.size() && std::any_of(sweep.tune->search_at.begin(), sweep.tune->search_at.end(),
                                            [&](const std::string& v) { return same_value(rungs[rung], v); });
}

const char* test_name(TestKind t) { return t == TestKind::kPaired ? "paired" : "welch"; }
const char* correction_name(Correction c) { return c == Correction::kNone ? "none" : "holm"; }

const char* tune_metric_name(TuneMetric m) {
  return m == TuneMetric::kFinalVal ? "final_val" : "best_val";
}


int given_index(const SweepTune& tune, const std::vector<std::pair<std::string, std::string>>& arm) {
  for (const SweepTune::Given& g : tune.given) {
    if (!names_arm(g.arm, arm)) continue;
    for (size_t v = 0; v < tune.values.size(); ++v) {
      if (same_value(tune.values[v], g.text)) return static_cast<int>(v);
    }
  }
  return -1;
}

}  // namespace normlab
