// `normlab replay` (src/train/README.md, "Replaying a step"): re-runs the updates of a run from the
// last checkpoint before step N up to N with the training step the trainer uses (TrainStep), tells
// whether step N's loss and gradient norm come out bit for bit as logged (a hardware or
// nondeterminism fault when they do not; a data or model cause when they do), and captures steps
// N-1 and N in full: the loss of every row of the batch with the text around its worst positions,
// every per-layer statistic, per-head attention maximum logit and entropy, per-layer gradient
// norms and update ratios. Writes <run>/spikes/step_<N>.autopsy.json and nothing else of the run.
#pragma once

#include <cstdint>
#include <string>

#include "metrics/records.h"

namespace normlab {

// The autopsy (metrics/records.h, Autopsy) and where it was written.
struct ReplayResult : Autopsy {
  std::string autopsy_path;
};

// UsageError when the run, a train record of step N or a checkpoint at or before it is missing.
ReplayResult replay_step(const std::string& run, int64_t step);
std::string replay_json(const ReplayResult& r);
std::string replay_text(const ReplayResult& r);

}  // namespace normlab
