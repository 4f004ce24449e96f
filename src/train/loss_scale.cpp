#include "train/loss_scale.h"

#include <cmath>

namespace normlab {

LossScaler::LossScaler(bool enabled, double initial_scale, int64_t growth_interval)
    : enabled_(enabled), scale_(initial_scale), growth_interval_(growth_interval) {}

bool LossScaler::update(bool gradients_finite) {
  if (!enabled_) return false;
  if (!gradients_finite) {
    scale_ *= 0.5;
    good_steps_ = 0;
    return true;
  }
  if (++good_steps_ >= growth_interval_) {
    scale_ *= 2.0;
    good_steps_ = 0;
  }
  return false;
}

void LossScaler::restore(double scale, int64_t good_steps) {
  if (!(scale > 0) || !std::isfinite(scale)) return;
  scale_ = scale;
  good_steps_ = good_steps >= 0 ? good_steps : 0;
}

}  // namespace normlab
