// Learning-rate schedule (src/train/README.md, "Learning rate"): linear warm-up lr*(s+1)/warmup for
// s < warmup, then the rate of optim.schedule's registry entry (train/schedules/: cosine, linear,
// constant, wsd) at the progress through the remaining steps.
#pragma once

#include <cstdint>

#include "config/config.h"

namespace normlab {
double lr_at(const OptimConfig& o, int64_t step, int64_t total_steps);
}
