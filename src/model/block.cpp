#include "model/block.h"

#include "model/roles.h"

namespace normlab {

BlockImpl::BlockImpl(const BlockOptions& options) : plan_(options.plan), branch_mult_(options.branch_mult) {
  BlockOptions o = options;
  if (plan_.sublayers) plan_.sublayers(o);
  // Registration order fixes named_parameters() order and so the init stream: norms first for
  // the input-side slot, then sublayers, as a reader of the checkpoint would list them.
  auto has = [&](const char* slot) {
    return std::find(plan_.norm_slots.begin(), plan_.norm_slots.end(), slot) != plan_.norm_slots.end();
  };
  auto add_norm = [&](const char* slot) {
    if (has(slot)) norms_[slot] = register_module(slot, make_norm(o.norm_type, o.norm));
  };
  add_norm("norm1");
  attn_ = register_module("attn", Attention(o.attn));
  add_norm("norm1_out");
  add_norm("norm2");
  ffn_ = register_module("ffn", Ffn(o.ffn));
  add_norm("norm2_out");
  const int64_t d = o.attn.d_model;
  for (const auto& [name, init] : plan_.vectors)
    vectors_[name] = register_parameter(name, with_role(torch::full({d}, init), Role::kGain));
  if (o.layerscale > 0) {
    ls1_ = register_parameter("ls1", with_role(torch::full({d}, o.layerscale), Role::kGain));
    ls2_ = register_parameter("ls2", with_role(torch::full({d}, o.layerscale), Role::kGain));
  }
}

std::vector<torch::Tensor> BlockImpl::output_weights() const { return {attn_->out_proj->weight, ffn_->fc2->weight}; }

std::vector<torch::Tensor> BlockImpl::branch_weights() const {
  std::vector<torch::Tensor> w = {attn_->v_proj->weight, attn_->out_proj->weight, ffn_->fc1->weight, ffn_->fc2->weight};
  if (ffn_->gate) w.push_back(ffn_->gate->weight);
  return w;
}

torch::Tensor BlockImpl::norm(const std::string& slot, const torch::Tensor& x) {
  auto it = norms_.find(slot);
  TORCH_CHECK(it != norms_.end(), "layout ", plan_.layout, " uses norm slot ", slot,
              " that its plan does not declare");
  return it->second->forward(x);
}

const NormPtr& BlockImpl::norm_module(const std::string& slot) const {
  static const NormPtr kNone;
  auto it = norms_.find(slot);
  return it == norms_.end() ? kNone : it->second;
}

torch::Tensor BlockImpl::scaled(const std::string& name, const torch::Tensor& x) {
  auto it = vectors_.find(name);
  return it == vectors_.end() ? x : x * it->second;
}

}  // namespace normlab

namespace normlab {
const torch::Tensor& BlockImpl::vector(const std::string& name) const {
  auto it = vectors_.find(name);
  TORCH_CHECK(it != vectors_.end(), "layout ", plan_.layout, " reads vector ", name, " that its plan does not declare");
  return it->second;
}
}  // namespace normlab
