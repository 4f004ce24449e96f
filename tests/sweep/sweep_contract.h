// What a parsed sweep's expansion and its dumped copy keep, in one place for the two checks that
// hold every sweep file to it: the sweep fuzzer (tests/fuzz/sweep_fuzz.cpp, on every input that
// parses) and SweepConfigTest.ShippedSweepsKeepTheExpansionContract (on every shipped sweep, full
// and quick), so that a shipped sweep the fuzzer would reject fails the ordinary suite first.
// Each function returns "" or the first thing broken, in words. Header-only and without LibTorch:
// the fuzzer is built without it.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "sweep/sweep_config.h"
#include "sweep/sweep_points.h"

namespace normlab::testing {

// expand_sweep's points for sweep `s`:
//  - how many: product(axis lengths) x seeds; a tuned sweep's points are its search points, every
//    arm at every value with every search seed (its `seeds:` empty); a ladder counts only the rungs
//    it searches; with tune.given, only the search_at rungs are searched, so none without a ladder
//    or without search_at (every arm then confirms at its given value);
//  - distinct names, each point overriding exactly name_keys(s), in that order;
//  - the seeds innermost.
inline std::string expansion_problem(const Sweep& s, const std::vector<SweepPoint>& points) {
  const std::vector<int64_t>& seeds = s.tune ? s.tune->seeds : s.seeds;
  if (seeds.empty()) return "no seeds";
  if (s.seeds.empty() != s.tune.has_value()) return "seeds: must be empty exactly when the sweep is tuned";
  const bool given = s.tune && !s.tune->given.empty();
  const int ladder = ladder_axis(s);
  size_t expected = s.tune ? s.tune->values.size() * seeds.size() : seeds.size();
  if (given && ladder < 0) expected = 0;
  for (size_t ai = 0; ai < s.axes.size(); ++ai) {
    const SweepAxis& a = s.axes[ai];
    if (a.values.empty()) return "axis " + std::to_string(ai) + " has no values";
    for (const auto& row : a.values) {
      if (row.size() != a.keys.size()) return "axis " + std::to_string(ai) + ": a row's length is not its keys'";
    }
    size_t counted = a.values.size();
    if (static_cast<int>(ai) == ladder) {
      counted = 0;
      for (size_t r = 0; r < a.values.size(); ++r) counted += rung_searched(s, r) ? 1 : 0;
      if (counted == 0 && !given) return "a ladder without tune.given searches no rung";
    }
    expected *= counted;
  }
  if (points.size() != expected) {
    return std::to_string(points.size()) + " points, expected " + std::to_string(expected);
  }
  std::set<std::string> names;
  for (const SweepPoint& p : points) names.insert(p.name);
  if (names.size() != points.size()) return "two points share a name";
  const std::vector<std::string> keys = name_keys(s);
  for (size_t i = 0; i < points.size(); ++i) {
    if (points[i].seed != seeds[i % seeds.size()]) return points[i].name + ": the seeds are not innermost";
    if (points[i].overrides.size() != keys.size()) return points[i].name + ": overrides a different number of keys";
    for (size_t k = 0; k < keys.size(); ++k) {
      if (points[i].overrides[k].first != keys[k]) return points[i].name + ": overrides " + points[i].overrides[k].first;
    }
  }
  return "";
}

// `again`, parsed from dump_sweep(s) (what `normlab sweep` writes as <sweep>/sweep.yaml and the
// summary reads back): the same sweep in every field a run, the selection or a verdict reads, and
// the same point names (the summary finds the runs by them).
inline std::string dump_problem(const Sweep& s, const Sweep& again) {
  if (again.base != s.base || again.out_dir != s.out_dir || again.set != s.set || again.seeds != s.seeds) {
    return "base, out_dir, set or seeds changed";
  }
  if (again.axes.size() != s.axes.size()) return "the number of axes changed";
  for (size_t a = 0; a < s.axes.size(); ++a) {
    if (again.axes[a].keys != s.axes[a].keys || again.axes[a].values != s.axes[a].values ||
        again.axes[a].zip != s.axes[a].zip) {
      return "axis " + std::to_string(a) + " changed";
    }
  }
  if (again.tune.has_value() != s.tune.has_value()) return "tune appeared or went";
  if (s.tune) {
    const SweepTune &t = *s.tune, &u = *again.tune;
    if (u.key != t.key || u.values != t.values || u.seeds != t.seeds || u.confirm_seeds != t.confirm_seeds ||
        u.metric != t.metric || u.baseline != t.baseline) {
      return "tune's key, values, seeds, confirm_seeds, metric or baseline changed";
    }
    // The ladder, the rungs searched, the values given and the statistics the verdicts use.
    if (u.ladder != t.ladder || u.search_at != t.search_at || u.test != t.test || u.margin != t.margin ||
        u.correction != t.correction || u.fit != t.fit || u.fit_extend != t.fit_extend) {
      return "tune's ladder, search_at, test, margin, correction or fit changed";
    }
    if (u.given.size() != t.given.size()) return "tune.given's length changed";
    for (size_t g = 0; g < t.given.size(); ++g) {
      if (u.given[g].arm != t.given[g].arm || u.given[g].text != t.given[g].text) {
        return "tune.given entry " + std::to_string(g) + " changed";
      }
    }
  }
  std::vector<std::string> a, b;
  for (const SweepPoint& p : expand_sweep(s)) a.push_back(p.name);
  for (const SweepPoint& p : expand_sweep(again)) b.push_back(p.name);
  if (a != b) return "the point names changed";
  return "";
}

}  // namespace normlab::testing
