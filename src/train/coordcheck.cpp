#include "train/coordcheck.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include "config/load.h"
#include "core/errors.h"
#include "core/json.h"
#include "core/sha256.h"
#include "metrics/stats.h"
#include "model/parametrizations/parametrization_type.h"
#include "optim/registry.h"
#include "train/device.h"
#include "train/run_config.h"
#include "train/run_data.h"
#include "train/step.h"
#include "train/trainer.h"

namespace normlab {
namespace {


// [t - 1][module][block] of one model and seed.
using RunValues = std::vector<std::vector<std::vector<double>>>;

bool is_block_module(const std::string& name) {
  return name == "attn_out" || name == "ffn_out" || name == "attn_logits" || name == "attn_logits_causal" ||
         name == "stream";
}

// `steps` updates of one model on its seed's first batch, the coordinate statistics of each
// update's forward (the forward after t - 1 updates). A run that stops (a non-finite loss under
// diag.nonfinite: stop) leaves NaN from the next t on.
RunValues run_one(const Config& cfg, const Corpus& data, int64_t steps) {
  const torch::Device device = resolve_device(choice_name(cfg.train.device), "train.device");
  Trainable t = make_trainable(cfg, device);
  t.model->set_coord_capture(true);
  TrainStep step(cfg, t, data, device);
  const auto& names = coord_module_names();
  RunValues out;
  bool stopped = false;
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<std::vector<double>> at(names.size());
    if (stopped) {
      for (size_t m = 0; m < names.size(); ++m) at[m].assign(out.back()[m].size(), kNaN);
    } else {
      int64_t micro_batch = 0;  // the same (first) batch at every update
      StepPlan plan;            // no diagnostics, no records: the update alone
      plan.step = s;
      plan.lr = cfg.optim.lr;  // the peak rate, held: no warmup, no decay
      const StepOutcome o = step.run(micro_batch, plan);
      const LayerSeries& st = t.model->coord_stats();
      for (size_t m = 0; m < names.size(); ++m) {
        for (const auto& v : st.get(names[m])) at[m].push_back(v.item<double>());
      }
      stopped = is_stop(o.action);
    }
    out.push_back(std::move(at));
  }
  return out;
}

std::string exact_number(double v) { return fmt::format("{:.17g}", v); }

// The config of one size: the user's keys, the check's own, the base shape the config's mode
// resolved (so that m_N and m_L move with the size), the size.
Config size_config(const CoordCheckOptions& o, const std::vector<std::string>& keys, const Config& base,
                   const std::string& mode, CoordAxis axis, int64_t size) {
  std::vector<std::string> ov = keys;
  if (mode != base.param.type) {
    ov.push_back("param={type: " + mode + "}");  // sp beside the config's mode (--compare)
  } else {
    // The base shape the config's mode reads, as it resolved it, held at every size.
    const ParamConfig& p = base.param;
    const ParametrizationType* t = find_parametrization(mode);
    for (const auto& [key, value] : {std::pair{"base_width", p.base_width}, std::pair{"base_head_dim", p.base_head_dim},
                                     std::pair{"base_depth", p.base_depth}}) {
      if (t && t->reads_key(key) && value) ov.push_back(std::string("param.") + key + "=" + exact_number(*value));
    }
  }
  if (axis == CoordAxis::kWidth) {
    const int64_t d_ff = std::max<int64_t>(
        1, std::llround(static_cast<double>(base.model.d_ff) * static_cast<double>(size) / static_cast<double>(base.model.d_model)));
    ov.push_back(fmt::format("model.d_model={}", size));
    ov.push_back(fmt::format("model.d_ff={}", d_ff));
    if (o.head_dim > 0) {
      if (size % o.head_dim != 0)
        throw ConfigError({fmt::format("coordcheck at width {}: --head-dim {} does not divide it", size, o.head_dim)});
      ov.push_back(fmt::format("model.n_heads={}", size / o.head_dim));
    }
  } else {
    ov.push_back(fmt::format("model.n_layers={}", size));
  }
  try {
    return load_run_config(o.config_path, ov);
  } catch (const ConfigError& e) {
    std::vector<std::string> lines;
    for (const auto& p : e.problems()) lines.push_back(fmt::format("coordcheck at {} {}: {}", axis_name(axis), size, p));
    throw ConfigError(lines);
  }
}

void check_sizes(const std::vector<int64_t>& sizes, const char* flag) {
  if (sizes.empty()) return;
  if (sizes.size() < 2) throw UsageError(fmt::format("{}: give at least two sizes to fit a slope", flag));
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 1) throw UsageError(fmt::format("{}: {} is not a size (expected integers >= 1)", flag, sizes[i]));
    if (i > 0 && sizes[i] <= sizes[i - 1])
      throw UsageError(fmt::format("{}: sizes must increase ({} after {})", flag, sizes[i], sizes[i - 1]));
  }
}

// The configs of one check's sizes, in order.
std::vector<Config> size_configs(const CoordCheckOptions& o, const std::vector<std::string>& keys, const Config& base,
                                 const std::string& mode, CoordAxis axis) {
  std::vector<Config> out;
  for (const int64_t size : axis == CoordAxis::kWidth ? o.widths : o.depths)
    out.push_back(size_config(o, keys, base, mode, axis, size));
  return out;
}

// The key of an optimizer's own matrix rate (optim.muon.lr), or "" (AdamW: optim.lr alone).
std::string own_rate_key(const Config& c) {
  const OptimizerEntry* e = find_optimizer(c.optim.type);
  if (e == nullptr || e->section.empty()) return "";
  for (const auto& k : e->keys)
    if (k.name == "lr") return e->section + ".lr";
  return "";
}

