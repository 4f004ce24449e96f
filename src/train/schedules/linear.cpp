// linear: a straight line from optim.lr down to optim.min_lr over the steps after the warm-up.
#include "train/schedules/schedule_type.h"

namespace normlab {

ScheduleType linear_schedule() {
  return {"linear", "lr - (lr - min_lr) p", {}, [](const OptimConfig& o, double p) { return o.lr - (o.lr - o.min_lr) * p; }};
}

}  // namespace normlab
