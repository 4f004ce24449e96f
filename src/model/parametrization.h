// The parametrization (src/model/README.md, "Parametrization"): how initialisation, the forward's two
// width-dependent scales, the depth branch multiplier and each role's learning rate and decay change
// with the model's width and depth, so that a rate tuned on a small model holds on a larger one.
// `param.type` names a registry entry (parametrizations/: sp, mup, completep) that says what changes;
// this file resolves a run's shape against its base, asks the entry for its factors once, and holds
// the config rules every entry shares (the base keys it does not read, their values). Every factor is
// exactly 1 at the base shape, so every mode trains bit for bit as sp there; a factor of exactly 1
// is never applied (no multiply at all).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "model/parametrizations/parametrization_type.h"

namespace normlab {

class Problems;

struct Parametrization {
  const ParametrizationType* type = nullptr;  // param.type's registry entry
  ParamShape shape;

  // m and p must be resolved (resolve_param_config has run) and p.type registered; sp gives every
  // factor 1.
  static Parametrization of(const ModelConfig& m, const ParamConfig& p);

  // Init: the std multiplier of a `matrix`-role weight drawn by init.scheme normal, and the depth
  // the scaled-residual factor 1/sqrt(2 depth) uses.
  double matrix_init_mult() const { return plain_.matrix_init; }
  double residual_init_depth() const { return plain_.residual_init_depth; }
  // Forward: the factor q is multiplied by before the scores, the readout's input multiplier, each
  // sublayer term's multiplier where it joins the stream.
  double score_q_mult() const { return plain_.score_q; }
  double readout_mult() const { return plain_.readout; }
  double branch_mult() const { return plain_.branch; }
  // Rates: the factor on role r's peak learning rate and on its decay coefficient. in_block: the
  // parameter sits in a block. width_aware_matrices: the optimizer's matrix rule already scales its
  // step with the matrix's shape (Muon).
  double lr_mult(Role r, bool in_block, bool width_aware_matrices) const;
  double decay_mult(Role r, bool width_aware_matrices) const;

  // One line per role for the run log: init, learning-rate and decay multipliers.
  std::vector<std::string> role_table(bool width_aware_matrices) const;

 private:
  // The entry's factors for each kind of matrix rule; the getters above read plain_ (only the roles'
  // rates and decays may differ between the two).
  ParamFactors plain_, width_aware_;
};

// Fills the base shape the mode reads where it is auto, so the resolved config records the numbers:
// base_width (d_model), base_head_dim (base_width / n_heads), base_depth (n_layers); the keys it does
// not read stay auto (sp reads none).
void resolve_param_config(ParamConfig& p, const ModelConfig& m);

// The rules of section param: a registered type, values, the keys a mode does not read at values of
// their own, and the entry's scope check.
void check_param_config(const Config& c, const ResolvedModel& entries, Problems& problems);
void check_param_config(const Config& c, Problems& problems);  // looks the model's entries up

}  // namespace normlab