CoordCheck run_check(const CoordCheckOptions& o, const std::vector<Config>& configs, const Config& base,
                     const Corpus& data, const std::string& mode, CoordAxis axis,
                     const std::function<void(const CoordCheck&)>& finished_size) {
  const auto t0 = std::chrono::steady_clock::now();
  CoordCheck c;
  c.axis = axis;
  c.param = mode;
  c.optimizer = base.optim.type;
  c.lr = base.optim.lr;
  c.sizes = axis == CoordAxis::kWidth ? o.widths : o.depths;
  c.planned_sizes = static_cast<int64_t>(c.sizes.size());
  c.steps = o.steps;
  c.seeds = o.seeds;
  c.head_dim = axis == CoordAxis::kWidth ? o.head_dim : 0;
  c.fingerprint = coord_config_fingerprint(configs[0], base.seed);
  const auto& names = coord_module_names();
  for (const auto& n : names) {
    CoordModule m;
    m.name = n;
    m.per_block = is_block_module(n);
    m.values.assign(static_cast<size_t>(o.steps), {});
    m.seed_values.assign(static_cast<size_t>(o.steps), {});
    c.modules.push_back(m);
  }
  for (size_t si = 0; si < c.sizes.size(); ++si) {
    const int64_t size = c.sizes[si];
    Config cfg = configs[si];
    std::vector<RunValues> runs;
    for (int64_t k = 0; k < o.seeds; ++k) {
      cfg.seed = base.seed + k;
      runs.push_back(run_one(cfg, data, o.steps));
    }
    // Each seed's entries and their seed mean (NaN when any seed's is).
    for (size_t m = 0; m < names.size(); ++m) {
      for (int64_t s = 0; s < o.steps; ++s) {
        std::vector<double> mean(runs[0][s][m].size(), 0.0);
        std::vector<std::vector<double>> per_seed;
        for (const auto& r : runs) {
          for (size_t b = 0; b < mean.size(); ++b) mean[b] += r[s][m][b] / static_cast<double>(runs.size());
          per_seed.push_back(r[s][m]);
        }
        c.modules[m].values[s].push_back(mean);
        c.modules[m].seed_values[s].push_back(per_seed);
      }
    }
    spdlog::info("coordcheck {} {} {}: {} seeds x {} updates done", c.param, axis_name(axis), size, o.seeds, o.steps);
    if (finished_size && si >= 1) {
      CoordCheck part = c;
      part.sizes.resize(si + 1);
      fit_coord_slopes(part);
      finished_size(part);
    }
  }
  fit_coord_slopes(c);
  spdlog::info("coordcheck {} over {}: {:.1f} s", c.param, axis_name(axis),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return c;
}

// The blocks a per-block module is fitted on, per size, and their track ids: every block over
// width (each size has them all; the id is the block); over depth the blocks at the same relative
// depth in every model: the middle one (after half of the blocks, (L - 1) / 2; id 1) and the last
// (id 2). Block 0 is not one of them: its relative depth 1/L changes with L, and under CompleteP
// its term joins the stream times m_L^-alpha, so the stream after it shrinks with depth by design.
std::vector<std::pair<int64_t, std::vector<size_t>>> tracks(const CoordCheck& c, const CoordModule& m) {
  const auto& first = m.values[0];
  std::vector<std::pair<int64_t, std::vector<size_t>>> out;  // (id, [size index] -> block index)
  if (c.axis == CoordAxis::kWidth) {
    size_t n = first[0].size();
    for (const auto& v : first) n = std::min(n, v.size());
    for (size_t b = 0; b < n; ++b) out.emplace_back(static_cast<int64_t>(b), std::vector<size_t>(first.size(), b));
  } else {
    for (int place = 1; place <= 2; ++place) {
      std::vector<size_t> idx;
      for (const auto& v : first) {
        const size_t L = v.size();
        idx.push_back(L == 0 ? 0 : place == 1 ? (L - 1) / 2 : L - 1);
      }
      out.emplace_back(place, idx);
    }
  }
  return out;
}

// The slope of log2(curve) against x; a curve exactly 0 at every size has slope 0 (the attention
// logits at t = 1 under init.zero_query do not change with size).
double curve_slope(const std::vector<double>& x, const std::vector<double>& curve) {
  if (std::all_of(curve.begin(), curve.end(), [](double v) { return v == 0; })) return 0.0;
  std::vector<double> y;
  for (const double v : curve) y.push_back(v > 0 ? std::log2(v) : kNaN);
  return least_squares_slope(x, y);
}

// Each seed's slope of one track at one t (empty without per-seed values), and the 95 % Student t
// interval of their mean.
void seed_interval(const CoordModule& m, size_t s, const std::vector<size_t>& blocks, const std::vector<double>& x,
                   std::vector<double>& slopes, double& lo, double& hi) {
  slopes.clear();
  lo = hi = kNaN;
  if (s >= m.seed_values.size() || m.seed_values[s].size() != blocks.size() || m.seed_values[s].empty()) return;
  const size_t n = m.seed_values[s][0].size();
  for (const auto& by_seed : m.seed_values[s])
    if (by_seed.size() != n) return;
  for (size_t k = 0; k < n; ++k) {
    std::vector<double> curve;
    for (size_t i = 0; i < blocks.size(); ++i) {
      const auto& v = m.seed_values[s][i][k];
      curve.push_back(blocks[i] < v.size() ? v[blocks[i]] : kNaN);
    }
    slopes.push_back(curve_slope(x, curve));
  }
  if (n < 2 || std::any_of(slopes.begin(), slopes.end(), [](double v) { return std::isnan(v); })) return;
  // The one-sample interval of the sweeps' paired test (metrics/stats.h), against 0.
  const TTest t = paired_test(slopes, std::vector<double>(n, 0.0));
  lo = t.ci95_low;
  hi = t.ci95_high;
}

}  // namespace

