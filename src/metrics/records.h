// A run's records as types (src/metrics/README.md, "Records"): the trainer builds them and
// to_json() writes them (with add_task_losses(), the one writer of their keys); read_run() parses
// metrics.jsonl back into the same types, plus every number derived from them, each defined once
// (src/metrics/README.md, "Derived numbers"). `normlab report` (report.cpp), the sweep summary
// (src/sweep/summary.cpp) and scripts/plot.py (through `normlab report --json`) read runs through
// this module and compute nothing on their own.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace normlab {

// Warning thresholds of the report (src/metrics/README.md, "normlab report").
constexpr double kEntropyCollapseNats = 0.1;  // mean attention entropy of a layer below this
// Max attention logit grew by this factor over the second half of the logged run (last vs
// middle record; attention sharpening early in training is normal) and is above the floor.
constexpr double kLogitGrowthFactor = 2.0;
constexpr double kLogitGrowthFloor = 30.0;

// layers.<name> of one train record, in the record's order (name without the "layers." prefix).
using RecordLayers = std::vector<std::pair<std::string, std::vector<double>>>;

// A key absent from a record reads as NaN (numbers), false (flags), -1 (counts) or empty
// (series); to_json() leaves out exactly those. `applied`: the update was made (the record has
// tok_per_s and the gradient norms); a stopped step has neither it nor `skipped`.
struct TrainRecord {
  int64_t step = 0;
  double loss = std::nan(""), lr = std::nan(""), grad_norm = std::nan("");
  double loss_scale = std::nan("");  // fp16 runs
  double loss_z = std::nan(""), grad_norm_z = std::nan("");
  int64_t tokens = -1;  // -1: absent
  bool skipped = false, overflow = false, nonfinite = false;
  bool applied = false;
  double tok_per_s = std::nan("");
  double param_norm = std::nan(""), grad_noise_scale = std::nan("");
  int64_t qk_clipped = -1;
  double grad_norm_embed = std::nan(""), grad_norm_head = std::nan("");
  double logit_max = std::nan(""), lse_mean = std::nan("");
  RecordLayers layers;
  // depth_weights: each depth-attention reader's mean weight per source (AttnRes; empty for other
  // runs; `attnres_weights` in older runs).
  RecordLayers depth_weights;
  std::vector<std::pair<std::string, double>> params;  // diag.per_param: per-tensor gradient norms
  // The series layers.<name>, or nullptr where the record has none.
  const std::vector<double>* layer(const std::string& name) const;
};

// The loss of one evaluation per task label (eval.by_task, `normlab eval --by-task`): the targets
// predicted and their mean loss. add_task_losses() writes them as `by_task`, the one writer of
// that key.
struct TaskLoss {
  int64_t tokens = 0;
  double loss = std::nan("");
};
using TaskLosses = std::map<std::string, TaskLoss>;
class JsonObject;
void add_task_losses(JsonObject& j, const TaskLosses& by_task);

struct EvalRecord {
  int64_t step = 0;
  double val_loss = std::nan(""), eff_rank = std::nan(""), val_excess = std::nan(""), val_bpb = std::nan("");
  bool has_eff_rank = false;  // the key is there (its value may be null: non-finite states)
  TaskLosses by_task;  // eval.by_task (empty without it)
};

struct SpikeRecord {
  int64_t step = 0;
  std::string metric, action;
  double value = std::nan(""), mean = std::nan(""), std = std::nan(""), z = std::nan("");
};

// spikes/step_<N>.json: what a spike's step saw, to replay its batch and see which layers jumped.
struct SpikeForensics {
  struct Score {
    double value = std::nan(""), mean = std::nan(""), std = std::nan(""), z = std::nan("");
  };
  struct Layer {
    std::string layer;  // blocks.<i>, embed, head
    double grad_norm = std::nan(""), rolling_mean = std::nan("");
    double relative_jump() const;  // grad_norm / rolling_mean; NaN without a positive mean
  };
  int64_t step = 0;
  std::string action;
  int64_t window = 0;
  double zscore_threshold = 0;
  Score loss, grad_norm;
  std::vector<std::string> data;  // data.train
  std::string format;
  int64_t ctx = 0;
  int64_t first_micro_batch = 0;
  std::vector<std::vector<int64_t>> offsets;  // window starts of each micro-batch
  std::vector<Layer> layers;  // in model order; the file lists them again by relative jump
};

