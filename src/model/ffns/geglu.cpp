// geglu: M(x) = fc2(gelu(gate x) * fc1 x) (Shazeer 2020, "GLU Variants Improve Transformer"), the
// exact (erf) GELU through the FFN's GELU dispatch (ffn_gelu, model/ffn.h).
#include "model/ffns/ffn_type.h"

#include <cmath>

#include "model/ffn.h"

namespace normlab {

FfnType geglu_ffn() {
  return {"geglu", "fc2(gelu(gate x) * fc1 x), exact erf GELU", true, ffn_gelu,
          [](double a) { return 0.5 * a * (1.0 + std::erf(a / std::sqrt(2.0))); }};
}

}  // namespace normlab
