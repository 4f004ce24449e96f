// relu2: M(x) = fc2(relu(fc1 x)^2), the squared ReLU of Primer (So et al. 2021), modded-nanogpt's
// FFN.
#include "model/ffns/ffn_type.h"

namespace normlab {

FfnType relu2_ffn() {
  return {"relu2", "fc2(relu(fc1 x)^2)", false, [](const torch::Tensor& a) { return torch::relu(a).square(); },
          [](double a) { return a > 0 ? a * a : 0.0; }};
}

}  // namespace normlab
