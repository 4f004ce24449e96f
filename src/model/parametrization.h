// The parametrization (src/model/README.md, "Parametrization"): how initialisation, the forward's two
// width-dependent scales, the depth branch multiplier and each role's learning rate and decay change
// with the model's width and depth, so that a rate tuned on a small model holds on a larger one.
// `param.type`: sp (standard: nothing changes), mup (µP for Adam, as microsoft/mup's MuAdam and
// MuReadout as nanoGPT-mup apply them), completep (µP and CompleteP's depth rules, Dey et al. 2025).
// Every number here is exactly 1 at the base shape (m_N = m_L = 1, base_head_dim = dh,
// output_mult = 1), so every mode trains bit for bit as sp there; a factor of exactly 1 is never
// applied (no multiply at all).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"

namespace normlab {

class Problems;

struct Parametrization {
  ParamType type = ParamType::kSp;
  double m_n = 1;  // width multiplier d_model / base_width
  double m_l = 1;  // depth multiplier n_layers / base_depth
  double base_depth = 0;     // resolved
  double base_head_dim = 0;  // resolved
  double alpha = 1;
  double output_mult = 1;
  int64_t head_dim = 0;  // dh of the run

  // m and p must be resolved (resolve_param_config has run); sp gives every factor 1.
  static Parametrization of(const ModelConfig& m, const ParamConfig& p);
  bool widthwise() const { return type != ParamType::kSp; }  // mup or completep
  bool depthwise() const { return type == ParamType::kCompleteP; }

  // Init: the std multiplier of a `matrix`-role weight drawn by init.scheme normal (m_N^(-1/2)),
  // and the depth the scaled-residual factor 1/sqrt(2 depth) uses (base_depth under completep,
  // else n_layers).
  double matrix_init_mult() const;
  double residual_init_depth(int64_t n_layers) const;
  // Forward: the factor q is multiplied by before the scores, so that s = q k^T sqrt(base_head_dim)/dh
  // (sqrt(base_head_dim / dh)); the readout's input multiplier (output_mult / m_N); each sublayer
  // term's multiplier where it joins the stream (m_L^(-alpha)).
  double score_q_mult() const;
  double readout_mult() const;
  double branch_mult() const;
  // Rates: the factor on role r's peak learning rate and on its decay coefficient. in_block: the
  // parameter sits in a block (CompleteP's depth factor applies to gains and biases there only).
  // width_aware_matrices: the optimizer's matrix rule already scales its step with the matrix's
  // shape (Muon), so µP leaves role matrix alone.
  double lr_mult(Role r, bool in_block, bool width_aware_matrices) const;
  double decay_mult(Role r, bool width_aware_matrices) const;

  // One line per role for the run log: init, learning-rate and decay multipliers.
  std::vector<std::string> role_table(bool width_aware_matrices) const;
};

// Fills the base shape the mode reads where it is auto, so the resolved config records the numbers:
// mup and completep base_width (d_model) and base_head_dim (base_width / n_heads), completep also
// base_depth (n_layers); sp reads none and leaves them auto.
void resolve_param_config(ParamConfig& p, const ModelConfig& m);

// The rules of section param: values, the keys a mode does not read at non-default values, and the
// scope of mup / completep (nGPT, residual types other than add, value_residual token,
// attn_gate head; completep: the layouts whose stream is normalised or mixed).
void check_param_config(const Config& c, Problems& problems);

}  // namespace normlab
