// wsd: warm-up, stable, decay (MiniCPM's schedule with the cool-downs of Hägele et al. 2024,
// "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations"): optim.lr until the
// last optim.wsd.decay_frac of the steps after the warm-up (of the steps after it, not of all
// steps), then down to optim.min_lr at p = 1, just after the last step as every decaying schedule
// here, along a line (shape linear) or along 1 - sqrt (shape sqrt, Hägele et al.'s best cool-down).
// The last step's rate is min_lr + (lr - min_lr) / (f (N - w)) (linear); with f (N - w) <= 1 no
// step decays. With q = (p - (1 - f)) / f the progress through the decay:
//   p <= 1 - f:   lr
//   linear:       lr - (lr - min_lr) q
//   sqrt:         min_lr + (lr - min_lr) (1 - sqrt(q))
// The stable phase does not depend on train.steps beyond its end, so runs of several lengths share
// their updates up to the shortest one's decay (one run's checkpoint can start another's decay).
#include "train/schedules/schedule_type.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <variant>

namespace normlab {

ScheduleType wsd_schedule() {
  ScheduleType t;
  t.name = "wsd";
  t.formula = "lr while p <= 1 - decay_frac, then to min_lr over the last decay_frac: linear or 1 - sqrt";
  t.keys = {{"decay_frac", KeyKind::kNumber, 0.2, "the fraction of the steps after the warm-up spent decaying, in (0, 1]",
             {},
             [](const KeyValue& v, const ModelConfig&) -> std::string {
               const double f = std::get<double>(v);
               return f > 0 && f <= 1 ? "" : "must be in (0, 1]";
             }},
            {"shape", KeyKind::kName, std::string("linear"), "the decay's shape (sqrt: 1 - sqrt of the progress through the decay)",
             {"linear", "sqrt"}}};
  t.rate = [](const OptimConfig& o, double p) {
    const double f = o.schedule_keys.number("wsd.decay_frac");
    if (p <= 1.0 - f) return o.lr;
    const double q = std::min(1.0, (p - (1.0 - f)) / f);
    if (o.schedule_keys.name("wsd.shape") == "sqrt") return o.min_lr + (o.lr - o.min_lr) * (1.0 - std::sqrt(q));
    return o.lr - (o.lr - o.min_lr) * q;
  };
  return t;
}

}  // namespace normlab
