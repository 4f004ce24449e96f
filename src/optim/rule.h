// An update rule: the part of an optimizer that moves one set of parameters (src/optim/README.md).
// AdamW, Muon and NorMuon are rules; an optimizer entry (optim/registry.h) says which rule takes
// which parameters. A rule receives each parameter with the rates its role gives it (RatedParam,
// from RoleRates in optim/role_rates.h): it never looks at a name, except to name its state.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "core/torch.h"

namespace normlab {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

struct RatedParam {
  std::string name;  // the contract's tensor name: only the checkpoint state's names read it
  torch::Tensor tensor;
  Role role = Role::kMatrix;
  double lr_mult = 1;       // times the rule's own peak rate (optim.lr for AdamW, optim.muon.lr for Muon)
  double weight_decay = 0;  // the decoupled decay coefficient; 0: not decayed
};

// The shared schedule at one update: lr(s), the scheduled rate of optim.lr, and its factor
// f(s) = lr(s) / optim.lr, which scales every other peak (src/train/README.md, "Learning rate").
struct ScheduledRate {
  double lr = 0;
  double f = 0;
};

class UpdateRule {
 public:
  virtual ~UpdateRule() = default;
  virtual const char* name() const = 0;  // "adamw", "muon", "normuon"
  // One update with the current gradient of every parameter times grad_scale (the clipping
  // coefficient, divided by an fp16 loss scale).
  virtual void step(const ScheduledRate& rate, double grad_scale) = 0;
  // The rule's state by the contract's names (exp_avg.<name>, <name>.muon_momentum, ...).
  virtual NamedTensors state() const = 0;
  // Restores state(); steps = the updates taken before it was saved. Throws RuntimeFailure naming
  // a missing or mis-shaped tensor.
  virtual void load_state(const NamedTensors& state, int64_t steps) = 0;
  virtual const std::vector<RatedParam>& params() const = 0;
};
using UpdateRules = std::vector<std::unique_ptr<UpdateRule>>;

// Copies each saved tensor named name_of(i) into dst(i); RuntimeFailure names a missing or
// mis-shaped one. The one restore loop of every rule.
void restore_state(const NamedTensors& state, size_t n, const std::function<std::string(size_t)>& name_of,
                   const std::function<torch::Tensor&(size_t)>& dst);

}  // namespace normlab