std::string coord_config_fingerprint(Config c, int64_t seed) {
  c.seed = seed;
  // Left out: the rates (a split's checks differ in them), where the run writes and with how many
  // threads, and every key at its default, so that a key a later build adds (at its default)
  // leaves the fingerprints of earlier checks as they were. The data files count by their folder and
  // name, so the same check run from another checkout or machine keeps its fingerprint.
  const std::string own = own_rate_key(c);
  auto left_out = [&](const std::string& k) {
    return k == "optim.lr" || (!own.empty() && k == "optim." + own) || k == "out_dir" || k == "train.threads";
  };
  auto short_paths = [](Config& x) {
    for (PathList* files : {&x.data.train, &x.data.val})
      for (auto& f : *files) {
        const std::filesystem::path path(f);
        f = (path.parent_path().filename() / path.filename()).string();  // data/toy/train.txt: toy/train.txt
      }
  };
  Config base_config;
  short_paths(c);
  short_paths(base_config);
  std::map<std::string, std::string> defaults;
  for (auto& [k, v] : flat_values(base_config)) defaults.emplace(k, v);
  std::string text;
  for (const auto& [k, v] : flat_values(c)) {
    const auto d = defaults.find(k);
    if (!left_out(k) && (d == defaults.end() || d->second != v)) text += k + "=" + v + "\n";
  }
  return sha256_hex(text);
}

double established_slope(double lo, double hi) {
  if (std::isnan(lo) || std::isnan(hi)) return kNaN;
  if (lo > 0) return lo;
  if (hi < 0) return -hi;
  return 0.0;
}

std::string axis_name(CoordAxis a) { return a == CoordAxis::kWidth ? "width" : "depth"; }

const std::vector<std::string>& coord_module_names() {
  static const std::vector<std::string> names = {"embed",  "attn_out", "ffn_out", "attn_logits", "attn_logits_causal",
                                                 "stream", "head_in",  "logits"};
  return names;
}

void fit_coord_slopes(CoordCheck& c) {
  std::vector<double> x;
  for (const int64_t s : c.sizes) x.push_back(std::log2(static_cast<double>(s)));
  c.worst_after_first = c.steps >= 2 ? 0.0 : kNaN;
  c.worst_module.clear();
  c.worst_t = 0;
  c.established_after_first = c.steps >= 2 ? 0.0 : kNaN;
  c.established_module.clear();
  c.established_t = 0;
  c.established_lo = c.established_hi = kNaN;
  for (auto& m : c.modules) {
    m.slope.clear();
    m.track.clear();
    m.curve.clear();
    m.seed_slopes.clear();
    m.slope_lo.clear();
    m.slope_hi.clear();
    const auto tr = m.per_block ? tracks(c, m)
                                : std::vector<std::pair<int64_t, std::vector<size_t>>>{
                                      {-1, std::vector<size_t>(c.sizes.size(), 0)}};
    for (int64_t s = 0; s < c.steps; ++s) {
      double best = kNaN;
      size_t best_k = 0;
      std::vector<double> best_curve;
      for (size_t k = 0; k < tr.size(); ++k) {
        std::vector<double> curve;
        for (size_t i = 0; i < c.sizes.size(); ++i) {
          const auto& v = m.values[s][i];
          curve.push_back(tr[k].second[i] < v.size() ? v[tr[k].second[i]] : kNaN);
        }
        // NaN (a diverged value, or 0 at some sizes only) outranks any number: it is the worst a
        // check can say.
        const double sl = curve_slope(x, curve);
        const bool worse = best_curve.empty() || (std::isnan(sl) && !std::isnan(best)) ||
                           (!std::isnan(best) && std::abs(sl) > std::abs(best));
        if (worse) {
          best = sl;
          best_k = k;
          best_curve = curve;
        }
      }
      m.slope.push_back(best);
      // No track (a coord.json whose per-block rows are empty at some size): NaN, no block.
      m.track.push_back(tr.empty() ? -1 : tr[best_k].first);
      m.curve.push_back(best_curve);
      std::vector<double> seed_slopes;
      double lo = kNaN, hi = kNaN;
      if (!tr.empty()) seed_interval(m, static_cast<size_t>(s), tr[best_k].second, x, seed_slopes, lo, hi);
      m.seed_slopes.push_back(seed_slopes);
      m.slope_lo.push_back(lo);
      m.slope_hi.push_back(hi);
      if (s >= 1 && !std::isnan(c.worst_after_first) &&
          (std::isnan(best) || std::abs(best) > c.worst_after_first || c.worst_module.empty())) {
        c.worst_after_first = std::isnan(best) ? kNaN : std::abs(best);
        c.worst_module = m.name;
        c.worst_t = s + 1;
      }
      const double est = established_slope(lo, hi);
      if (s >= 1 && !std::isnan(c.established_after_first) &&
          (std::isnan(est) || est > c.established_after_first || c.established_module.empty())) {
        c.established_after_first = est;
        c.established_module = m.name;
        c.established_t = s + 1;
        c.established_lo = lo;
        c.established_hi = hi;
      }
    }
  }
}

