// The optimizer registry (src/optim/README.md): the single list of valid `optim.type` names. An
// entry owns its config keys (optim.<section>.<key>, declared in its own file as norms declare
// theirs) and says which update rule takes which parameters. Adding an optimizer = one file
// defining `OptimizerEntry xxx_optimizer()` + one line in registry.cpp + one README row.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "config/owned_keys.h"
#include "optim/rule.h"

namespace normlab {

struct OptimizerEntry {
  std::string name;     // optim.type
  std::string summary;  // one line: which rule updates which role (`normlab keys`, errors)
  std::string section;  // its keys live at optim.<section>.<key>; entries of one family share it
  std::vector<KeySpec> keys;
  KeyOwner::Together together;  // rules over several of its keys (may be empty)
  // Its rule for role matrix already scales the step with the matrix's shape (Muon's adjust), so
  // a width parametrization leaves that role's rate and decay alone (src/optim/README.md).
  bool width_aware_matrices = false;
  // The rules over every parameter, each parameter in exactly one, from its role.
  std::function<UpdateRules(std::vector<RatedParam> params, const OptimConfig& o)> make;
};

const std::vector<OptimizerEntry>& optimizer_registry();
const OptimizerEntry* find_optimizer(const std::string& name);  // nullptr if unknown
std::string optimizer_names();                                    // "adamw, muon, normuon"

// The split of Muon-like optimizers: role `matrix` by matrix_rule, every other role by AdamW
// (src/optim/README.md). The AdamW rule comes first (its state is saved first).
UpdateRules matrices_by(std::vector<RatedParam> params, const OptimConfig& o,
                        const std::function<std::unique_ptr<UpdateRule>(std::vector<RatedParam>)>& matrix_rule);

}  // namespace normlab
