#pragma once
#include "model/norms/norm.h"

namespace normlab {
class LayerNormImpl : public NormImpl {
 public:
  explicit LayerNormImpl(const NormOptions& o);
  torch::Tensor forward(const torch::Tensor& x) override;

 private:
  int64_t size_;
  double eps_;
  torch::Tensor weight_, bias_;
};
}  // namespace normlab
