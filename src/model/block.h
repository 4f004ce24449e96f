// One Transformer block: an attention and an FFN sublayer, the norm slots its layout asks for,
// and the layout's forward. Layouts compose the block through attn(), ffn(), norm(slot, x),
// ls(which, t) (LayerScale, any layout) and scaled(name, x) (the plan's own vectors); tests can
// replace the sublayers with stubs to pin each layout's equation.
#pragma once

#include <map>
#include <utility>

#include "model/attention.h"
#include "model/ffn.h"
#include "model/layouts/layout.h"

namespace normlab {

struct BlockOptions {
  AttentionOptions attn;
  FfnOptions ffn;
  std::string norm_type = "layernorm";
  NormOptions norm;  // size = d_model
  BlockPlan plan;
  double layerscale = 0;  // c > 0: ls1, ls2 [d] initialised to c
  double branch_mult = 1;  // CompleteP: each sublayer's term times this where it joins the stream
};

// The FFN's norm after the activation, of the block's norm type (NormFormer, Sub-LN).
inline void add_ffn_mid_norm(BlockOptions& o) {
  o.ffn.mid_norm_type = o.norm_type;
  o.ffn.mid_norm = o.norm;
  o.ffn.mid_norm.size = o.ffn.d_ff;
}

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const BlockOptions& o);
  // x: (B, T, d) -> (B, T, d)
  torch::Tensor forward(const torch::Tensor& x) { return plan_.forward(*this, x); }
  // G(z) of sublayer k (1 attention, 2 FFN) of an additive layout (BlockPlan::term).
  torch::Tensor term(int k, const torch::Tensor& z) { return branch(plan_.term(*this, k, z)); }
  // A sublayer's term as it joins the stream: times the parametrization's branch multiplier
  // (CompleteP's m_L^-alpha; exactly 1, so no multiply, otherwise).
  torch::Tensor branch(const torch::Tensor& t) const { return branch_mult_ == 1.0 ? t : t * branch_mult_; }

  // Building blocks for layouts.
  torch::Tensor attn(const torch::Tensor& x) {
    auto y = attn_stub_ ? attn_stub_(x) : attn_->forward(x);
    if (coord_on_) coord_.attn_out = mean_abs(y);
    return y;
  }
  torch::Tensor ffn(const torch::Tensor& x) {
    auto y = ffn_stub_ ? ffn_stub_(x) : ffn_->forward(x);
    if (coord_on_) coord_.ffn_out = mean_abs(y);
    return y;
  }
  torch::Tensor norm(const std::string& slot, const torch::Tensor& x);
  // LayerScale: t * ls{which} when model.layerscale > 0, else t (which: 1 attention, 2 FFN).
  torch::Tensor ls(int which, const torch::Tensor& t) {
    const auto& s = which == 1 ? ls1_ : ls2_;
    return s.defined() ? t * s : t;
  }
  // x * the plan's vector `name` when the plan declares it, else x.
  torch::Tensor scaled(const std::string& name, const torch::Tensor& x);
  // The plan's vector `name` (it must declare it).
  const torch::Tensor& vector(const std::string& name) const;

  // Coordinate check (src/train/coordcheck.h): the next forwards keep mean |x| of the attention's
  // and the FFN's outputs (the sublayers' terms before LayerScale, the branch multiplier and the
  // stream) and the attention's mean |s|. take_coord() hands them over and forgets them.
  struct CoordTerms {
    torch::Tensor attn_out, ffn_out;
  };
  void set_coord_capture(bool on) {
    coord_on_ = on;
    coord_ = CoordTerms();
    attn_->set_coord_capture(on);
  }
  CoordTerms take_coord() { return std::exchange(coord_, CoordTerms()); }

  // The weights whose outputs the sublayers hand to the stream: attn.out_proj and ffn.fc2
  // (GPT-2's scaled residual init).
  std::vector<torch::Tensor> output_weights() const;
  // The value path's weights, which DeepNorm's beta and Sub-LN's gamma scale: attn.v_proj,
  // attn.out_proj and every FFN weight (fc1, fc2, ffn.gate); not q_proj, k_proj or attn.gate.
  std::vector<torch::Tensor> branch_weights() const;

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
  double branch_mult_ = 1;
  Attention attn_{nullptr};
  Ffn ffn_{nullptr};
  std::map<std::string, NormPtr> norms_;
  std::map<std::string, torch::Tensor> vectors_;
  torch::Tensor ls1_, ls2_;
  std::function<torch::Tensor(const torch::Tensor&)> attn_stub_, ffn_stub_;
  bool coord_on_ = false;
  CoordTerms coord_;
};
TORCH_MODULE(Block);

}  // namespace normlab
