#include "sweep/sweep_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "config/load.h"
#include "core/errors.h"
#include "core/fs.h"
#include "core/json.h"
#include "sweep/sweep_yaml.h"
#include "train/run_config.h"

namespace normlab {

namespace sweep_yaml {

std::string at(const std::string& file, const YAML::Node& n) {
  return fmt::format("{}:{}", file, n.Mark().line + 1);
}

std::string describe_node(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

// A value as --set takes it: scalars as written, lists and mappings as flow YAML.
std::string value_text(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  if (n.IsNull()) return "null";
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

std::vector<int64_t> parse_seeds(const YAML::Node& n, const std::string& file,
                                 const std::string& section, Problems& problems) {
  std::vector<int64_t> out;
  if (!n.IsSequence() || n.size() == 0) {
    problems.add_at(at(file, n), section,
                 "expected a non-empty list of integer seeds, got " + describe_node(n));
    return out;
  }
  for (const auto& v : n) {
    try {
      const int64_t s = v.as<int64_t>();
      if (std::find(out.begin(), out.end(), s) != out.end()) {
        problems.add_at(at(file, v), section, fmt::format("seed {} is listed twice", s));
      }
      out.push_back(s);
    } catch (const YAML::Exception&) {
      problems.add_at(at(file, v), section, "expected an integer seed, got " + describe_node(v));
    }
  }
  return out;
}

void reject_unknown(const YAML::Node& n, const std::string& file, const std::string& prefix,
                    const std::vector<std::string>& known, Problems& problems) {
  for (const auto& kv : n) {
    const std::string k = kv.first.Scalar();
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      problems.add_at(at(file, kv.first), prefix + k,
                   "unknown key; expected one of: " + join(known, ", "));
    }
  }
}

YAML::Node load_sweep_yaml(const std::string& path) { return load_strict_yaml(read_file(path), path); }

}  // namespace sweep_yaml

namespace {
namespace fs = std::filesystem;
using namespace sweep_yaml;

// Point names become directory names; keep well below the usual 255-byte limit.
constexpr size_t kMaxNameLength = 200;

// A run-config key as written in a sweep: dotted, non-empty parts, no '='. `seed` and `out_dir`
// belong to the sweep itself (`seeds:`, one run directory per point).
bool check_key(const std::string& key, const std::string& where, const std::string& section,
               Problems& problems) {
  const bool well_formed =
      !key.empty() && key.front() != '.' && key.back() != '.' &&
      key.find("..") == std::string::npos && std::all_of(key.begin(), key.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
      });
  if (!well_formed) {
    problems.add_at(where, section + "." + key, "expected a dotted config key such as model.layout");
    return false;
  }
  if (key == "seed") {
    problems.add_at(where, section + "." + key, "list seeds under `seeds:`, not as an override");
    return false;
  }
  if (key == "out_dir") {
    problems.add_at(where, section + "." + key,
                 "each point runs in <sweep>/runs/<name>; set the sweep's out_dir instead");
    return false;
  }
  return true;
}

// `set:` mapping: key -> any YAML value.
void parse_set(const YAML::Node& n, const std::string& file, const std::string& section,
               std::vector<std::pair<std::string, std::string>>& out,
               std::map<std::string, std::string>& where, Problems& problems) {
  if (!n || n.IsNull()) return;
  if (!n.IsMap()) {
    problems.add_at(at(file, n), section,
                 "expected a mapping of config keys to values, got " + describe_node(n));
    return;
  }
  for (const auto& kv : n) {
    const std::string key = kv.first.Scalar();
    if (!check_key(key, at(file, kv.first), section, problems)) continue;
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == key; });
    if (it != out.end()) {
      it->second = value_text(kv.second);
    } else {
      out.emplace_back(key, value_text(kv.second));
    }
    where[key] = at(file, kv.first);
  }
}

