// Gradient-norm groups of src/metrics/README.md: total, per block, per block's attention / FFN /
// norms / mixing parameters, embedding and head. Which group a parameter joins is its place
// (ParamPlace: its block and part, from the model's structure and the parameter's role, never
// from its name). All groups are reduced in one matrix-vector product over the per-tensor squared
// norms, so a logging step costs one device-to-host transfer.
#pragma once

#include <string>
#include <vector>

#include "core/torch.h"

namespace normlab {

// Where a parameter sits: in block `block` (its attention, its FFN, its mixing parameters (role
// mixing), or the rest: norm slots and scales), or outside the blocks (embedding: tok_emb, pos_emb,
// embed_norm; head: final_norm, lm_head and every other model-level tensor).
struct ParamPlace {
  enum class Part { kAttn, kFfn, kNorms, kMixing, kEmbed, kHead };
  int64_t block = -1;  // -1: outside the blocks
  Part part = Part::kHead;
};

struct GradNorms {
  double total = 0;
  std::vector<double> block, attn, ffn, norms, mixing;  // L each
  bool has_mixing = false;  // some block has mixing parameters
  double embed = 0, head = 0;
};

class GradStats {
 public:
  // places: each parameter's place, in optimizer order; L blocks.
  GradStats(const std::vector<ParamPlace>& places, int64_t n_layers);

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
  bool has_mixing_ = false;
  mutable torch::Tensor membership_;  // (groups, P) of 0/1, moved to the grads' device once
};

}  // namespace normlab
