#include "metrics/spike.h"

#include <cmath>

namespace normlab {

void RollingWindow::push(double v) {
  values_.push_back(v);
  while (static_cast<int64_t>(values_.size()) > size_) values_.pop_front();
}

double RollingWindow::mean() const {
  if (values_.empty()) return 0;
  double s = 0;
  for (double v : values_) s += v;
  return s / static_cast<double>(values_.size());
}

double RollingWindow::std() const {
  if (values_.empty()) return 0;
  const double m = mean();
  double s = 0;
  for (double v : values_) s += (v - m) * (v - m);
  return std::sqrt(s / static_cast<double>(values_.size()));
}

void RollingWindow::assign(const std::vector<double>& v) {
  values_.clear();
  for (double x : v) push(x);
}

ZScore SpikeDetector::score(double x) const {
  ZScore z;
  z.active = window_.full();
  if (!z.active) return z;
  z.mean = window_.mean();
  z.std = window_.std();
  z.z = z.std < 1e-12 ? 0.0 : (x - z.mean) / z.std;
  return z;
}

}  // namespace normlab
