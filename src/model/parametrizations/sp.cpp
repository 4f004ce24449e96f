// sp: the standard parametrization. Nothing changes with width or depth: init std, the 1/sqrt(dh)
// score scale, the readout and every rate stay as configured. The default.
#include "model/parametrizations/parametrization_type.h"

namespace normlab {

ParametrizationType sp_parametrization() {
  ParametrizationType t;
  t.name = "sp";
  t.summary = "standard: init, score scale, readout and rates as configured at every size";
  return t;
}

}  // namespace normlab