// spikes/step_<N>.autopsy.json (`normlab replay`, src/train/README.md "Replaying a step"): steps
// N-1 and N of a run re-run from a checkpoint, each captured in full.
struct WorstPosition {  // one position of a row where the loss is among the row's highest
  int64_t position = 0;          // index of the predicted token in the window's targets
  double loss = 0;
  std::vector<int64_t> context;  // the tokens up to it (at most 24) and the target itself last
  std::string text;              // the same as text (decoded, or bytes with escapes)
};
struct RowLoss {
  int64_t micro_batch = 0, row = 0, offset = 0;  // the window's start in the training stream
  double loss = 0;                               // mean next-token cross-entropy over its ctx targets
  std::vector<WorstPosition> worst;              // the 3 highest, highest first
};
struct StepCapture {  // everything captured of one step, with the weights it was taken with
  int64_t step = 0;
  double loss = 0, grad_norm = 0;  // what the training step computed
  std::string action;              // update, or why it was skipped
  std::vector<RowLoss> rows;
  double rows_mean = 0;  // mean of the rows' losses (= loss up to float rounding)
  RecordLayers layers;   // per-layer series: the first micro-batch's statistics, gradient norms, update ratio
  std::vector<std::vector<double>> head_logit_max, head_entropy;  // [L][H], first micro-batch
};
struct Autopsy {
  std::string run, checkpoint;
  int64_t step = 0, updates_replayed = 0;
  bool reproducible = false;  // loss and grad_norm equal the logged ones in every bit
  double loss = 0, logged_loss = 0, grad_norm = 0, logged_grad_norm = 0;
  StepCapture at;
  std::optional<StepCapture> before;  // step N-1 (none for N = 0)
};

// machine.json: where a run ran, one entry per start of the process (a resume appends one).
struct MachineRecord {
  int64_t step = 0;  // the step that start began at
  std::string host, cpu, device, torch, commit;  // core/system.h, core/torch_compat.h
  // What a comparison must not mix: the CPU model and the device's kind ("cpu", or the GPU's model
  // without its index): "Intel(R) Xeon(R) Platinum 8481C | cpu".
  std::string kind() const;
};
std::string machine_json(const std::vector<MachineRecord>& starts);  // the whole file
// <dir>/machine.json's entries; empty when the file is missing or does not parse (runs from
// before it existed).
std::vector<MachineRecord> read_machines(const std::string& run_dir);

// The JSON line of each record kind, keys in the order the contract lists them.
std::string to_json(const TrainRecord& r);
std::string to_json(const EvalRecord& r);
std::string to_json(const SpikeRecord& r);
std::string to_json(const SpikeForensics& f);
std::string to_json(const Autopsy& a);

// From the run's config.yaml (defaults where there is none).
struct RunInfo {
  std::string layout, norm, val_path, train_path;  // data paths: the one file, else empty
  std::string residual = "add", value_residual = "none";  // model.residual.type, model.value_residual
  int64_t n_layers = 0, d_model = 0, ctx = 0;
  double spike_zscore = 6;   // diag.spike.zscore
  std::string config_error;  // config.yaml exists but does not parse: the defaults are used
};

// The per-layer gradient norms of one applied train record (Xiong et al. 2020, Figure 3).
struct GradProfile {
  int64_t step = 0;
  std::vector<double> blocks;  // layers.grad_norm
  double embed = std::nan(""), head = std::nan("");
  double first_last() const;  // blocks.front() / blocks.back(), NaN without blocks
};

