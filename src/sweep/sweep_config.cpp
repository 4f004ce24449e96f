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
    if (!t.given.empty()) {
      e << YAML::Key << "given" << YAML::Value << YAML::BeginSeq;
      for (const auto& g : t.given) {
        e << YAML::Flow << YAML::BeginMap;
        for (const auto& [k, v] : g.arm) {
          e << YAML::Key << k << YAML::Value;
          value(v);
        }
        e << YAML::Key << "value" << YAML::Value;
        value(g.text);
        e << YAML::EndMap;
      }
      e << YAML::EndSeq;
    }
    e << YAML::Key << "test" << YAML::Value << test_name(t.test);
    e << YAML::Key << "margin" << YAML::Value << fmt::format("{}", t.margin);
    if (t.fit) e << YAML::Key << "fit" << YAML::Value << "quadratic";
    if (t.fit_extend > 0) e << YAML::Key << "fit_extend" << YAML::Value << t.fit_extend;
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
