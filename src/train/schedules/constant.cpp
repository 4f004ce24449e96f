// constant: optim.lr after the warm-up until the last step (optim.min_lr unused).
#include "train/schedules/schedule_type.h"

namespace normlab {

ScheduleType constant_schedule() {
  return {"constant", "lr", {}, [](const OptimConfig& o, double) { return o.lr; }};
}

}  // namespace normlab
