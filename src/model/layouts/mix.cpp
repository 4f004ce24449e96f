// Mix-LN (Li et al. 2024): blocks i < post_layers (auto: floor(L/4)) are Post-LN, the rest
// Pre-LN, with a final norm. Post-LN early layers keep their gradients from vanishing in deep
// Pre-LN models' later layers being under-used.
#include "model/block.h"

namespace normlab {

int64_t mix_post_layers(const ModelConfig& m) { return m.mix.post_layers.value_or(m.n_layers / 4); }

BlockPlan mix_plan(int64_t layer, const ModelConfig& m) {
  return layer < mix_post_layers(m) ? post_plan(layer, m) : pre_plan(layer, m);
}
}  // namespace normlab