std::vector<CoordCheck> run_coordcheck(const CoordCheckOptions& o, const CoordProgress& progress) {
  if (o.widths.empty() && o.depths.empty()) throw UsageError("coordcheck: give --widths and/or --depths");
  check_sizes(o.widths, "--widths");
  check_sizes(o.depths, "--depths");
  if (o.steps < 1 || o.steps > 10000) throw UsageError(fmt::format("--steps: {} is not in [1, 10000]", o.steps));
  if (o.seeds < 1 || o.seeds > 1000) throw UsageError(fmt::format("--seeds: {} is not in [1, 1000]", o.seeds));
  if (o.head_dim < 0) throw UsageError(fmt::format("--head-dim: {} is not a head size (expected an integer >= 1)", o.head_dim));
  if (o.head_dim > 0 && o.widths.empty()) throw UsageError("--head-dim: holds the head size over width; give --widths");
  // One micro-batch per update (the fixed batch is one), and a spike never skips an update.
  std::vector<std::string> keys = o.overrides;
  keys.push_back("train.accum=1");
  keys.push_back("diag.spike.action=log");
  for (size_t i = 0; i < o.lrs.size(); ++i) {
    if (!(o.lrs[i] > 0) || !std::isfinite(o.lrs[i]))
      throw UsageError(fmt::format("--lrs: {} is not a learning rate (expected numbers > 0)", o.lrs[i]));
    if (i > 0 && o.lrs[i] <= o.lrs[i - 1])
      throw UsageError(fmt::format("--lrs: rates must increase ({} after {})", o.lrs[i], o.lrs[i - 1]));
  }
  RunData data;
  const Config base = load_run_config(o.config_path, keys, &data);
  configure_threads(base.train.threads);
  // The rates: the config's, or each of --lrs held in turn (its keys and base config).
  struct Rate {
    std::vector<std::string> keys;
    Config base;
  };
  std::vector<Rate> rates;
  if (o.lrs.empty()) rates.push_back({keys, base});
  for (const double lr : o.lrs) {
    std::vector<std::string> k = keys;
    for (auto& kv : coord_rate_overrides(base, lr)) k.push_back(kv);
    rates.push_back({k, load_run_config(o.config_path, k)});
  }
  const std::string sp = ParamConfig{}.type;  // the standard parametrization, the default
  std::vector<std::string> modes;
  if (o.compare && base.param.type != sp) modes.push_back(sp);
  modes.push_back(base.param.type);
  if (o.compare && base.param.type == sp)
    spdlog::warn("warning: --compare: the config's param.type is sp already; one check per axis");
  // Every size's config is checked before anything runs.
  struct Planned {
    CoordAxis axis;
    std::string mode;
    const Config* base;
    std::vector<Config> configs;
  };
  std::vector<Planned> plan;
  for (const CoordAxis axis : {CoordAxis::kWidth, CoordAxis::kDepth}) {
    if ((axis == CoordAxis::kWidth ? o.widths : o.depths).empty()) continue;
    for (const std::string& mode : modes) {
      for (const auto& r : rates) plan.push_back({axis, mode, &r.base, size_configs(o, r.keys, r.base, mode, axis)});
    }
  }
  if (progress) progress({});
  std::vector<CoordCheck> out;
  for (const auto& p : plan) {
    std::function<void(const CoordCheck&)> finished_size;
    if (progress) {
      finished_size = [&](const CoordCheck& part) {
        std::vector<CoordCheck> so_far = out;
        so_far.push_back(part);
        progress(so_far);
      };
    }
    out.push_back(run_check(o, p.configs, *p.base, data.train, p.mode, p.axis, finished_size));
  }
  return out;
}

std::vector<CoordCheck> read_coord_json(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw UsageError(fmt::format("{}: not a coord.json ({})", path, e.msg));
  }
  auto number = [](const YAML::Node& n) { return n.IsNull() ? kNaN : n.as<double>(); };
  std::vector<CoordCheck> out;
  try {
    if (!root["checks"] || !root["checks"].IsSequence()) throw UsageError(path + ": not a coord.json (no checks list)");
    for (const auto& cj : root["checks"]) {
      CoordCheck c;
      c.axis = cj["axis"].as<std::string>() == "depth" ? CoordAxis::kDepth : CoordAxis::kWidth;
      c.param = cj["param"].as<std::string>();
      c.optimizer = cj["optimizer"].as<std::string>();
      c.lr = number(cj["lr"]);
      c.sizes = cj["sizes"].as<std::vector<int64_t>>();
      c.steps = cj["steps"].as<int64_t>();
      c.seeds = cj["seeds"].as<int64_t>();
      c.head_dim = cj["head_dim"] ? cj["head_dim"].as<int64_t>() : 0;
      c.fingerprint = cj["fingerprint"] ? cj["fingerprint"].as<std::string>() : "";
      c.planned_sizes = cj["planned_sizes"] ? cj["planned_sizes"].as<int64_t>() : static_cast<int64_t>(c.sizes.size());
      if (c.planned_sizes < static_cast<int64_t>(c.sizes.size()))
        throw UsageError(fmt::format("{}: planned_sizes {} is below the {} sizes it holds", path, c.planned_sizes,
                                     c.sizes.size()));
      for (const auto& mj : cj["modules"]) {
        CoordModule m;
        m.name = mj["name"].as<std::string>();
        m.per_block = mj["per_block"].as<bool>();
        auto rows = [&](const YAML::Node& n) {
          std::vector<std::vector<double>> out;
          for (const auto& row : n) {
            std::vector<double> v;
            for (const auto& x : row) v.push_back(number(x));
            out.push_back(v);
          }
          return out;
        };
        bool seeds_kept = true;  // a coord.json written before the seeds were kept has none
        for (const auto& tj : mj["by_t"]) {
          m.values.push_back(rows(tj["values"]));
          std::vector<std::vector<std::vector<double>>> by_size;
          if (tj["seed_values"]) {
            for (const auto& per_size : tj["seed_values"]) by_size.push_back(rows(per_size));
          }
          seeds_kept = seeds_kept && by_size.size() == c.sizes.size();
          m.seed_values.push_back(by_size);
        }
        if (!seeds_kept) m.seed_values.clear();
        if (static_cast<int64_t>(m.values.size()) != c.steps || m.values.empty() ||
            m.values[0].size() != c.sizes.size())
          throw UsageError(fmt::format("{}: module {}: expected {} steps of {} sizes", path, m.name, c.steps, c.sizes.size()));
        c.modules.push_back(m);
      }
      fit_coord_slopes(c);
      out.push_back(c);
    }
  } catch (const YAML::Exception& e) {
    throw UsageError(fmt::format("{}: not a coord.json ({})", path, e.msg));
  }
  return out;
}