// A mapping of key -> non-empty list of values, as in `axes:` and each `zip:` entry.
std::vector<SweepAxis> parse_lists(const YAML::Node& n, const std::string& file,
                                   const std::string& section,
                                   std::map<std::string, std::string>& where, Problems& problems) {
  std::vector<SweepAxis> out;
  if (!n || n.IsNull()) return out;
  if (!n.IsMap()) {
    problems.add_at(at(file, n), section,
                 "expected a mapping of config keys to lists of values, got " + describe_node(n));
    return out;
  }
  for (const auto& kv : n) {
    const std::string key = kv.first.Scalar();
    if (!check_key(key, at(file, kv.first), section, problems)) continue;
    if (!kv.second.IsSequence() || kv.second.size() == 0) {
      problems.add_at(at(file, kv.first), section + "." + key,
                   "expected a non-empty list of values, got " + describe_node(kv.second));
      continue;
    }
    SweepAxis axis;
    axis.keys = {key};
    for (const auto& v : kv.second) axis.values.push_back({value_text(v)});
    out.push_back(axis);
    where[key] = at(file, kv.first);
  }
  return out;
}

// `zip:` list: each entry one axis whose keys vary together.
std::vector<SweepAxis> parse_zip(const YAML::Node& n, const std::string& file,
                                 const std::string& section,
                                 std::map<std::string, std::string>& where, Problems& problems) {
  std::vector<SweepAxis> out;
  if (!n || n.IsNull()) return out;
  if (!n.IsSequence()) {
    problems.add_at(
        at(file, n), section,
        "expected a list of mappings ({key: [values], key: [values]}), got " + describe_node(n));
    return out;
  }
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string entry = fmt::format("{}[{}]", section, i);
    auto lists = parse_lists(n[i], file, entry, where, problems);
    if (lists.empty()) {
      if (n[i].IsMap() && n[i].size() == 0) problems.add_at(at(file, n[i]), entry, "empty zip entry");
      continue;
    }
    SweepAxis axis;
    axis.zip = true;
    std::vector<std::string> lengths;
    bool equal = true;
    for (const auto& l : lists) {
      axis.keys.push_back(l.keys[0]);
      lengths.push_back(fmt::format("{}: {}", l.keys[0], l.values.size()));
      equal = equal && l.values.size() == lists[0].values.size();
    }
    if (!equal) {
      problems.add_at(
          at(file, n[i]), entry,
          fmt::format("zipped lists must have equal lengths, got {}", join(lengths, ", ")));
      continue;
    }
    for (size_t v = 0; v < lists[0].values.size(); ++v) {
      std::vector<std::string> row;
      for (const auto& l : lists) row.push_back(l.values[v][0]);
      axis.values.push_back(row);
    }
    out.push_back(axis);
  }
  return out;
}

// The sweep's own key a run-config problem comes from: the override key equal to the problem's
// key, or the nearest one above or below it in the dotted path.
const std::string* owning_key(const std::map<std::string, std::string>& where,
                              const std::string& key) {
  for (const auto& [k, w] : where) {
    if (k == key || key.rfind(k + ".", 0) == 0 || k.rfind(key + ".", 0) == 0) return &w;
  }
  return nullptr;
}

// The `quick:` section: the sweep `s` with its replacements, or null when it is not a mapping.
std::shared_ptr<const Sweep> parse_quick(const YAML::Node& q, const std::string& path, const Sweep& s,
                                         Problems& problems) {
  if (!q.IsMap()) {
    problems.add_at(at(path, q), "quick", "expected a mapping with any of set, axes, zip, seeds, tune, out_dir");
    return nullptr;
  }
  reject_unknown(q, path, "quick.", {"set", "axes", "zip", "seeds", "tune", "out_dir"}, problems);
  Sweep quick = s;
  parse_set(q["set"], path, "quick.set", quick.set, quick.where, problems);
  for (const auto& a : parse_lists(q["axes"], path, "quick.axes", quick.where, problems)) {
    auto it = std::find_if(quick.axes.begin(), quick.axes.end(),
                           [&](const SweepAxis& x) { return !x.zip && x.keys == a.keys; });
    if (it == quick.axes.end()) {
      problems.add_at(quick.where[a.keys[0]], "quick.axes." + a.keys[0], "not a key under axes:");
    } else {
      *it = a;
    }
  }
  if (q["zip"]) {
    quick.axes.erase(std::remove_if(quick.axes.begin(), quick.axes.end(),
                                    [](const SweepAxis& x) { return x.zip; }),
                     quick.axes.end());
    auto qz = parse_zip(q["zip"], path, "quick.zip", quick.where, problems);
    quick.axes.insert(quick.axes.end(), qz.begin(), qz.end());
  }
  if (q["seeds"]) {
    if (s.tune) {
      problems.add_at(at(path, q["seeds"]), "quick.seeds",
                      "a sweep with tune: has no seeds:; set quick.tune.seeds and quick.tune.confirm_seeds");
    } else {
      quick.seeds = parse_seeds(q["seeds"], path, "quick.seeds", problems);
      quick.where["seed"] = at(path, q["seeds"]);
    }
  }
  if (const YAML::Node t = q["tune"]) {
    if (!quick.tune) {
      problems.add_at(at(path, t), "quick.tune", "the sweep file has no tune: block to change");
    } else {
      parse_quick_tune(t, path, *quick.tune, problems);
    }
  }
  if (const YAML::Node o = q["out_dir"]) {
    if (!o.IsScalar()) {
      problems.add_at(at(path, o), "quick.out_dir",
                   "expected a directory, got " + describe_node(o));
    } else {
      quick.out_dir = o.Scalar();
    }
  }
  return std::make_shared<const Sweep>(std::move(quick));
}

}  // namespace

