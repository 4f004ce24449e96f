// The optimizer registry: one line per optimizer. Validation, `normlab keys`, the config keys the
// optimizers own and the registry-wide tests all iterate this table.
#include "optim/registry.h"

#include "core/registry.h"
#include "optim/adamw.h"

namespace normlab {

OptimizerEntry adamw_optimizer();
OptimizerEntry muon_optimizer();
OptimizerEntry normuon_optimizer();

const std::vector<OptimizerEntry>& optimizer_registry() {
  static const std::vector<OptimizerEntry> table = {adamw_optimizer(), muon_optimizer(), normuon_optimizer()};
  return table;
}

const OptimizerEntry* find_optimizer(const std::string& name) { return find_by_name(optimizer_registry(), name); }

std::string optimizer_names() { return names_of(optimizer_registry()); }

UpdateRules matrices_by(std::vector<RatedParam> params, const OptimConfig& o,
                        const std::function<std::unique_ptr<UpdateRule>(std::vector<RatedParam>)>& matrix_rule) {
  std::vector<RatedParam> matrices, rest;
  for (auto& p : params) (p.role == Role::kMatrix ? matrices : rest).push_back(std::move(p));
  UpdateRules rules;
  rules.push_back(std::make_unique<AdamW>(std::move(rest), o));
  rules.push_back(matrix_rule(std::move(matrices)));
  return rules;
}

}  // namespace normlab