std::pair<double, double> fit_rate_orders(const std::vector<double>& lrs, const std::vector<double>& v, double v1) {
  const std::pair<double, double> none{kNaN, kNaN};
  if (lrs.empty() || lrs.size() != v.size() || !std::isfinite(v1) || v1 < 0) return none;
  const double top = *std::max_element(lrs.begin(), lrs.end());
  // Rows: y = (v^2 - v1^2) / v^2 against x1 = u^2 / v^2, x2 = u^4 / v^2, u = lr / top (the
  // coefficients are then the squared terms at the largest rate).
  std::vector<double> y, x1, x2;
  for (size_t r = 0; r < lrs.size(); ++r) {
    if (!std::isfinite(v[r]) || !(v[r] > 0) || !(lrs[r] > 0)) return none;
    const double u = lrs[r] / top, w = v[r] * v[r];
    y.push_back((w - v1 * v1) / w);
    x1.push_back(u * u / w);
    x2.push_back(u * u * u * u / w);
  }
  double s11 = 0, s12 = 0, s22 = 0, s1y = 0, s2y = 0;
  for (size_t r = 0; r < y.size(); ++r) {
    s11 += x1[r] * x1[r];
    s12 += x1[r] * x2[r];
    s22 += x2[r] * x2[r];
    s1y += x1[r] * y[r];
    s2y += x2[r] * y[r];
  }
  auto sse = [&](double A, double B) {
    double e = 0;
    for (size_t r = 0; r < y.size(); ++r) e += (A * x1[r] + B * x2[r] - y[r]) * (A * x1[r] + B * x2[r] - y[r]);
    return e;
  };
  // Non-negative least squares in two unknowns: the free optimum if both are >= 0, else the best
  // of the one-term fits (each clamped at 0).
  const double det = s11 * s22 - s12 * s12;
  double A = kNaN, B = kNaN;
  if (det > 0) {
    A = (s1y * s22 - s2y * s12) / det;
    B = (s2y * s11 - s1y * s12) / det;
  }
  if (!(A >= 0 && B >= 0)) {
    const double a_only = s11 > 0 ? std::max(0.0, s1y / s11) : 0.0, b_only = s22 > 0 ? std::max(0.0, s2y / s22) : 0.0;
    if (sse(a_only, 0) <= sse(0, b_only)) {
      A = a_only;
      B = 0;
    } else {
      A = 0;
      B = b_only;
    }
  }
  return {std::sqrt(A), std::sqrt(B)};
}

