#include "sweep/sweep_points.h"

#include <fmt/format.h>

#include <filesystem>
#include <set>

#include "config/load.h"
#include "core/errors.h"
#include "core/json.h"
#include "sweep/sweep_yaml.h"
#include "train/run_config.h"

namespace normlab {

namespace {
namespace fs = std::filesystem;
using namespace sweep_yaml;

// Point names become directory names; keep well below the usual 255-byte limit.
constexpr size_t kMaxNameLength = 200;

// The sweep's own key a run-config problem comes from: the override key equal to the problem's
// key, or the nearest one above or below it in the dotted path.
const std::string* owning_key(const std::map<std::string, std::string>& where,
                              const std::string& key) {
  for (const auto& [k, w] : where) {
    if (k == key || key.rfind(k + ".", 0) == 0 || k.rfind(key + ".", 0) == 0) return &w;
  }
  return nullptr;
}

}  // namespace

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

std::vector<SweepPoint> confirm_points_at(const Sweep& sweep, const std::vector<int>& at) {
  std::vector<SweepPoint> out;
  if (!sweep.tune) return out;
  const auto arms = tune_arms(sweep);
  for (size_t a = 0; a < arms.size() && a < at.size(); ++a) {
    if (at[a] < 0) continue;
    for (int64_t seed : sweep.tune->confirm_seeds) {
      out.push_back(tuned_point(sweep, arms[a], a, static_cast<size_t>(at[a]), seed, PointPhase::kConfirm));
    }
  }
  return out;
}

std::vector<SweepPoint> expand_sweep(const Sweep& sweep) {
  const SweepTune* tune = sweep.tune ? &*sweep.tune : nullptr;
  // Runs per combination of the axes: seeds, or a tuned sweep's search and confirm runs.
  // (a fit's bracket: 3 values, and a fit_extend walk at most fit_extend more: it goes one way)
  const size_t confirm_values = tune && tune->fit ? 3 + static_cast<size_t>(tune->fit_extend) : 1;
  size_t count = tune ? tune->values.size() * tune->seeds.size() + tune->confirm_seeds.size() * confirm_values
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

}  // namespace normlab
