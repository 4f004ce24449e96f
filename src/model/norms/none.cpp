// No normalisation: y = x, no parameters. The baseline every norm ablation needs.
#include "model/norms/norm.h"

namespace normlab {
namespace {
class IdentityNormImpl : public NormImpl {
 public:
  torch::Tensor forward(const torch::Tensor& x) override { return x; }
};
}  // namespace

NormPtr make_none(const NormOptions&) { return std::make_shared<IdentityNormImpl>(); }
}  // namespace normlab
