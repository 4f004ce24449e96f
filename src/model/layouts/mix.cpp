// Mix-LN (Li et al. 2024): blocks i < post_layers (auto: floor(L/4)) are Post-LN, the rest
// Pre-LN, with a final norm. Post-LN early layers keep their gradients from vanishing in deep
// Pre-LN models' later layers being under-used.
#include "model/block.h"

namespace normlab {

LayoutType mix_layout() {
  LayoutType t{"mix", "post for blocks < mix.post_layers, then pre", true,
               [](int64_t layer, const ModelConfig& m) {
                 return layer < *m.mix.post_layers ? post_plan(layer, m) : pre_plan(layer, m);
               }};
  t.resolve = [](ModelConfig& m) {
    if (!m.mix.post_layers) m.mix.post_layers = m.n_layers / 4;
  };
  return t;
}
}  // namespace normlab
