// add: the layouts' own stream, x = x + G_s(x) for additive layouts and whatever the layout's
// forward does otherwise. No parameters, no carrier: the model runs the blocks' forwards.
#include "model/residual/residual.h"

namespace normlab {

ResidualType add_residual() {
  ResidualType t;
  t.name = "add";
  t.equation = "the layout's own stream (x = x + G_s(x))";
  t.make = [](TransformerImpl&, const ModelConfig&) { return std::unique_ptr<ResidualStream>(); };
  return t;
}

}  // namespace normlab
