// gelu: M(x) = fc2(gelu(fc1 x)), the exact (erf) GELU (GPT-2's FFN with the exact form). The
// default. Under bf16 autocast on the CPU it runs the FFN's own bf16 kernel (ffn_gelu, model/ffn.h).
#include "model/ffns/ffn_type.h"

#include <cmath>

#include "model/ffn.h"

namespace normlab {

FfnType gelu_ffn() {
  return {"gelu", "fc2(gelu(fc1 x)), exact erf GELU", false, ffn_gelu,
          [](double a) { return 0.5 * a * (1.0 + std::erf(a / std::sqrt(2.0))); }};
}

}  // namespace normlab
