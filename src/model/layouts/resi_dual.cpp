// ResiDual (Xie et al. 2023; microsoft/ResiDual): a Post-LN stream x and a Pre-LN-like dual
// stream that sums every branch output unnormalised, so the model keeps Post-LN's representation
// and Pre-LN's gradient path at once. Per sublayer (attention, then FFN; Na its Post-LN slot):
//   y = ls * F(x);  dual = dual + y;  x = Na(x + y)
// both streams start at the embedding output, and the head reads x + final_norm(dual). The pair
// travels between blocks as one (2, B, T, d) tensor: [x, dual], in the layout's own carrier.
#include <fmt/format.h>

#include "model/block.h"
#include "model/residual/residual.h"
#include "model/transformer.h"

namespace normlab {
namespace {
torch::Tensor resi_dual_forward(BlockImpl& b, const torch::Tensor& s) {
  auto x = s[0], dual = s[1];
  auto y = b.ls(1, b.attn(x));
  dual = dual + y;
  x = b.norm("norm1", x + y);
  y = b.ls(2, b.ffn(x));
  dual = dual + y;
  x = b.norm("norm2", x + y);
  return torch::stack({x, dual});
}

// The carrier: [x, dual] through the blocks' forwards; final_norm reads dual, the head x + its output.
class ResiDualStream : public ResidualStream {
 public:
  void start(const torch::Tensor& e) override { s_ = torch::stack({e, e}); }
  void block(int64_t, BlockImpl& b) override { s_ = b.forward(s_); }
  torch::Tensor finish() override { return s_[1]; }
  torch::Tensor head_input(const torch::Tensor& normed) override {
    auto x = s_[0];
    s_ = torch::Tensor();
    return x + normed;
  }
  torch::Tensor view() override { return s_[0]; }

 private:
  torch::Tensor s_;
};

BlockPlan resi_dual_plan(int64_t, const ModelConfig&) {
  BlockPlan p;
  p.layout = "resi_dual";
  p.forward = resi_dual_forward;
  p.norm_slots = {"norm1", "norm2"};
  return p;
}
}  // namespace

LayoutType resi_dual_layout() {
  LayoutType t{"resi_dual", "y = F(x); dual = dual + y; x = Na(x + y); head reads x + final_norm(dual)", true,
               resi_dual_plan};
  t.make_stream = [](TransformerImpl&, const ModelConfig&) { return std::unique_ptr<ResidualStream>(new ResiDualStream()); };
  // The block carries [x, dual] stacked.
  t.reference = [](const torch::Tensor& s, const BlockReference& r) {
    auto x = s[0], dual = s[1];
    auto y = r.scaled("ls1", r.attn(x));
    dual = dual + y;
    x = r.norm("norm1", x + y);
    y = r.scaled("ls2", r.ffn(x));
    dual = dual + y;
    x = r.norm("norm2", x + y);
    return torch::stack({x, dual});
  };
  return t;
}
}  // namespace normlab