std::vector<std::string> Sweep::axis_keys() const {
  std::vector<std::string> keys;
  for (const auto& a : axes) keys.insert(keys.end(), a.keys.begin(), a.keys.end());
  return keys;
}

Sweep apply_quick(const Sweep& sweep) {
  if (!sweep.quick) throw ConfigError({sweep.file + ": quick: the sweep file has no quick: section"});
  return *sweep.quick;
}

namespace {

// `tune:` and `seeds:` (a tuned sweep's seeds are its tune block's), checked against the axes.
void parse_tune_and_seeds(const YAML::Node& root, const std::string& path, Sweep& s, Problems& problems) {
  if (const YAML::Node t = root["tune"]) s.tune = parse_tune(t, path, problems);
  if (const YAML::Node n = root["seeds"]) {
    if (root["tune"]) {
      problems.add_at(at(path, n), "seeds",
                      "a sweep with tune: has no seeds:; list them as tune.seeds (search) and "
                      "tune.confirm_seeds (confirm)");
    } else {
      s.seeds = parse_seeds(n, path, "seeds", problems);
      s.where["seed"] = at(path, n);
    }
  }
  check_tune(s, "", problems);
}

// The quick variant's tune block against its own arms and seeds; lines the file's block gave
// already are not repeated.
void check_quick_tune(const Sweep& s, Problems& problems) {
  if (!s.quick || !s.tune) return;
  Problems quick_problems;
  check_tune(*s.quick, "quick.", quick_problems);
  for (const auto& line : quick_problems.lines()) {
    if (std::find(problems.lines().begin(), problems.lines().end(), line) != problems.lines().end()) continue;
    const auto a = line.find(": "), b = line.find(": ", a + 2);
    problems.add_at(line.substr(0, a), line.substr(a + 2, b - a - 2), line.substr(b + 2));
  }
}

// Command-line `--set key=value` lines, added to set: (replacing a key set there).
void apply_sets(const std::vector<std::string>& sets, Sweep& s, Problems& problems) {
  for (const auto& o : sets) {
    const auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0) {
      problems.add_at("--set", o, "expected key.path=value");
      continue;
    }
    const std::string key = o.substr(0, eq);
    if (!check_key(key, "--set", "set", problems)) continue;
    if (s.tune && key == s.tune->key) {
      problems.add_at("--set", "set." + key, "the tuned key takes its values from tune.values; remove it from set: / --set");
      continue;
    }
    auto it =
        std::find_if(s.set.begin(), s.set.end(), [&](const auto& p) { return p.first == key; });
    if (it != s.set.end()) {
      it->second = o.substr(eq + 1);
    } else {
      s.set.emplace_back(key, o.substr(eq + 1));
    }
    s.where[key] = "--set";
  }
}

}  // namespace

