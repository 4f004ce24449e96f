// The learning-rate schedule registry (src/train/README.md, "Learning rate"): the single list of
// valid `optim.schedule` names. An entry gives the rate after the warm-up as a function of the
// progress through the rest of the run, and owns its keys (optim.<name>.<key>, declared in its file
// as the optimizers declare theirs; a key of a schedule not selected must keep its default). The
// warm-up is every schedule's and lives in lr_at (train/schedule.h). Adding one = one file
// defining `ScheduleType xxx_schedule()` + one line in registry.cpp + one README row.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/owned_keys.h"

namespace normlab {

struct ScheduleType {
  std::string name;     // optim.schedule
  std::string formula;  // one line: lr(s) after the warm-up in terms of p (`normlab keys`)
  std::vector<KeySpec> keys;  // optim.<name>.<key>, read as o.schedule_keys.number("<name>.<key>")
  // The rate after the warm-up: o's lr, min_lr and the entry's keys at p in [0, 1], the progress
  // (s - warmup) / (steps - warmup), clamped (1 where no step follows the warm-up).
  std::function<double(const OptimConfig& o, double p)> rate;
};

const std::vector<ScheduleType>& schedule_registry();
const ScheduleType* find_schedule(const std::string& name);  // nullptr if unknown

}  // namespace normlab
