// The layout registry: one line per layout. Validation, `normlab keys` and the parameterised
// tests iterate this table.
#include "model/layouts/layout.h"

#include "core/registry.h"
#include "model/block.h"

namespace normlab {

LayoutType pre_layout();
LayoutType post_layout();
LayoutType deepnorm_layout();
LayoutType sandwich_layout();
LayoutType normformer_layout();
LayoutType reordered_layout();
LayoutType mix_layout();
LayoutType subln_layout();
LayoutType hybrid_layout();
LayoutType lns_layout();
LayoutType ngpt_layout();
LayoutType resi_dual_layout();

const std::vector<LayoutType>& layout_registry() {
  static const std::vector<LayoutType> table = {
      pre_layout(),       post_layout(),      deepnorm_layout(), sandwich_layout(),
      normformer_layout(), reordered_layout(), mix_layout(),      subln_layout(),
      hybrid_layout(),    lns_layout(),       ngpt_layout(),     resi_dual_layout(),
  };
  return table;
}

const LayoutType* find_layout(const std::string& name) { return find_by_name(layout_registry(), name); }

BlockPlan additive_plan(const std::string& layout, BlockTerm term) {
  BlockPlan p;
  p.layout = layout;
  p.term = term;
  p.forward = [term](BlockImpl& b, const torch::Tensor& x) {  // branch: CompleteP's multiplier (1: none)
    auto h = x + b.branch(term(b, 1, x));
    return h + b.branch(term(b, 2, h));
  };
  return p;
}

bool layout_is_additive(const ModelConfig& m) {
  const LayoutType* t = find_layout(m.layout);
  if (!t) return false;
  for (int64_t i = 0; i < m.n_layers; ++i) {
    if (!t->plan(i, m).term) return false;
  }
  return true;
}

Config fit_to_layout(const LayoutType& l, Config c) {
  c.model.layout = l.name;
  if (l.fit) l.fit(c);
  return c;
}

ModelConfig fit_to_layout(const LayoutType& l, const ModelConfig& m) {
  Config c;
  c.model = m;
  return fit_to_layout(l, c).model;
}

std::string layout_names() { return names_of(layout_registry()); }

}  // namespace normlab
