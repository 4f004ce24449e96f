// swiglu: M(x) = fc2(silu(gate x) * fc1 x) (Shazeer 2020; LLaMA's FFN), silu(a) = a sigmoid(a).
#include "model/ffns/ffn_type.h"

#include <cmath>

namespace normlab {

FfnType swiglu_ffn() {
  return {"swiglu", "fc2(silu(gate x) * fc1 x)", true, [](const torch::Tensor& a) { return torch::silu(a); },
          [](double a) { return a / (1.0 + std::exp(-a)); }};
}

}  // namespace normlab
