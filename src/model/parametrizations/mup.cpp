// mup: µP for Adam, as microsoft/mup's MuAdam and MuReadout and EleutherAI's nanoGPT-mup apply it.
// With m_N = d_model / base_width: a `matrix` weight's init std x m_N^(-1/2); the scores
// q k^T sqrt(base_head_dim) / dh (q x sqrt(base_head_dim / dh) before the usual 1/sqrt(dh)); the
// head's input x output_mult / m_N; AdamW's `matrix` rate x 1/m_N and decay x m_N (their product
// per step unchanged). A rule that already scales its matrix step with the shape (Muon) keeps its
// matrix rate and decay.
#include "model/parametrizations/parametrization_type.h"

#include <cmath>

#include <fmt/format.h>

#include "config/load.h"
#include "model/layouts/layout.h"
#include "model/residual/residual.h"
#include "model/transformer.h"
#include "model/value_residual/value_residual.h"

namespace normlab {

void apply_mup_width_rules(const ParamShape& s, bool width_aware_matrices, ParamFactors& f) {
  f.matrix_init = 1.0 / std::sqrt(s.m_n);
  f.score_q = std::sqrt(s.base_head_dim / static_cast<double>(s.head_dim));
  f.readout = s.output_mult / s.m_n;
  if (!width_aware_matrices) f.roles[Role::kMatrix] = {1.0 / s.m_n, 1.0 / s.m_n, s.m_n};
}

void check_width_scope(const std::string& mode, const Config& c, const ResolvedModel& entries, Problems& problems) {
  const ModelConfig& m = c.model;
  if (entries.residual && entries.residual->wraps_terms())
    problems.add("param.type", fmt::format("{} needs model.residual.type: add (the {} stream's maps to n streams are "
                                           "not parametrized here)", mode, m.residual.type));
  if (entries.value_residual && !entries.value_residual->outside_parametrization.empty())
    problems.add("param.type", fmt::format("{} does not take model.value_residual: {} ({})", mode, m.value_residual,
                                           entries.value_residual->outside_parametrization));
  if (m.attn_gate == AttnGate::kHead)
    problems.add("param.type", fmt::format("{} does not take model.attn_gate: head (its gate maps the width to one "
                                           "number per head: a readout µP does not scale)", mode));
  if (entries.layout && entries.layout->own_parametrization)
    problems.add("param.type", fmt::format("{} does not apply to layout {}: it has its own parametrization", mode, m.layout));
}

ParametrizationType mup_parametrization() {
  ParametrizationType t;
  t.name = "mup";
  t.summary = "µP for Adam: matrix init x m_N^-1/2, scores x sqrt(base_head_dim)/dh, readout x output_mult/m_N, "
              "AdamW matrix lr / m_N and decay x m_N";
  t.reads = {"base_width", "base_head_dim", "output_mult"};
  t.factors = apply_mup_width_rules;
  t.check = [](const Config& c, const ResolvedModel& entries, Problems& problems) {
    check_width_scope("mup", c, entries, problems);
  };
  return t;
}

}  // namespace normlab
