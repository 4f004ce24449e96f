// Mix-LN (Li et al. 2024): blocks i < post_layers (auto: floor(L/4)) are Post-LN, the rest
// Pre-LN, with a final norm. Post-LN early layers keep their gradients from vanishing in deep
// Pre-LN models' later layers being under-used.
#include <fmt/format.h>

#include "model/block.h"

namespace normlab {

LayoutType mix_layout() {
  LayoutType t{"mix", "post for blocks < mix.post_layers, then pre", true,
               [](int64_t layer, const ModelConfig& m) {
                 BlockPlan p = layer < m.keys.integer("mix.post_layers") ? post_plan(layer, m) : pre_plan(layer, m);
                 p.term = nullptr;  // a Post-LN layout in part: not additive, whatever post_layers says
                 return p;
               }};
  t.keys = {{"post_layers", KeyKind::kInteger, {}, "Mix-LN: blocks before this index are post; auto = L/4", {},
             [](const KeyValue& v, const ModelConfig& m) {
               const int64_t n = std::get<int64_t>(v);
               return n >= 0 && n <= m.n_layers ? std::string() : fmt::format("must be in [0, n_layers {}]", m.n_layers);
             }}};
  t.resolve = [](ModelConfig& m) {
    if (m.keys.is_auto("mix.post_layers")) m.keys.set("mix.post_layers", m.n_layers / 4);
  };
  t.reference = [](const torch::Tensor& x, const BlockReference& r) {
    const bool post = r.layer < r.model->keys.integer("mix.post_layers");
    return find_layout(post ? "post" : "pre")->reference(x, r);
  };
  return t;
}
}  // namespace normlab
