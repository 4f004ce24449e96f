// Learning-rate schedule (src/train/README.md): linear warmup lr*(s+1)/warmup for s < warmup,
// then cosine (or linear) decay reaching optim.min_lr at s = train.steps, or constant.
#pragma once

#include <cstdint>

#include "config/config.h"

namespace normlab {
double lr_at(const OptimConfig& o, int64_t step, int64_t total_steps);
}
