// The parametrization registry (src/model/README.md, "Parametrization"): the single list of valid
// `param.type` names. An entry says which base-shape keys of `param` it reads (resolve fills them
// where auto; any other at a value of its own is a config error), what it changes at a shape (init,
// the forward's scales, each role's rate and decay) and which models it refuses. Shared code never
// names an entry. Adding one = one file defining `ParametrizationType xxx_parametrization()` + one
// line in registry.cpp + one row in src/model/README.md's table.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "config/config.h"

namespace normlab {

class Problems;
struct ResolvedModel;

// The keys of `param` that describe the base shape, in the order errors name them. An entry reads a
// subset; the ones it does not read must stay auto (or at the run's own shape) and at their defaults.
inline const std::vector<std::string>& param_base_keys() {
  static const std::vector<std::string> keys = {"base_width", "base_head_dim", "output_mult", "base_depth", "alpha"};
  return keys;
}

// A run's shape against the base shape, for the keys the entry reads (resolved: numbers).
struct ParamShape {
  double m_n = 1;             // d_model / base_width (1 where the entry does not read base_width)
  double m_l = 1;             // n_layers / base_depth (1 where the entry does not read base_depth)
  double base_depth = 0;      // base_depth; n_layers where auto or unread
  double base_head_dim = 0;   // base_head_dim; dh where auto or unread
  int64_t head_dim = 0;       // dh of the run
  double alpha = 1;           // param.alpha
  double output_mult = 1;     // param.output_mult
};

// One role's factors on its peak learning rate (inside a block and outside) and on its decay.
struct RoleFactors {
  double lr_in_block = 1, lr_outside = 1, decay = 1;
};

// What a parametrization changes at one shape. Its entry starts from sp's values (nothing changes:
// these defaults, with residual_init_depth = n_layers, which Parametrization::of sets), and sets
// what it changes; only the roles' factors may depend on the kind of matrix rule. Every factor must be exactly 1 at the base
// shape (m_N = m_L = 1, base_head_dim = dh, output_mult 1), so that there every entry trains bit for
// bit as sp: a factor of exactly 1 is never applied (ParametrizationTest checks every entry).
struct ParamFactors {
  double matrix_init = 1;          // std multiplier of a `matrix` weight drawn by init.scheme normal
  double residual_init_depth = 0;  // the depth in init.scaled_residual's 1/sqrt(2 depth) (sp: n_layers)
  double score_q = 1;              // q's multiplier before the scores (the score scale)
  double readout = 1;              // the head input's multiplier
  double branch = 1;               // each sublayer term's multiplier where it joins the stream
  std::map<Role, RoleFactors> roles;  // a role absent: all 1

  RoleFactors role(Role r) const {
    const auto it = roles.find(r);
    return it == roles.end() ? RoleFactors{} : it->second;
  }
};

struct ParametrizationType {
  std::string name;     // param.type
  std::string summary;  // one line: what it scales (`normlab keys`)
  std::vector<std::string> reads;  // the param_base_keys() it reads
  // Changes f (sp's values on entry) at shape s. width_aware_matrices: the optimizer's rule for
  // role matrix already scales its step with the matrix's shape (Muon). Null: changes nothing.
  std::function<void(const ParamShape& s, bool width_aware_matrices, ParamFactors& f)> factors;
  // The models it refuses, one problem each (may be null).
  std::function<void(const Config& c, const ResolvedModel& entries, Problems& problems)> check;

  bool reads_key(const std::string& key) const;
};

const std::vector<ParametrizationType>& parametrization_registry();
const ParametrizationType* find_parametrization(const std::string& name);  // nullptr if unknown
std::string parametrization_names();                                        // "sp, mup, completep"

// The scope of µP's width rules (mup, completep): weights from the width to a fixed size that µP
// would have to treat as readouts (residual types other than add, value-residual modes whose entry
// says so, attn_gate head) and layouts with a parametrization of their own (nGPT) are refused.
void check_width_scope(const std::string& mode, const Config& c, const ResolvedModel& entries, Problems& problems);

// µP's width rules (mup.cpp), which completep applies before its depth rules.
void apply_mup_width_rules(const ParamShape& s, bool width_aware_matrices, ParamFactors& f);

}  // namespace normlab
