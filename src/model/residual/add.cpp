// add: the layout's own stream. The carrier holds x and runs each block's forward, whatever the
// layout computes there (x = x + G_s(x) on each sublayer of an additive layout). No parameters.
#include "model/block.h"
#include "model/residual/residual.h"

namespace normlab {
namespace {

class AddStream : public ResidualStream {
 public:
  void start(const torch::Tensor& e) override { x_ = e; }
  void block(int64_t, BlockImpl& b) override { x_ = b.forward(x_); }
  torch::Tensor finish() override { return std::exchange(x_, torch::Tensor()); }
  torch::Tensor view() override { return x_; }

 private:
  torch::Tensor x_;
};

}  // namespace

ResidualType add_residual() {
  ResidualType t;
  t.name = "add";
  t.equation = "the layout's own stream (x = x + G_s(x))";
  t.make_blocks = [](TransformerImpl&, const ModelConfig&) { return std::unique_ptr<ResidualStream>(new AddStream()); };
  return t;
}

}  // namespace normlab
