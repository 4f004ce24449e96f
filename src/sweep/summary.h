// The sweep's results table (configs/sweeps/README.md, "summary.csv"): one row per run with
// numbers computed from its metrics.jsonl and point.json, then mean and sample-std rows over
// the seeds of each axis combination, and for a tuned sweep its comparison (sweep/tune.h);
// written as summary.csv (for scripts), summary.json (the same as `normlab report --json`) and
// summary.md (for people), and printed by `normlab report SWEEP_DIR`.
#pragma once

#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "metrics/records.h"
#include "sweep/sweep_points.h"
#include "sweep/tune.h"

namespace normlab {

// The numeric columns, in CSV order. NaN = not available (an empty cell).
enum SummaryColumn {
  kSteps,
  kFinalTrainLoss,
  kBestValLoss,
  kBestValExcess,
  kBestValBpb,
  kDiverged,
  kSpikes,
  kSpikeScore,
  kMaxGradNorm,
  kGradRatioFirstLast,
  kFinalEffRank,
  kTokPerS,
  kWallS,
  kNumSummaryColumns
};
extern const std::array<const char*, kNumSummaryColumns> kSummaryColumnNames;

using SummaryValues = std::array<double, kNumSummaryColumns>;

// Everything but wall_s: the run's derived numbers (src/metrics/records.h) as columns (NaN where
// the records do not have them; all NaN when there is no metrics.jsonl).
SummaryValues summary_values(const RunRecords& run);
// The same from one metrics.jsonl file on its own; spike_zscore: the run's diag.spike.zscore.
SummaryValues run_metrics(const std::string& metrics_path, double spike_zscore = 6);

// Where a point stands. done and diverged are finished (a re-run skips them); running is a
// point that was started (or interrupted: a re-run resumes it); failed exited with an error.
enum class PointStatus { kPending, kRunning, kDone, kDiverged, kFailed };
const char* status_name(PointStatus s);  // "pending", "running", "done", "diverged", "failed"
bool is_finished(PointStatus s);         // done or diverged

// <run>/point.json: the sweep's record of one point.
struct PointRecord {
  PointStatus status = PointStatus::kPending;
  std::optional<int> exit_code;
  double wall_s = std::nan("");
};
std::optional<PointRecord> read_point_record(const std::string& run_dir);
void write_point_record(const std::string& run_dir, const SweepPoint& point,
                        const PointRecord& record);

struct SummaryRow {
  std::string row;  // run | mean | std
  std::string name;
  PointPhase phase = PointPhase::kPlain;  // a tuned sweep's search or confirm run
  std::vector<std::string> axis_values;  // one per axis key, YAML text as written
  std::string seed;                      // empty on mean/std rows
  int64_t n = 1;
  std::string status;
  SummaryValues values;
};

struct SweepSummary {
  std::string sweep_dir;
  std::vector<std::string> keys;  // axis keys (then a tuned sweep's key), full dotted
  std::vector<SummaryRow> rows;   // run rows in point order, then mean/std per group
  std::optional<TuneSummary> tune;  // tuned sweeps
};

// Reads every point's run directory under sweep_dir.
SweepSummary summarise_sweep(const Sweep& sweep, const std::vector<SweepPoint>& points,
                             const std::string& sweep_dir);
// The whole sweep directory: every point, and for a tuned sweep its search points, its confirm
// points once the search is complete, and the comparison.
SweepSummary summarise_sweep_dir(const Sweep& sweep, const std::string& sweep_dir);

std::string summary_csv(const SweepSummary& s);
std::string summary_markdown(const SweepSummary& s);
// {"sweep":..,"axes":[..],"rows":[{column: value}, ...]} and, tuned, "tune":{..} (tune_json)
std::string summary_json(const SweepSummary& s);

// summary.csv, summary.json and summary.md, each written atomically.
void write_summary_files(const SweepSummary& s);

// `normlab report` on a sweep directory: recomputes the summary from the runs (nothing written).
bool is_sweep_dir(const std::string& dir);
// A sweep directory whose sweep.yaml has a tune: block (false where it does not parse).
bool is_tuned_sweep_dir(const std::string& dir);
SweepSummary load_sweep_summary(const std::string& sweep_dir);

}  // namespace normlab
