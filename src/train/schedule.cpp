#include "train/schedule.h"

#include <algorithm>
#include <stdexcept>

#include "train/schedules/schedule_type.h"

namespace normlab {

double lr_at(const OptimConfig& o, int64_t s, int64_t total) {
  if (s < o.warmup) return o.lr * static_cast<double>(s + 1) / static_cast<double>(o.warmup);
  const ScheduleType* t = find_schedule(o.schedule);
  if (t == nullptr) throw std::invalid_argument("optim.schedule '" + o.schedule + "' is not a registered schedule");
  const int64_t span = total - o.warmup;
  const double progress =
      span <= 0 ? 1.0 : std::clamp(static_cast<double>(s - o.warmup) / static_cast<double>(span), 0.0, 1.0);
  return t->rate(o, progress);
}

}  // namespace normlab
