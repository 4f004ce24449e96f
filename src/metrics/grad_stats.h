// Gradient-norm groups of src/metrics/README.md: total, per block, per block's attention / FFN /
// norms, embedding and head. All groups are reduced in one matrix-vector product over the
// per-tensor squared norms, so a logging step costs one device-to-host transfer.
#pragma once

#include <string>
#include <vector>

#include "core/torch.h"

namespace normlab {

struct GradNorms {
  double total = 0;
  std::vector<double> block, attn, ffn, norms;  // L each
  double embed = 0, head = 0;
};

class GradStats {
 public:
  // names: the contract's tensor names of the parameters, in optimizer order; L blocks.
  GradStats(const std::vector<std::string>& names, int64_t n_layers);

  // Squared norm of each parameter's gradient, (P), no host sync.
  static torch::Tensor squared_per_tensor(const std::vector<torch::Tensor>& params);
  // Squared group norms (groups) from per-tensor squares, e.g. of gradients or of updates.
  torch::Tensor groups(const torch::Tensor& per_tensor_squared) const;
  torch::Tensor squared(const std::vector<torch::Tensor>& params) const {
    return groups(squared_per_tensor(params));
  }
  int64_t n_groups() const { return membership_.size(0); }
  GradNorms unpack(const std::vector<double>& squared) const;  // sqrt and split host values
  GradNorms unpack(const torch::Tensor& squared) const;        // same, after moving to host

 private:
  int64_t L_;
  mutable torch::Tensor membership_;  // (groups, P) of 0/1, moved to the grads' device once
};

}  // namespace normlab
