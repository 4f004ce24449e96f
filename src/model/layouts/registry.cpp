// The layout registry: one line per layout. Validation, `normlab keys` and the parameterised
// tests iterate this table.
#include "model/layouts/layout.h"

namespace normlab {

BlockPlan deepnorm_plan(int64_t, const ModelConfig&);
BlockPlan sandwich_plan(int64_t, const ModelConfig&);
BlockPlan normformer_plan(int64_t, const ModelConfig&);
BlockPlan reordered_plan(int64_t, const ModelConfig&);
BlockPlan mix_plan(int64_t, const ModelConfig&);

const std::vector<LayoutType>& layout_registry() {
  static const std::vector<LayoutType> table = {
      {"pre", "x = x + F(Na(x))", true, pre_plan},
      {"post", "x = Na(x + F(x))", false, post_plan},
      {"deepnorm", "x = Na(alpha*x + F(x))", false, deepnorm_plan},
      {"sandwich", "x = x + Nb(F(Na(x)))", true, sandwich_plan},
      {"normformer", "x = x + Nb(A_hs(Na(x))); x = x + M_mid(Na(x))", true, normformer_plan},
      {"reordered", "x = x + Nb(F(x))", true, reordered_plan},
      {"mix", "post for blocks < mix.post_layers, then pre", true, mix_plan},
  };
  return table;
}

const LayoutType* find_layout(const std::string& name) {
  for (const auto& t : layout_registry()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string layout_names() {
  std::string out;
  for (const auto& t : layout_registry()) out += (out.empty() ? "" : ", ") + t.name;
  return out;
}

}  // namespace normlab
