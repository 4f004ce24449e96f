// cosine: half a cosine from optim.lr down to optim.min_lr over the steps after the warm-up. The
// default.
#include "train/schedules/schedule_type.h"

#include <cmath>

namespace normlab {

ScheduleType cosine_schedule() {
  return {"cosine", "min_lr + 0.5 (lr - min_lr) (1 + cos(pi p))", {},
          [](const OptimConfig& o, double p) { return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1.0 + std::cos(M_PI * p)); }};
}

}  // namespace normlab
