// `normlab report RUN`: a human summary of a run from its records (read and derived by
// metrics/records.h, nothing computed here): final
// and best losses with their excess over the entropy floor, spikes and skipped steps, the
// per-layer gradient-norm profile at the first, middle and last logged steps (Xiong et al. 2020,
// Figure 3), and warnings for attention-entropy collapse and growing attention logits.
#pragma once

#include <string>

#include "metrics/records.h"  // the warning thresholds

namespace normlab {

// Throws UsageError when the run directory or its metrics are missing.
std::string report_text(const std::string& run_dir);
std::string report_json(const std::string& run_dir);

}  // namespace normlab