Sweep parse_sweep_file(const std::string& path, const SweepOptions& options) {
  if (!file_exists(path)) throw UsageError(path + ": sweep file not found");
  const YAML::Node root = load_sweep_yaml(path);
  Problems problems;
  if (!root.IsMap()) {
    throw ConfigError({path + ": (top level): expected a mapping with base:, axes:, seeds:, ..."});
  }
  reject_unknown(root, path, "", {"base", "out_dir", "set", "axes", "zip", "seeds", "tune", "quick"},
                 problems);

  Sweep s;
  s.file = path;
  const fs::path dir = fs::path(path).parent_path();
  if (const YAML::Node b = root["base"]; !b || !b.IsScalar()) {
    problems.add_at(b ? at(path, b) : path, "base",
                 "expected the path of the base run config (relative to this file)");
  } else {
    const fs::path base = fs::absolute(dir / b.Scalar()).lexically_normal();
    s.base = base.string();
    if (options.check_base && !file_exists(s.base))
      problems.add_at(at(path, b), "base", fmt::format("file '{}' not found", s.base));
  }
  if (const YAML::Node o = root["out_dir"]; o && !o.IsScalar()) {
    problems.add_at(at(path, o), "out_dir", "expected the sweep directory, got " + describe_node(o));
  } else {
    s.out_dir = o ? o.Scalar() : "runs/sweeps/" + fs::path(path).stem().string();
  }
  parse_set(root["set"], path, "set", s.set, s.where, problems);
  s.axes = parse_lists(root["axes"], path, "axes", s.where, problems);
  auto zips = parse_zip(root["zip"], path, "zip", s.where, problems);
  s.axes.insert(s.axes.end(), zips.begin(), zips.end());
  parse_tune_and_seeds(root, path, s, problems);

  // The quick section is checked whether or not it is applied.
  if (const YAML::Node q = root["quick"]; q && !q.IsNull()) {
    s.quick = parse_quick(q, path, s, problems);
    check_quick_tune(s, problems);
  }
  if (options.quick) {
    if (s.quick) {
      s = apply_quick(s);
    } else {
      problems.add_at(path, "quick", "--quick given but the sweep file has no quick: section");
    }
  }

  apply_sets(options.sets, s, problems);
  if (!options.out_dir.empty()) s.out_dir = options.out_dir;

  std::set<std::string> seen;
  for (const auto& k : s.axis_keys()) {
    if (!seen.insert(k).second) problems.add_at(s.where[k], k, "appears in more than one axis");
  }
  if (problems.empty()) check_tune_key_is_numeric(s, problems);
  if (!s.tune && s.seeds.empty() && problems.empty() && file_exists(s.base)) {
    // Default: the base config's own seed.
    s.seeds = {parse_config_file(s.base).config.seed};
    s.where["seed"] = s.base;
  }
  problems.raise_if_any();
  return s;
}

std::map<std::string, std::string> short_names(const std::vector<std::string>& keys) {
  std::map<std::string, std::string> shorts;
  std::map<std::string, int> count;
  for (const auto& k : keys) {
    const auto dot = k.find('.');
    shorts[k] = dot == std::string::npos ? k : k.substr(dot + 1);
    ++count[shorts[k]];
  }
  for (auto& [k, s] : shorts) {
    if (count[s] > 1 || s == "seed") s = k;
  }
  return shorts;
}

std::string sanitize_value(const std::string& text) {
  std::string out = text;
  for (char& c : out) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '+' ||
          c == '-'))
      c = '_';
  }
  return out;
}

const char* phase_name(PointPhase p) {
  switch (p) {
    case PointPhase::kSearch: return "search";
    case PointPhase::kConfirm: return "confirm";
    case PointPhase::kPlain: break;
  }
  return "run";
}

std::vector<std::string> name_keys(const Sweep& sweep) {
  std::vector<std::string> keys = sweep.axis_keys();
  if (sweep.tune && !sweep.tune->key.empty()) keys.push_back(sweep.tune->key);
  return keys;
}

