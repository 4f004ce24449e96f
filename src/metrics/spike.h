// Loss / gradient-norm spike detection (src/metrics/README.md), after llm.c's outlier detector and
// OLMo-core's skip-step optimizer: the baseline is the last W values strictly before the current
// step (skipped steps never enter it); z = (x - mean) / std with the population std (z = 0 when
// std < 1e-12); the detector is silent until the baseline is full; a spike is z > threshold.
#pragma once

#include <cmath>

#include <cstdint>
#include <deque>
#include <vector>

namespace normlab {

class RollingWindow {
 public:
  explicit RollingWindow(int64_t size = 128) : size_(size) {}
  void push(double v);
  bool full() const { return static_cast<int64_t>(values_.size()) == size_; }
  bool empty() const { return values_.empty(); }
  double mean() const;
  double std() const;  // population
  const std::deque<double>& values() const { return values_; }
  void assign(const std::vector<double>& v);  // restore from a checkpoint

 private:
  int64_t size_;
  std::deque<double> values_;
};

struct ZScore {
  bool active = false;  // baseline full
  double z = 0, mean = 0, std = 0;
};

// OLMo-core's stability score (src/metrics/README.md): the share of logged steps, once the detector
// is active, whose loss or grad-norm z is above the threshold, so runs compare with one number.
class SpikeScore {
 public:
  explicit SpikeScore(double threshold) : threshold_(threshold) {}
  // One logged train record's loss_z and grad_norm_z (NaN where the record has none).
  void add(double loss_z, double grad_norm_z) {
    if (std::isnan(loss_z) && std::isnan(grad_norm_z)) return;  // detector not active yet
    ++active_;
    if (loss_z > threshold_ || grad_norm_z > threshold_) ++over_;
  }
  double value() const { return active_ ? static_cast<double>(over_) / active_ : std::nan(""); }

 private:
  double threshold_;
  int64_t active_ = 0, over_ = 0;
};

class SpikeDetector {
 public:
  SpikeDetector(int64_t window, double threshold) : window_(window), threshold_(threshold) {}
  // The z-score of x against the baseline (does not add x).
  ZScore score(double x) const;
  bool is_spike(const ZScore& z) const { return z.active && z.z > threshold_; }
  void accept(double x) { window_.push(x); }  // x joins the baseline (non-skipped steps only)
  RollingWindow& window() { return window_; }
  const RollingWindow& window() const { return window_; }

 private:
  RollingWindow window_;
  double threshold_;
};

}  // namespace normlab
