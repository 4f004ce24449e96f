// mup: µP for Adam, as microsoft/mup's MuAdam and MuReadout and EleutherAI's nanoGPT-mup apply it.
// With m_N = d_model / base_width: a `matrix` weight's init std x m_N^(-1/2); the scores
// q k^T sqrt(base_head_dim) / dh (q x sqrt(base_head_dim / dh) before the usual 1/sqrt(dh)); the
// head's input x output_mult / m_N; AdamW's `matrix` rate x 1/m_N and decay x m_N (their product
// per step unchanged). A rule that already scales its matrix step with the shape (Muon) keeps its
// matrix rate and decay.
#include "model/parametrizations/parametrization_type.h"

#include <cmath>

namespace normlab {

void apply_mup_width_rules(const ParamShape& s, bool width_aware_matrices, ParamFactors& f) {
  f.matrix_init = 1.0 / std::sqrt(s.m_n);
  f.score_q = std::sqrt(s.base_head_dim / static_cast<double>(s.head_dim));
  f.readout = s.output_mult / s.m_n;
  if (!width_aware_matrices) f.roles[Role::kMatrix] = {1.0 / s.m_n, 1.0 / s.m_n, s.m_n};
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