namespace {

// The cartesian product of the axes (the last axis turns fastest): one point per combination with
// its overrides and its name parts ("layout=pre") as group, no seed.
std::vector<SweepPoint> combinations(const Sweep& sweep) {
  const auto shorts = short_names(name_keys(sweep));
  const int ladder = ladder_axis(sweep);
  std::vector<SweepPoint> out;
  std::vector<size_t> index(sweep.axes.size(), 0);
  while (true) {
    SweepPoint base;
    std::vector<std::string> parts, stem;
    for (size_t a = 0; a < sweep.axes.size(); ++a) {
      const SweepAxis& axis = sweep.axes[a];
      for (size_t k = 0; k < axis.keys.size(); ++k) {
        const std::string& v = axis.values[index[a]][k];
        base.overrides.emplace_back(axis.keys[k], v);
        parts.push_back(shorts.at(axis.keys[k]) + "=" + sanitize_value(v));
        if (static_cast<int>(a) != ladder) stem.push_back(parts.back());
      }
    }
    base.group = join(parts, ",");
    base.name = base.group;
    base.stem = join(stem, ",");
    base.rung = ladder >= 0 ? index[static_cast<size_t>(ladder)] : 0;
    out.push_back(base);
    size_t a = sweep.axes.size();
    while (a > 0 && ++index[a - 1] == sweep.axes[a - 1].values.size()) index[--a] = 0;
    if (a == 0) break;
  }
  return out;
}

// `group` extended by one name part.
std::string extend(const std::string& group, const std::string& part) {
  return group.empty() ? part : group + "," + part;
}

// The point of `arm` at tuned value index v with `seed`, in `phase`.
SweepPoint tuned_point(const Sweep& sweep, const SweepPoint& arm, size_t arm_index, size_t v, int64_t seed,
                       PointPhase phase) {
  const SweepTune& t = *sweep.tune;
  const auto shorts = short_names(name_keys(sweep));
  SweepPoint p = arm;
  p.overrides.emplace_back(t.key, t.values[v]);
  p.group = extend(arm.group, shorts.at(t.key) + "=" + sanitize_value(t.values[v]));
  if (phase == PointPhase::kConfirm) p.group = extend(p.group, "confirm");
  p.seed = seed;
  p.name = extend(p.group, fmt::format("seed={}", seed));
  p.phase = phase;
  p.arm = arm_index;
  return p;
}

// Names unique and not too long; throws ConfigError naming every problem.
void check_names(const Sweep& sweep, const std::vector<SweepPoint>& points) {
  Problems problems;
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < points.size(); ++i) {
    const std::string& n = points[i].name;
    if (n.size() > kMaxNameLength) {
      problems.add_at(sweep.file, n.substr(0, 40) + "...",
                   fmt::format("point name longer than {} characters; use shorter axis values",
                               kMaxNameLength));
    }
    auto [it, fresh] = seen.emplace(n, i);
    if (!fresh) {
      problems.add_at(
          sweep.file, n,
          fmt::format("points {} and {} get the same name (a value listed twice, or values "
                      "that differ only in characters outside [A-Za-z0-9._+-])",
                      it->second + 1, i + 1));
    }
  }
  problems.raise_if_any();
}

}  // namespace

std::vector<SweepPoint> tune_arms(const Sweep& sweep) {
  std::vector<SweepPoint> arms = combinations(sweep);
  for (size_t i = 0; i < arms.size(); ++i) arms[i].arm = i;
  return arms;
}

std::vector<SweepPoint> confirm_points(const Sweep& sweep, const std::vector<int>& selected) {
  std::vector<SweepPoint> out;
  if (!sweep.tune) return out;
  const auto arms = tune_arms(sweep);
  const int n = static_cast<int>(sweep.tune->values.size());
  for (size_t a = 0; a < arms.size() && a < selected.size(); ++a) {
    const int s = selected[a];
    if (s < 0) continue;
    std::vector<int> at = {s};
    if (sweep.tune->fit) {
      if (s > 0) at.push_back(s - 1);
      if (s + 1 < n) at.push_back(s + 1);
    }
    for (const int v : at) {
      for (int64_t seed : sweep.tune->confirm_seeds) {
        out.push_back(tuned_point(sweep, arms[a], a, static_cast<size_t>(v), seed, PointPhase::kConfirm));
      }
    }
  }
  return out;
}

