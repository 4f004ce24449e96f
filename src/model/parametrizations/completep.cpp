// completep: all of mup, and CompleteP's depth rules (Dey et al. 2025). With m_L = n_layers /
// base_depth: each sublayer's term joins the stream as x + m_L^(-alpha) G; the matrices' rates and
// the gains' and biases' rates inside the blocks x m_L^(alpha - 1); init.scaled_residual's depth is
// base_depth. It takes only the layouts whose sublayers join an unnormalised stream as x + G
// (LayoutType::depth_branch).
#include "model/parametrizations/parametrization_type.h"

#include <cmath>

#include <fmt/format.h>

#include "config/load.h"
#include "model/layouts/layout.h"
#include "model/transformer.h"

namespace normlab {

ParametrizationType completep_parametrization() {
  ParametrizationType t;
  t.name = "completep";
  t.summary = "mup, and CompleteP's depth rules: branch x m_L^-alpha, block matrix/gain/bias lr x m_L^(alpha-1), "
              "residual init at base_depth";
  t.reads = {"base_width", "base_head_dim", "output_mult", "base_depth", "alpha"};
  t.factors = [](const ParamShape& s, bool width_aware_matrices, ParamFactors& f) {
    apply_mup_width_rules(s, width_aware_matrices, f);
    f.residual_init_depth = s.base_depth;
    f.branch = std::pow(s.m_l, -s.alpha);
    const double depth = std::pow(s.m_l, s.alpha - 1.0);
    RoleFactors& matrix = f.roles[Role::kMatrix];
    matrix.lr_in_block *= depth;
    matrix.lr_outside *= depth;
    for (const Role r : {Role::kGain, Role::kBias}) f.roles[r].lr_in_block *= depth;
  };
  t.check = [](const Config& c, const ResolvedModel& entries, Problems& problems) {
    check_width_scope("completep", c, entries, problems);
    const LayoutType* layout = entries.layout;
    if (!layout || layout->own_parametrization || layout->depth_branch) return;
    std::string names;
    for (const auto& l : layout_registry()) {
      if (l.depth_branch) names += (names.empty() ? "" : ", ") + l.name;
    }
    problems.add("param.type", fmt::format("completep needs a layout whose sublayers join an unnormalised stream as "
                                           "x + G ({}); {} normalises or mixes its stream", names, c.model.layout));
  };
  return t;
}

}  // namespace normlab