// The derived numbers (src/metrics/README.md, "Derived numbers"). NaN / -1 = not available.
struct RunDerived {
  int64_t last_step = -1;  // step of the last train record (skipped ones included)
  int64_t tokens = 0;      // tokens of the last train record that has them
  int64_t skipped = 0, nonfinite = 0;
  double final_train_loss = std::nan("");  // loss of the last applied train record
  double final_val_loss = std::nan(""), best_val_loss = std::nan("");
  int64_t final_val_step = -1, best_val_step = -1;
  double entropy_floor = std::nan(""), final_val_excess = std::nan(""), best_val_excess = std::nan("");
  double train_entropy_floor = std::nan("");  // of data.train (floor.json), for train-loss plots
  // Causal attention spread evenly over the model.ctx = T positions (query t sees t + 1 keys): its
  // mean entropy, mean_t ln(t + 1), and its mean weight on position 0 over t = 1..T-1,
  // (H_T - 1) / (T - 1), H_T the harmonic number. The levels the attention statistics start from.
  double uniform_attn_entropy = std::nan(""), uniform_attn_sink = std::nan("");
  double final_val_bpb = std::nan(""), best_val_bpb = std::nan("");  // val_bpb of those eval records
  // val_bpb / val_loss of the best eval record that has both: the factor that turns a val loss in
  // nats/token into bits/byte (1 / (ln 2 x bytes per token of the val set)); NaN without val_bpb.
  double bpb_per_nat = std::nan("");
  int64_t spikes = 0;  // spike records
  double spike_score = std::nan("");
  double diverged = std::nan("");  // 1 or 0; NaN when there is nothing to judge
  double max_grad_norm = std::nan(""), tok_per_s = std::nan(""), grad_ratio_first_last = std::nan("");
  double final_eff_rank = std::nan("");
  std::vector<GradProfile> profiles;  // first, middle, last applied records with layers.grad_norm
  int64_t diag_index = -1;            // index in train of the last full-diagnostics record
  std::vector<std::string> warnings;
};

// A step autopsy `normlab replay` wrote: spikes/step_<N>.autopsy.json.
struct AutopsyRecord {
  int64_t step = 0;
  bool reproducible = false;
  double loss = std::nan(""), logged_loss = std::nan("");
  std::string path;
};

struct RunRecords {
  std::string dir;
  std::vector<MachineRecord> machines;  // machine.json
  std::vector<AutopsyRecord> autopsies;  // by step
  RunInfo info;
  std::vector<TrainRecord> train;
  std::vector<EvalRecord> eval;
  std::vector<SpikeRecord> spikes;
  RunDerived derived;
  bool has_metrics = false;  // metrics.jsonl exists
  const TrainRecord* diag_record() const {
    return derived.diag_index >= 0 ? &train[static_cast<size_t>(derived.diag_index)] : nullptr;
  }
};

// Statistics over the seeds of one group (src/metrics/README.md, "Seed statistics"): the sweep
// summary's mean and std rows, `normlab compare --by` and the sweep plots all take them from here.
// Over the finite values only: a seed without one (no record yet, or a NaN / inf after it
// diverged) is left out and counted in `missing`; a diverged seed whose value is finite counts
// like any other seed.
struct SeedStats {
  int64_t n = 0, missing = 0;
  double mean = std::nan(""), std = std::nan("");  // std: sample standard deviation (n - 1), NaN with n < 2
};
SeedStats seed_stats(const std::vector<double>& values);

// <dir>/metrics.jsonl and <dir>/config.yaml. Throws UsageError when dir is not a directory or has
// no metrics.jsonl.
RunRecords read_run(const std::string& dir);
// read_run for the commands that read one run's records (`normlab report`, `normlab compare`):
// a UsageError (exit 2, one line) when metrics.jsonl holds no valid train or eval record.
RunRecords read_run_with_records(const std::string& dir);
// One metrics.jsonl file on its own, with the run facts that would come from config.yaml (at least
// spike_zscore; val_path for the entropy-floor fallback). A missing file gives no records.
RunRecords read_records(const std::string& metrics_path, const RunInfo& info = {});

// The runs a command-line argument names: the directory itself when it holds metrics.jsonl, else
// a sweep's runs/*/ that do, in sorted order. UsageError when there are none.
std::vector<std::string> run_dirs(const std::string& run_or_sweep);

// The derivations, exposed for tests: fills r.derived from r's records and r.info.
void derive(RunRecords& r);

}  // namespace normlab
