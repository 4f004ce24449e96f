// `normlab replay` (src/train/README.md, "Replaying a step"): re-runs the updates of a run from the
// last checkpoint before step N up to N with the training step the trainer uses (TrainStep), tells
// whether step N's loss and gradient norm come out bit for bit as logged (a hardware or
// nondeterminism fault when they do not; a data or model cause when they do), and captures steps
// N-1 and N in full: the loss of every row of the batch with the text around its worst positions,
// every per-layer statistic, per-head attention maximum logit and entropy, per-layer gradient
// norms and update ratios. Writes <run>/spikes/step_<N>.autopsy.json and nothing else of the run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace normlab {

// One position of a row where the loss is among the row's highest.
struct WorstPosition {
  int64_t position = 0;             // index of the predicted token in the window's targets
  double loss = 0;
  std::vector<int64_t> context;     // the tokens up to it (at most 24) and the target itself last
  std::string text;                 // the same as text (decoded, or bytes with escapes)
};

struct RowLoss {
  int64_t micro_batch = 0, row = 0, offset = 0;  // the window's start in the training stream
  double loss = 0;                               // mean next-token cross-entropy over its ctx targets
  std::vector<WorstPosition> worst;              // the 3 highest, highest first
};

// Everything captured of one step, with the weights it was taken with.
struct StepCapture {
  int64_t step = 0;
  double loss = 0, grad_norm = 0;  // what the training step computed
  std::string action;              // update, or why it was skipped
  std::vector<RowLoss> rows;
  double rows_mean = 0;            // mean of the rows' losses (= loss up to float rounding)
  std::vector<std::pair<std::string, std::vector<double>>> layers;  // per-layer series
  std::vector<std::vector<double>> head_logit_max, head_entropy;   // [L][H], first micro-batch
};

struct ReplayResult {
  std::string run, checkpoint;
  int64_t step = 0, updates_replayed = 0;
  bool reproducible = false;  // loss and grad_norm equal the logged ones in every bit
  double loss = 0, logged_loss = 0, grad_norm = 0, logged_grad_norm = 0;
  StepCapture at;
  std::optional<StepCapture> before;  // step N-1 (none for N = 0)
  std::string autopsy_path;
};

// UsageError when the run, a train record of step N or a checkpoint at or before it is missing.
ReplayResult replay_step(const std::string& run, int64_t step);
std::string replay_json(const ReplayResult& r);
std::string replay_text(const ReplayResult& r);

}  // namespace normlab
