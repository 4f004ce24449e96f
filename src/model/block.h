// One Transformer block: an attention and an FFN sublayer, the norm slots its layout asks for,
// and the layout's forward. Layouts compose the block through attn(), ffn(), norm(slot, x),
// alpha() and resid_scale(); tests can replace the sublayers with stubs to pin each layout's
// equation.
#pragma once

#include <map>

#include "model/attention.h"
#include "model/layouts/layout.h"

namespace normlab {

struct BlockOptions {
  AttentionOptions attn;
  FfnOptions ffn;
  std::string norm_type = "layernorm";
  NormOptions norm;  // size = d_model
  BlockPlan plan;
};

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const BlockOptions& o);
  // x: (B, T, d) -> (B, T, d)
  torch::Tensor forward(const torch::Tensor& x) { return plan_.forward(*this, x); }

  // Building blocks for layouts.
  torch::Tensor attn(const torch::Tensor& x) { return attn_stub_ ? attn_stub_(x) : attn_->forward(x); }
  torch::Tensor ffn(const torch::Tensor& x) { return ffn_stub_ ? ffn_stub_(x) : ffn_->forward(x); }
  torch::Tensor norm(const std::string& slot, const torch::Tensor& x);
  double alpha() const { return plan_.alpha; }
  torch::Tensor resid_scale(int which, const torch::Tensor& x);

  const BlockPlan& plan() const { return plan_; }
  Attention& attention() { return attn_; }
  Ffn& feed_forward() { return ffn_; }
  const NormPtr& norm_module(const std::string& slot) const;

  // Tests: replace the sublayers by deterministic functions.
  void set_stubs(std::function<torch::Tensor(const torch::Tensor&)> attn,
                 std::function<torch::Tensor(const torch::Tensor&)> ffn) {
    attn_stub_ = std::move(attn);
    ffn_stub_ = std::move(ffn);
  }

 private:
  BlockPlan plan_;
  Attention attn_{nullptr};
  Ffn ffn_{nullptr};
  std::map<std::string, NormPtr> norms_;
  torch::Tensor resid_scale1_, resid_scale2_;
  std::function<torch::Tensor(const torch::Tensor&)> attn_stub_, ffn_stub_;
};
TORCH_MODULE(Block);

}  // namespace normlab
