// Gradient-norm groups of MODEL.md section 9: total, per block, per block's attention / FFN /
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

  // Squared group norms as one tensor (same device as the grads), no host sync.
  torch::Tensor squared(const std::vector<torch::Tensor>& params) const;
  GradNorms unpack(const torch::Tensor& squared) const;  // sqrt and split (moves to host)

 private:
  int64_t L_;
  torch::Tensor membership_;  // (groups, P) of 0/1
};

}  // namespace normlab
