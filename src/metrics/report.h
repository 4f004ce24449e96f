// `normlab report RUN`: a human summary of a run from its metrics.jsonl and config.yaml: final
// and best losses with their excess over the entropy floor, spikes and skipped steps, the
// per-layer gradient-norm profile at the first, middle and last logged steps (Xiong et al. 2020,
// Figure 3), and warnings for attention-entropy collapse and growing attention logits.
#pragma once

#include <string>

namespace normlab {

// Throws UsageError when the run directory or its metrics are missing.
std::string report_text(const std::string& run_dir);
std::string report_json(const std::string& run_dir);

// Warning thresholds (documented in the README).
constexpr double kEntropyCollapseNats = 0.1;  // mean attention entropy of a layer below this
// Max attention logit grew by this factor over the second half of the logged run (last vs
// middle record; attention sharpening early in training is normal) and is above the floor.
constexpr double kLogitGrowthFactor = 2.0;
constexpr double kLogitGrowthFloor = 30.0;

}  // namespace normlab
