// The schedule registry: one line per schedule. Validation (through key_owners), lr_at,
// `normlab keys`, the docs test and the registry-wide tests iterate this table.
#include "train/schedules/schedule_type.h"

#include "core/registry.h"

namespace normlab {

ScheduleType cosine_schedule();
ScheduleType linear_schedule();
ScheduleType constant_schedule();
ScheduleType wsd_schedule();

const std::vector<ScheduleType>& schedule_registry() {
  static const std::vector<ScheduleType> table = {cosine_schedule(), linear_schedule(), constant_schedule(),
                                                  wsd_schedule()};
  return table;
}

const ScheduleType* find_schedule(const std::string& name) { return find_by_name(schedule_registry(), name); }

}  // namespace normlab
