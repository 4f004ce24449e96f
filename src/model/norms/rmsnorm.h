#pragma once
#include "model/norms/norm.h"

namespace normlab {
class RMSNormImpl : public NormImpl {
 public:
  RMSNormImpl(const NormOptions& o, bool one_plus);
  torch::Tensor forward(const torch::Tensor& x) override;

 private:
  double eps_;
  bool one_plus_;
  torch::Tensor weight_;
};
}  // namespace normlab