namespace {

// The 95 % percentile interval of a bootstrap sample (NaN when it is empty or holds a NaN: a
// resample in which an order fits to 0 at some size has no slope).
void percentile_interval(std::vector<double> boot, double& lo, double& hi) {
  lo = hi = kNaN;
  if (boot.empty() || std::any_of(boot.begin(), boot.end(), [](double v) { return std::isnan(v); })) return;
  std::sort(boot.begin(), boot.end());
  auto at = [&](double q) { return boot[static_cast<size_t>(std::floor(q * static_cast<double>(boot.size() - 1)))]; };
  lo = at(0.025);
  hi = at(0.975);
}

const CoordModule* find_module(const CoordCheck& c, const std::string& name) {
  for (const auto& m : c.modules)
    if (m.name == name) return &m;
  return nullptr;
}

constexpr int kRateSplitResamples = 2000;

RateSplit split_group(const std::vector<const CoordCheck*>& group) {
  const CoordCheck& first = *group[0];
  RateSplit out;
  out.axis = first.axis;
  out.param = first.param;
  out.optimizer = first.optimizer;
  out.sizes = first.sizes;
  out.seeds = first.seeds;
  for (const auto* c : group) out.lrs.push_back(c->lr);
  const double top = out.lrs.back();
  std::vector<double> x;
  for (const int64_t s : first.sizes) x.push_back(std::log2(static_cast<double>(s)));
  for (const auto& m0 : first.modules) {
    std::vector<const CoordModule*> ms;
    for (const auto* c : group) ms.push_back(find_module(*c, m0.name));
    if (std::any_of(ms.begin(), ms.end(), [](const CoordModule* m) { return m == nullptr || m->values.size() < 2; }))
      continue;
    const auto tr = m0.per_block ? tracks(first, m0)
                                 : std::vector<std::pair<int64_t, std::vector<size_t>>>{
                                       {-1, std::vector<size_t>(first.sizes.size(), 0)}};
    // Value of module m at t (0-based), size i, block b (kNaN where absent); seed k < 0: the mean.
    auto at = [](const CoordModule& m, size_t t, size_t i, size_t b, int64_t k) {
      if (k < 0) return i < m.values[t].size() && b < m.values[t][i].size() ? m.values[t][i][b] : kNaN;
      if (t >= m.seed_values.size() || i >= m.seed_values[t].size() ||
          static_cast<size_t>(k) >= m.seed_values[t][i].size() || b >= m.seed_values[t][i][static_cast<size_t>(k)].size())
        return kNaN;
      return m.seed_values[t][i][static_cast<size_t>(k)][b];
    };
    for (const auto& [id, blocks] : tr) {
      RateSplitRow row;
      row.module = m0.name;
      row.track = id;
      // Both orders fitted at every size, each size's values read through value(m, t, i).
      auto fit_sizes = [&](auto&& value) {
        std::vector<std::pair<double, double>> fits;
        for (size_t i = 0; i < first.sizes.size(); ++i) {
          std::vector<double> v;
          for (const auto* m : ms) v.push_back(value(*m, 1, i));
          fits.push_back(fit_rate_orders(out.lrs, v, value(*ms[0], 0, i)));
        }
        return fits;
      };
      // An order's coefficient per size (NaN where it fits to 0: no slope through it).
      auto order = [](const std::vector<std::pair<double, double>>& fits, bool second) {
        std::vector<double> c;
        for (const auto& [fa, fb] : fits) {
          const double f = second ? fb : fa;
          c.push_back(f > 0 ? f : kNaN);
        }
        return c;
      };
      // One fit per size on the seed means, and the fit's largest relative miss.
      auto seed_mean = [&](const CoordModule& m, size_t t, size_t i) { return at(m, t, i, blocks[i], -1); };
      const auto fits = fit_sizes(seed_mean);
      row.first = order(fits, false);
      row.second = order(fits, true);
      for (size_t i = 0; i < first.sizes.size(); ++i) {
        const auto [fa, fb] = fits[i];
        const double v1 = seed_mean(*ms[0], 0, i);
        for (size_t r = 0; r < ms.size(); ++r) {
          const double u = out.lrs[r] / top;
          const double model = std::sqrt(v1 * v1 + fa * fa * u * u + fb * fb * u * u * u * u);
          const double e = std::abs(std::log(model / seed_mean(*ms[r], 1, i)));
          row.max_log_residual = std::isnan(e) || std::isnan(row.max_log_residual) ? kNaN : std::max(row.max_log_residual, e);
        }
      }
      row.first_slope = curve_slope(x, row.first);
      row.second_slope = curve_slope(x, row.second);
      // The seeds' spread: resample the seeds (the same draw at every size and rate, since a seed
      // shares its init across the rates), fit the resample's means, take each order's slope.
      const bool kept = first.seeds >= 2 && std::all_of(ms.begin(), ms.end(), [&](const CoordModule* m) {
        for (size_t t = 0; t < 2; ++t) {
          if (m->seed_values.size() <= t || m->seed_values[t].size() != first.sizes.size()) return false;
          for (const auto& by_seed : m->seed_values[t])
            if (static_cast<int64_t>(by_seed.size()) != first.seeds) return false;
        }
        return true;
      });
      row.first_lo = row.first_hi = row.second_lo = row.second_hi = kNaN;
      if (kept) {
        const size_t K = static_cast<size_t>(first.seeds);
        // The draw is rng() mod K (not a standard distribution, whose output differs between
        // standard libraries): the same checks give the same intervals everywhere.
        std::mt19937_64 rng(0x5eed2026);
        std::vector<size_t> draw(K);
        std::vector<double> boot_first, boot_second;
        for (int b = 0; b < kRateSplitResamples; ++b) {
          for (auto& k : draw) k = static_cast<size_t>(rng() % static_cast<uint64_t>(K));
          auto mean = [&](const CoordModule& m, size_t t, size_t i) {
            double sum = 0;
            for (const size_t k : draw) sum += at(m, t, i, blocks[i], static_cast<int64_t>(k));
            return sum / static_cast<double>(K);
          };
          const auto resample = fit_sizes(mean);
          boot_first.push_back(curve_slope(x, order(resample, false)));
          boot_second.push_back(curve_slope(x, order(resample, true)));
        }
        percentile_interval(boot_first, row.first_lo, row.first_hi);
        percentile_interval(boot_second, row.second_lo, row.second_hi);
      }
      out.rows.push_back(row);
    }
  }
  return out;
}

JsonObject rate_split_object(const RateSplit& s) {
  std::vector<JsonObject> rows;
  for (const auto& r : s.rows) {
    rows.push_back(JsonObject()
                       .add("module", r.module)
                       .add("track", r.track)
                       .add("first", r.first)
                       .add("second", r.second)
                       .add("first_slope", r.first_slope)
                       .add("first_slope_ci", std::vector<double>{r.first_lo, r.first_hi})
                       .add("second_slope", r.second_slope)
                       .add("second_slope_ci", std::vector<double>{r.second_lo, r.second_hi})
                       .add("max_log_residual", r.max_log_residual));
  }
  return JsonObject()
      .add("axis", axis_name(s.axis))
      .add("param", s.param)
      .add("optimizer", s.optimizer)
      .add("sizes", s.sizes)
      .add("seeds", s.seeds)
      .add("lrs", s.lrs)
      .add("rows", rows);
}

}  // namespace

std::vector<std::string> coord_rate_overrides(const Config& base, double lr) {
  std::vector<std::string> out = {"optim.lr=" + exact_number(lr)};
  const std::string own = own_rate_key(base);
  if (!own.empty()) out.push_back("optim." + own + "=" + exact_number(base.optim.keys.number(own) * lr / base.optim.lr));
  return out;
}

