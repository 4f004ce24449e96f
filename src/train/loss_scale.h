// Dynamic loss scaling for fp16 training (src/train/README.md), in the form of
// torch.cuda.amp.GradScaler: the loss is multiplied by the scale before the backward; a step whose
// gradients are not all finite is an overflow: its update is skipped and the scale halves; after
// `growth_interval` consecutive finite steps the scale doubles. A pure state machine: the step
// decides on the gradient norm it already reads to the host, so the scaler costs no extra sync.
#pragma once

#include <cstdint>

namespace normlab {

class LossScaler {
 public:
  static constexpr double kInitialScale = 65536.0;  // 2^16
  static constexpr int64_t kGrowthInterval = 2000;

  // Disabled (fp32, bf16): scale() is 1 and update() never skips.
  explicit LossScaler(bool enabled, double initial_scale = kInitialScale,
                      int64_t growth_interval = kGrowthInterval);

  bool enabled() const { return enabled_; }
  double scale() const { return enabled_ ? scale_ : 1.0; }
  int64_t good_steps() const { return good_steps_; }

  // After a step's backward: gradients_finite is whether every scaled gradient was finite.
  // Returns true when the step overflowed (enabled only): skip its update.
  bool update(bool gradients_finite);

  // Checkpoint state (state.json); restore() ignores a non-positive or non-finite scale.
  void restore(double scale, int64_t good_steps);

 private:
  bool enabled_;
  double scale_;
  int64_t growth_interval_;
  int64_t good_steps_ = 0;
};

}  // namespace normlab
