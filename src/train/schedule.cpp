#include "train/schedule.h"

#include <algorithm>
#include <cmath>

namespace normlab {

double lr_at(const OptimConfig& o, int64_t s, int64_t total) {
  if (s < o.warmup) return o.lr * static_cast<double>(s + 1) / static_cast<double>(o.warmup);
  if (o.schedule == LrSchedule::kConstant) return o.lr;
  const int64_t span = total - o.warmup;
  const double progress =
      span <= 0 ? 1.0 : std::clamp(static_cast<double>(s - o.warmup) / static_cast<double>(span), 0.0, 1.0);
  if (o.schedule == LrSchedule::kLinear) return o.lr - (o.lr - o.min_lr) * progress;
  return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace normlab