std::vector<RateSplit> split_first_update(const std::vector<CoordCheck>& checks) {
  std::vector<std::vector<const CoordCheck*>> groups;
  auto alike = [](const CoordCheck& a, const CoordCheck& b) {
    return a.axis == b.axis && a.param == b.param && a.optimizer == b.optimizer && a.sizes == b.sizes &&
           a.seeds == b.seeds && a.head_dim == b.head_dim && a.fingerprint == b.fingerprint;
  };
  for (const auto& c : checks) {
    if (c.steps < 2 || !(c.lr > 0) || !std::isfinite(c.lr)) continue;
    auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& gr) { return alike(*gr[0], c); });
    if (g == groups.end()) {
      groups.push_back({&c});
    } else if (std::none_of(g->begin(), g->end(), [&](const CoordCheck* o) { return o->lr == c.lr; })) {
      g->push_back(&c);
    } else {
      spdlog::warn("warning: rate split: a second {} check at lr {:.4g}: the first one is used", c.param, c.lr);
    }
  }
  // One init: every module's t = 1 values (the init's forward) are the same at every rate.
  auto same_init = [](const CoordCheck& a, const CoordCheck& b) {
    for (size_t m = 0; m < a.modules.size() && m < b.modules.size(); ++m) {
      if (a.modules[m].name != b.modules[m].name || a.modules[m].values.empty() || b.modules[m].values.empty()) continue;
      const auto& x = a.modules[m].values[0];
      const auto& y = b.modules[m].values[0];
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (x[i].size() != y[i].size()) return false;
        for (size_t k = 0; k < x[i].size(); ++k) {
          const double d = std::abs(x[i][k] - y[i][k]);
          if (d > 1e-9 * std::max(std::abs(x[i][k]), std::abs(y[i][k])) && !(std::isnan(x[i][k]) && std::isnan(y[i][k])))
            return false;
        }
      }
    }
    return true;
  };
  std::vector<RateSplit> out;
  for (auto& g : groups) {
    if (g.size() < 3) continue;
    std::stable_sort(g.begin(), g.end(), [](const CoordCheck* a, const CoordCheck* b) { return a->lr < b->lr; });
    const auto other = std::find_if(g.begin() + 1, g.end(), [&](const CoordCheck* c) { return !same_init(*g[0], *c); });
    if (other != g.end()) {
      spdlog::warn("warning: rate split: the {} checks at lr {:.4g} and {:.4g} differ at t = 1 (not one init): not split",
                   g[0]->param, g[0]->lr, (*other)->lr);
      continue;
    }
    out.push_back(split_group(g));
  }
  return out;
}

std::string rate_split_json(const RateSplit& s) { return rate_split_object(s).str(); }

std::string rate_split_table(const RateSplit& s) {
  auto list = [](const auto& v, const char* f) {
    std::string out;
    for (const auto& x : v) out += (out.empty() ? "" : ", ") + fmt::format(fmt::runtime(f), x);
    return out;
  };
  auto num = [](double v) { return std::isnan(v) ? std::string("nan") : fmt::format("{:.3g}", v); };
  auto slope = [](double v, double lo, double hi) {
    const std::string p = std::isnan(v) ? "nan" : fmt::format("{:+.2f}", v);
    if (std::isnan(lo) || std::isnan(hi)) return p + " [not known]";
    return p + fmt::format(" [{:+.2f}, {:+.2f}]", lo, hi);
  };
  std::string out = fmt::format(
      "the first update by order in the learning rate: over {} ({}), param {}, {} at rates {}, {} seeds\n"
      "mean|x| at t = 2 per size fitted as v1^2 + (a lr)^2 + (b lr^2)^2 (v1: t = 1); the terms a lr and b lr^2 at "
      "lr {:.4g} per size, their slopes against log2 {} [95 % over seeds], and the fit's largest |ln(fit / value)|\n",
      axis_name(s.axis), list(s.sizes, "{}"), s.param, s.optimizer, list(s.lrs, "{:.4g}"), s.seeds, s.lrs.back(),
      axis_name(s.axis));
  out += fmt::format("{:<20} {:>5}  {:<30} {:<22}  {:<30} {:<22}  {:>5}\n", "module", "block", "first order (a lr)",
                     "slope", "second order (b lr^2)", "slope", "fit");
  for (const auto& r : s.rows) {
    std::string a, b;
    for (const double v : r.first) a += (a.empty() ? "" : " ") + num(v);
    for (const double v : r.second) b += (b.empty() ? "" : " ") + num(v);
    const std::string block = r.track < 0 ? "-" : s.axis == CoordAxis::kWidth ? std::to_string(r.track)
                                                  : r.track == 1                ? "mid"
                                                                                : "last";
    out += fmt::format("{:<20} {:>5}  {:<30} {:<22}  {:<30} {:<22}  {:>5}\n", r.module, block, a,
                       slope(r.first_slope, r.first_lo, r.first_hi), b, slope(r.second_slope, r.second_lo, r.second_hi),
                       num(r.max_log_residual));
  }
  return out;
}