std::vector<SweepPoint> expand_sweep(const Sweep& sweep) {
  const SweepTune* tune = sweep.tune ? &*sweep.tune : nullptr;
  // Runs per combination of the axes: seeds, or a tuned sweep's search and confirm runs.
  size_t count = tune ? tune->values.size() * tune->seeds.size() + tune->confirm_seeds.size() * (tune->fit ? 3 : 1)
                      : sweep.seeds.size();
  std::vector<std::string> sizes;
  for (const auto& a : sweep.axes) {
    count = count > kMaxPoints ? count : count * a.values.size();  // saturates past the limit
    sizes.push_back(std::to_string(a.values.size()));
  }
  if (count > kMaxPoints) {
    sizes.push_back(tune ? fmt::format("({} values x {} seeds + {} confirm seeds)", tune->values.size(),
                                       tune->seeds.size(), tune->confirm_seeds.size())
                         : fmt::format("{} seeds", sweep.seeds.size()));
    throw ConfigError({fmt::format("{}: axes: more than {} points ({}); split the sweep",
                                   sweep.file, kMaxPoints, join(sizes, " x "))});
  }
  std::vector<SweepPoint> points;
  const auto arms = combinations(sweep);
  for (size_t a = 0; a < arms.size(); ++a) {
    if (tune) {
      if (!rung_searched(sweep, arms[a].rung)) continue;  // a ladder's rung its v* is transferred to
      for (size_t v = 0; v < tune->values.size(); ++v) {
        for (int64_t seed : tune->seeds) points.push_back(tuned_point(sweep, arms[a], a, v, seed, PointPhase::kSearch));
      }
      continue;
    }
    for (int64_t seed : sweep.seeds) {
      SweepPoint p = arms[a];
      p.seed = seed;
      p.name = extend(p.group, fmt::format("seed={}", seed));
      points.push_back(p);
    }
  }
  std::vector<SweepPoint> all = points;
  if (tune) {
    // Every confirm point the selection could give, so that no name can collide later (a fit's
    // points either side of v* are some other selection's confirm points: counted once).
    Sweep plain = sweep;
    plain.tune->fit = false;
    for (size_t v = 0; v < tune->values.size(); ++v) {
      const auto more = confirm_points(plain, std::vector<int>(arms.size(), static_cast<int>(v)));
      all.insert(all.end(), more.begin(), more.end());
    }
  }
  check_names(sweep, all);
  return points;
}

std::string point_run_dir(const std::string& sweep_dir, const SweepPoint& point) {
  return (fs::path(sweep_dir) / "runs" / point.name).string();
}

std::vector<std::string> point_overrides(const Sweep& sweep, const SweepPoint& point) {
  std::vector<std::string> out;
  for (const auto& [k, v] : sweep.set) out.push_back(k + "=" + v);
  for (const auto& [k, v] : point.overrides) out.push_back(k + "=" + v);
  out.push_back(fmt::format("seed={}", point.seed));
  return out;
}

std::vector<Config> validate_points(const Sweep& sweep, const std::vector<SweepPoint>& points) {
  std::vector<Config> configs;
  std::vector<std::string> lines;
  std::set<std::string> seen;
  auto add = [&](const std::string& line, const SweepPoint& p) {
    if (seen.insert(line).second) lines.push_back(line + " (point " + p.name + ")");
  };
  for (const auto& p : points) {
    auto overrides = point_overrides(sweep, p);
    overrides.push_back("out_dir=" + json_quote(point_run_dir(sweep.out_dir, p)));
    try {
      configs.push_back(
          check_and_resolve(parse_config_file(sweep.base, overrides), /*check_data_files=*/true));
    } catch (const ConfigError& e) {
      for (const auto& line : e.problems()) {
        // "WHERE: key: message": name the sweep file's line for keys the sweep set.
        const auto a = line.find(": ");
        const auto b = a == std::string::npos ? a : line.find(": ", a + 2);
        if (b == std::string::npos) {
          add(line, p);
          continue;
        }
        const std::string where = line.substr(0, a), key = line.substr(a + 2, b - a - 2);
        const std::string* w =
            (where == "--set" || where == sweep.base) ? owning_key(sweep.where, key) : nullptr;
        add(w ? *w + line.substr(a) : line, p);
      }
    } catch (const UsageError& e) {
      add(fmt::format("{}: {}", sweep.file, e.what()), p);
    }
  }
  if (!lines.empty()) throw ConfigError(lines);
  return configs;
}

