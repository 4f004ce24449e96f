#include "sweep/summary.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "core/errors.h"
#include "core/fs.h"
#include "core/json.h"
#include "metrics/stats.h"

namespace normlab {

const std::array<const char*, kNumSummaryColumns> kSummaryColumnNames = {
    "steps",  "final_train_loss", "best_val_loss",         "best_val_excess", "best_val_bpb", "diverged",
    "spike_count", "spike_score", "max_grad_norm",         "grad_ratio_first_last", "final_eff_rank",
    "tok_per_s", "wall_s"};

namespace {
namespace fs = std::filesystem;



std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string csv_number(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : ""; }

// Markdown precision per column; aggregated rows show fractions for counts.
std::string md_number(SummaryColumn c, double v, bool aggregated) {
  if (!std::isfinite(v)) return "-";
  switch (c) {
    case kSteps:
    case kTokPerS:
      return fmt::format("{:.0f}", v);
    case kFinalTrainLoss:
    case kBestValLoss:
    case kBestValExcess:
      return fmt::format("{:.4f}", v);
    case kDiverged:
      return aggregated ? fmt::format("{:.2f}", v) : fmt::format("{:.0f}", v);
    case kSpikes:
      return aggregated ? fmt::format("{:.1f}", v) : fmt::format("{:.0f}", v);
    case kSpikeScore:
      return fmt::format("{:.4f}", v);
    case kWallS:
      return fmt::format("{:.1f}", v);
    default:
      return fmt::format("{:.3g}", v);
  }
}

const std::array<const char*, kNumSummaryColumns> kMarkdownHeaders = {
    "steps",  "final loss", "best val", "excess", "bits/byte", "diverged",
    "spikes", "spike score", "max gnorm", "g0/gL", "eff rank", "tok/s", "wall s"};

constexpr const char* kLegend =
    "final loss: last train loss; best val: lowest validation loss; excess: best val above the "
    "corpus's entropy floor (nats/token); bits/byte: val_bpb at the best val; diverged: 1 if a value went non-finite or the last loss "
    "is not below the first (aggregated: fraction of seeds); spikes: loss and grad-norm spike "
    "records; spike score: share of logged steps (once the detector is active) with loss or grad-norm z "
    "above diag.spike.zscore (OLMo-core's stability score); max gnorm: largest gradient norm before clipping; g0/gL: first- over last-block "
    "gradient norm at step 0; eff rank: effective rank of the head's input states at the last "
    "evaluation; tok/s: median training throughput; wall s: wall time of the point.";

}  // namespace

// The columns are RunDerived's numbers (src/metrics/records.h): nothing is computed here.
SummaryValues summary_values(const RunRecords& r) {
  SummaryValues v;
  v.fill(kNaN);
  if (!r.has_metrics) return v;
  const RunDerived& d = r.derived;
  if (d.last_step >= 0) v[kSteps] = static_cast<double>(d.last_step + 1);
  v[kFinalTrainLoss] = d.final_train_loss;
  v[kBestValLoss] = d.best_val_loss;
  v[kBestValExcess] = d.best_val_excess;
  v[kBestValBpb] = d.best_val_bpb;
  v[kDiverged] = d.diverged;
  v[kSpikes] = static_cast<double>(d.spikes);
  v[kSpikeScore] = d.spike_score;
  v[kMaxGradNorm] = d.max_grad_norm;
  v[kGradRatioFirstLast] = d.grad_ratio_first_last;
  v[kFinalEffRank] = d.final_eff_rank;
  v[kTokPerS] = d.tok_per_s;
  return v;
}

SummaryValues run_metrics(const std::string& metrics_path, double spike_zscore) {
  RunInfo info;
  info.spike_zscore = spike_zscore;
  return summary_values(read_records(metrics_path, info));
}

const char* status_name(PointStatus s) {
  switch (s) {
    case PointStatus::kPending: return "pending";
    case PointStatus::kRunning: return "running";
    case PointStatus::kDone: return "done";
    case PointStatus::kDiverged: return "diverged";
    case PointStatus::kFailed: return "failed";
  }
  return "pending";
}

bool is_finished(PointStatus s) { return s == PointStatus::kDone || s == PointStatus::kDiverged; }

std::optional<PointRecord> read_point_record(const std::string& run_dir) {
  const std::string path = (fs::path(run_dir) / "point.json").string();
  if (!file_exists(path)) return std::nullopt;
  try {
    const YAML::Node j = YAML::Load(read_file(path));
    PointRecord r;
    const std::string status = j["status"].as<std::string>();
    bool known = false;
    for (PointStatus st : {PointStatus::kPending, PointStatus::kRunning, PointStatus::kDone, PointStatus::kDiverged,
                           PointStatus::kFailed}) {
      if (status == status_name(st)) {
        r.status = st;
        known = true;
      }
    }
    if (!known) return std::nullopt;  // not a status this binary writes: as if never recorded
    if (j["exit_code"] && !j["exit_code"].IsNull()) r.exit_code = j["exit_code"].as<int>();
    r.wall_s = json_number_or_nan(j["wall_s"]);
    return r;
  } catch (const YAML::Exception&) {
    return std::nullopt;  // unreadable: treat the point as never recorded
  }
}

void write_point_record(const std::string& run_dir, const SweepPoint& point,
                        const PointRecord& record) {
  JsonObject overrides;
  for (const auto& [k, v] : point.overrides) overrides.add(k, v);
  JsonObject j;
  j.add("name", point.name)
      .add("overrides", overrides)
      .add("seed", point.seed)
      .add("status", status_name(record.status));
  if (record.exit_code) {
    j.add("exit_code", *record.exit_code);
  } else {
    j.add_raw("exit_code", "null");
  }
  j.add("wall_s", record.wall_s);
  write_file_atomic((fs::path(run_dir) / "point.json").string(), j.str() + "\n");
}

SweepSummary summarise_sweep(const Sweep& sweep, const std::vector<SweepPoint>& points,
                             const std::string& sweep_dir) {
  SweepSummary s;
  s.sweep_dir = sweep_dir;
  s.keys = name_keys(sweep);
  std::vector<std::string> groups;  // in order of first appearance
  std::map<std::string, std::vector<size_t>> members;
  for (const auto& p : points) {
    const std::string run = point_run_dir(sweep_dir, p);
    SummaryRow r;
    r.row = "run";
    r.name = p.name;
    r.phase = p.phase;
    for (const auto& [k, v] : p.overrides) r.axis_values.push_back(v);
    r.seed = std::to_string(p.seed);
    r.values = file_exists((fs::path(run) / "metrics.jsonl").string()) ? summary_values(read_run(run))
                                                                        : summary_values(RunRecords{});
    const auto rec = read_point_record(run);
    r.status = status_name(rec ? rec->status : PointStatus::kPending);
    r.values[kWallS] = rec ? rec->wall_s : kNaN;
    if (!members.count(p.group)) groups.push_back(p.group);
    members[p.group].push_back(s.rows.size());
    s.rows.push_back(r);
  }
  for (const auto& g : groups) {
    const auto& idx = members[g];
    SummaryRow mean = s.rows[idx[0]], std_row;
    mean.row = "mean";
    mean.name = g;
    mean.seed.clear();
    int64_t with_metrics = 0, done = 0;
    for (size_t i : idx) {
      with_metrics += std::isfinite(s.rows[i].values[kSteps]) ? 1 : 0;
      done += s.rows[i].status == "done" ? 1 : 0;
    }
    mean.n = with_metrics;
    mean.status = fmt::format("{}/{} done", done, idx.size());
    std_row = mean;
    std_row.row = "std";
    for (int c = 0; c < kNumSummaryColumns; ++c) {
      std::vector<double> values;
      for (size_t i : idx) values.push_back(s.rows[i].values[c]);
      const SeedStats st = seed_stats(values);
      mean.values[c] = st.mean;
      std_row.values[c] = st.std;
    }
    s.rows.push_back(mean);
    s.rows.push_back(std_row);
  }
  return s;
}

SweepSummary summarise_sweep_dir(const Sweep& sweep, const std::string& sweep_dir) {
  std::vector<SweepPoint> points = expand_sweep(sweep);
  if (!sweep.tune) return summarise_sweep(sweep, points, sweep_dir);
  TuneSummary tune = summarise_tune(sweep, sweep_dir);
  if (tune.search_complete) {
    const auto confirm = confirm_points(sweep, tune.selected());
    points.insert(points.end(), confirm.begin(), confirm.end());
    // tune.fit_extend: the confirm runs a walk took beyond the brackets, wherever they exist.
    if (sweep.tune->fit_extend > 0) {
      std::set<std::string> listed;
      for (const SweepPoint& p : confirm) listed.insert(p.name);
      for (size_t v = 0; v < sweep.tune->values.size(); ++v) {
        for (const SweepPoint& p : confirm_points_at(sweep, std::vector<int>(tune.arms.size(), static_cast<int>(v)))) {
          if (!listed.count(p.name) && fs::exists(point_run_dir(sweep_dir, p))) {
            listed.insert(p.name);
            points.push_back(p);
          }
        }
      }
    }
  }
  SweepSummary s = summarise_sweep(sweep, points, sweep_dir);
  s.tune = std::move(tune);
  return s;
}

std::string summary_csv(const SweepSummary& s) {
  std::vector<std::string> header = {"row", "name"};
  header.insert(header.end(), s.keys.begin(), s.keys.end());
  header.insert(header.end(), {"seed", "n", "status"});
  header.insert(header.end(), kSummaryColumnNames.begin(), kSummaryColumnNames.end());
  std::string out;
  auto line = [&](const std::vector<std::string>& fields) {
    for (size_t i = 0; i < fields.size(); ++i) out += (i ? "," : "") + csv_field(fields[i]);
    out += "\n";
  };
  line(header);
  for (const auto& r : s.rows) {
    std::vector<std::string> f = {r.row, r.name};
    f.insert(f.end(), r.axis_values.begin(), r.axis_values.end());
    f.insert(f.end(), {r.seed, std::to_string(r.n), r.status});
    for (double v : r.values) f.push_back(csv_number(v));
    line(f);
  }
  return out;
}

std::string summary_markdown(const SweepSummary& s) {
  const auto shorts = short_names(s.keys);
  // A tuned sweep's verdicts come first: they are what the sweep was run for.
  std::string out = fmt::format("# Sweep {}\n\n{}{}\n\n## Runs\n\n", s.sweep_dir,
                                s.tune ? tune_markdown(*s.tune) + "\n" : "", kLegend);
  auto header = [&](bool aggregated) {
    std::string h = "|", rule = "|";
    for (const auto& k : s.keys) {
      h += " " + shorts.at(k) + " |";
      rule += "---|";
    }
    h += aggregated ? " n | status |" : " seed | status |";
    rule += "---:|---|";
    for (int c = aggregated ? 1 : 0; c < kNumSummaryColumns; ++c) {
      h += fmt::format(" {} |", kMarkdownHeaders[c]);
      rule += "---:|";
    }
    out += h + "\n" + rule + "\n";
  };
  auto cells = [&](const SummaryRow& r) {
    std::string line = "|";
    for (const auto& v : r.axis_values) line += " " + v + " |";
    return line;
  };
  header(false);
  for (const auto& r : s.rows) {
    if (r.row != "run") continue;
    std::string line = cells(r) + fmt::format(" {} | {} |", r.seed, r.status);
    for (int c = 0; c < kNumSummaryColumns; ++c) {
      line += " " + md_number(static_cast<SummaryColumn>(c), r.values[c], false) + " |";
    }
    out += line + "\n";
  }
  const auto count = [&](const char* row) {
    return std::count_if(s.rows.begin(), s.rows.end(),
                         [&](const SummaryRow& r) { return r.row == row; });
  };
  if (count("run") == count("mean")) return out;  // one seed per combination: nothing to aggregate
  out += "\n## Mean ± std over seeds\n\n";
  header(true);
  for (size_t i = 0; i + 1 < s.rows.size(); ++i) {
    const SummaryRow& m = s.rows[i];
    if (m.row != "mean") continue;
    const SummaryRow& sd = s.rows[i + 1];
    std::string line = cells(m) + fmt::format(" {} | {} |", m.n, m.status);
    for (int c = 1; c < kNumSummaryColumns; ++c) {
      const auto col = static_cast<SummaryColumn>(c);
      const std::string mv = md_number(col, m.values[c], true);
      line += " " + (mv == "-" || m.n < 2 ? mv : mv + " ± " + md_number(col, sd.values[c], true)) +
              " |";
    }
    out += line + "\n";
  }
  return out;
}

std::string summary_json(const SweepSummary& s) {
  std::string rows;
  for (const auto& r : s.rows) {
    JsonObject j;
    j.add("row", r.row).add("name", r.name);
    for (size_t k = 0; k < s.keys.size(); ++k) j.add(s.keys[k], r.axis_values[k]);
    if (r.seed.empty()) {
      j.add_raw("seed", "null");
    } else {
      j.add_raw("seed", r.seed);
    }
    j.add("n", r.n).add("status", r.status);
    if (r.phase != PointPhase::kPlain) j.add("phase", phase_name(r.phase));
    for (int c = 0; c < kNumSummaryColumns; ++c) j.add(kSummaryColumnNames[c], r.values[c]);
    rows += (rows.empty() ? "" : ",") + j.str();
  }
  // Each axis key with the short name the point names and plots use (sweep_points.h).
  const auto shorts = short_names(s.keys);
  std::vector<JsonObject> axes;
  for (const auto& k : s.keys) axes.push_back(JsonObject().add("key", k).add("short", shorts.at(k)));
  JsonObject j;
  j.add("sweep", s.sweep_dir).add("axes", axes).add_raw("rows", "[" + rows + "]");
  if (s.tune) j.add_raw("tune", tune_json(*s.tune));
  return j.str() + "\n";
}

void write_summary_files(const SweepSummary& s) {
  write_file_atomic((fs::path(s.sweep_dir) / "summary.csv").string(), summary_csv(s));
  write_file_atomic((fs::path(s.sweep_dir) / "summary.json").string(), summary_json(s));
  write_file_atomic((fs::path(s.sweep_dir) / "summary.md").string(), summary_markdown(s));
}

bool is_sweep_dir(const std::string& dir) {
  return file_exists((fs::path(dir) / "sweep.yaml").string());
}

bool is_tuned_sweep_dir(const std::string& dir) {
  if (!is_sweep_dir(dir)) return false;
  SweepOptions options;
  options.check_base = false;
  try {
    return parse_sweep_file((fs::path(dir) / "sweep.yaml").string(), options).tune.has_value();
  } catch (const UsageError&) {  // ConfigError included: not readable as a sweep of this binary
    return false;
  }
}

SweepSummary load_sweep_summary(const std::string& sweep_dir) {
  SweepOptions options;
  options.check_base = false;
  const Sweep sweep = parse_sweep_file((fs::path(sweep_dir) / "sweep.yaml").string(), options);
  return summarise_sweep_dir(sweep, sweep_dir);
}

}  // namespace normlab