std::string coord_json(const std::vector<CoordCheck>& checks) {
  std::vector<JsonObject> cs;
  for (const auto& c : checks) {
    std::vector<JsonObject> ms;
    for (const auto& m : c.modules) {
      std::vector<JsonObject> ts;
      for (size_t s = 0; s < m.slope.size(); ++s) {
        JsonObject t;
        t.add("t", static_cast<int64_t>(s + 1))
            .add("slope", m.slope[s])
            .add("slope_ci", std::vector<double>{m.slope_lo[s], m.slope_hi[s]})
            .add("seed_slopes", m.seed_slopes[s])
            .add("track", m.track[s])
            .add("curve", m.curve[s])
            .add("values", m.values[s]);
        if (s < m.seed_values.size()) {
          std::string per_size;  // [size][seed][block]
          for (const auto& by_seed : m.seed_values[s]) {
            std::string seeds;
            for (const auto& blocks : by_seed) {
              std::string row;
              for (const double v : blocks) row += (row.empty() ? "" : ",") + json_number(v);
              seeds += (seeds.empty() ? "[" : ",[") + row + "]";
            }
            per_size += (per_size.empty() ? "[" : ",[") + seeds + "]";
          }
          t.add_raw("seed_values", "[" + per_size + "]");
        }
        ts.push_back(t);
      }
      ms.push_back(JsonObject().add("name", m.name).add("per_block", m.per_block).add("by_t", ts));
    }
    JsonObject worst, established;
    worst.add("slope", c.worst_after_first).add("module", c.worst_module).add("t", c.worst_t);
    established.add("slope", c.established_after_first)
        .add("module", c.established_module)
        .add("t", c.established_t)
        .add("slope_ci", std::vector<double>{c.established_lo, c.established_hi});
    JsonObject check;
    check.add("axis", axis_name(c.axis))
        .add("param", c.param)
        .add("optimizer", c.optimizer)
        .add("lr", c.lr)
        .add("sizes", c.sizes);
    // Only a check stopped part-way says how many sizes it planned (a finished one's coord.json
    // is as before).
    if (c.planned_sizes > static_cast<int64_t>(c.sizes.size())) check.add("planned_sizes", c.planned_sizes);
    check.add("steps", c.steps)
        .add("seeds", c.seeds)
        .add("head_dim", c.head_dim)
        .add("fingerprint", c.fingerprint)
        .add("worst_after_first", worst)
        .add("established_after_first", established)
        .add("modules", ms);
    cs.push_back(check);
  }
  std::vector<JsonObject> splits;
  for (const auto& sp : split_first_update(checks)) splits.push_back(rate_split_object(sp));
  return JsonObject().add("checks", cs).add("rate_splits", splits).str() + "\n";
}

std::string coord_table(const CoordCheck& c) {
  std::string sizes;
  for (const int64_t s : c.sizes) sizes += (sizes.empty() ? "" : ", ") + std::to_string(s);
  std::string out = fmt::format(
      "coordinate check over {} ({} {}{}), param {}, {} at lr {:.4g} held, {} updates on one batch, {} seeds\n"
      "slope of log2 mean|x| (seed mean) against log2 {}; per-block modules: the largest |slope| over {}\n",
      axis_name(c.axis), c.axis == CoordAxis::kWidth ? "d_model" : "n_layers", sizes,
      c.head_dim > 0 ? fmt::format("; n_heads = d_model / {}", c.head_dim) : "", c.param, c.optimizer, c.lr,
      c.steps, c.seeds, axis_name(c.axis), c.axis == CoordAxis::kWidth ? "blocks" : "the middle and the last block");
  if (c.planned_sizes > static_cast<int64_t>(c.sizes.size()))
    out += fmt::format("stopped part-way: {} of its {} sizes finished, fitted on those\n", c.sizes.size(), c.planned_sizes);
  out += fmt::format("{:<19}", "module");
  for (int64_t s = 1; s <= c.steps; ++s) out += fmt::format(" {:>7}", fmt::format("t={}", s));
  out += "\n";
  for (const auto& m : c.modules) {
    out += fmt::format("{:<19}", m.name);
    for (const double v : m.slope) out += fmt::format(" {:>7}", std::isnan(v) ? "nan" : fmt::format("{:+.3f}", v));
    out += "\n";
  }
  const bool intervals = std::any_of(c.modules.begin(), c.modules.end(), [](const CoordModule& m) {
    return std::any_of(m.slope_lo.begin(), m.slope_lo.end(), [](double v) { return !std::isnan(v); });
  });
  if (intervals) {
    out += "half-width of the 95 % interval of the per-seed slopes' mean (each seed's own slope, Student t)\n";
    for (const auto& m : c.modules) {
      out += fmt::format("{:<19}", m.name);
      for (size_t s = 0; s < m.slope_lo.size(); ++s) {
        const double half = (m.slope_hi[s] - m.slope_lo[s]) / 2;
        out += fmt::format(" {:>7}", std::isnan(half) ? "nan" : fmt::format("{:.3f}", half));
      }
      out += "\n";
    }
  }
  if (c.steps < 2) {
    out += "largest |slope| at t >= 2: none (one update)\n";
  } else {
    out += fmt::format("largest |slope| at t >= 2: {} ({} at t = {})\n",
                       std::isnan(c.worst_after_first) ? "nan" : fmt::format("{:.3f}", c.worst_after_first),
                       c.worst_module, c.worst_t);
    const bool kept = std::any_of(c.modules.begin(), c.modules.end(),
                                  [](const CoordModule& m) { return !m.seed_values.empty(); });
    if (c.seeds < 2) {
      out += "largest |slope| the seeds establish at t >= 2: none (one seed)\n";
    } else if (!kept) {
      out += "largest |slope| the seeds establish at t >= 2: not known (this coord.json keeps only the seed means)\n";
    } else if (std::isnan(c.established_after_first)) {
      out += fmt::format("largest |slope| the seeds establish at t >= 2: nan ({} at t = {})\n", c.established_module,
                         c.established_t);
    } else {
      out += fmt::format(
          "largest |slope| the seeds establish at t >= 2 (the 95 % interval's bound nearest 0): {:.3f} ({} at t = {}: "
          "[{:+.3f}, {:+.3f}])\n",
          c.established_after_first, c.established_module, c.established_t, c.established_lo, c.established_hi);
    }
  }
  return out;
}

}  // namespace normlab