std::string dump_sweep(const Sweep& sweep) {
  YAML::Emitter e;
  // A value as YAML where that reads back to the same text (numbers, names, flow lists), else as
  // a quoted string (" pre", "type: rmsnorm", "[a"): point names are made from the text, and the
  // summary finds the runs by the names of the dumped sweep.
  auto value = [&](const std::string& text) {
    try {
      YAML::Node n = YAML::Load(text);
      n.SetStyle(YAML::EmitterStyle::Flow);  // as a block mapping it would become flow in a list
      if (value_text(n) == text) {
        e << n;
        return;
      }
    } catch (const YAML::Exception&) {
    }
    e << YAML::DoubleQuoted << text;
  };
  e << YAML::BeginMap;
  e << YAML::Key << "base" << YAML::Value << sweep.base;
  e << YAML::Key << "out_dir" << YAML::Value << sweep.out_dir;
  e << YAML::Key << "set" << YAML::Value << YAML::BeginMap;
  for (const auto& [k, v] : sweep.set) {
    e << YAML::Key << k << YAML::Value;
    value(v);
  }
  e << YAML::EndMap;
  auto lists = [&](const SweepAxis& a) {
    for (size_t k = 0; k < a.keys.size(); ++k) {
      e << YAML::Key << a.keys[k] << YAML::Value << YAML::Flow << YAML::BeginSeq;
      for (const auto& row : a.values) value(row[k]);
      e << YAML::EndSeq;
    }
  };
  e << YAML::Key << "axes" << YAML::Value << YAML::BeginMap;
  for (const auto& a : sweep.axes) {
    if (!a.zip) lists(a);
  }
  e << YAML::EndMap;
  e << YAML::Key << "zip" << YAML::Value << YAML::BeginSeq;
  for (const auto& a : sweep.axes) {
    if (!a.zip) continue;
    e << YAML::BeginMap;
    lists(a);
    e << YAML::EndMap;
  }
  e << YAML::EndSeq;
  if (sweep.tune) {
    const SweepTune& t = *sweep.tune;
    e << YAML::Key << "tune" << YAML::Value << YAML::BeginMap;
    e << YAML::Key << "key" << YAML::Value << t.key;
    e << YAML::Key << "values" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const auto& v : t.values) value(v);
    e << YAML::EndSeq;
    e << YAML::Key << "seeds" << YAML::Value << YAML::Flow << t.seeds;
    e << YAML::Key << "confirm_seeds" << YAML::Value << YAML::Flow << t.confirm_seeds;
    e << YAML::Key << "metric" << YAML::Value << tune_metric_name(t.metric);
    e << YAML::Key << "baseline" << YAML::Value << YAML::Flow << YAML::BeginMap;
    for (const auto& [k, v] : t.baseline) {
      e << YAML::Key << k << YAML::Value;
      value(v);
    }
    e << YAML::EndMap;
    if (!t.ladder.empty()) {
      e << YAML::Key << "ladder" << YAML::Value << t.ladder;
      if (!t.search_at.empty()) {
        e << YAML::Key << "search_at" << YAML::Value << YAML::Flow << YAML::BeginSeq;
        for (const auto& v : t.search_at) value(v);
        e << YAML::EndSeq;
      }
    }
    e << YAML::Key << "test" << YAML::Value << test_name(t.test);
    e << YAML::Key << "margin" << YAML::Value << fmt::format("{}", t.margin);
    if (t.fit) e << YAML::Key << "fit" << YAML::Value << "quadratic";
    e << YAML::Key << "correction" << YAML::Value << correction_name(t.correction);
    e << YAML::EndMap;
  } else {
    e << YAML::Key << "seeds" << YAML::Value << YAML::Flow << sweep.seeds;
  }
  e << YAML::EndMap;
  return "# The resolved sweep (quick and --set applied), written by normlab sweep.\n" +
         std::string(e.c_str()) + "\n";
}

}  // namespace normlab
