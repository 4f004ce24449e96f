#include "optim/rule.h"

#include <map>

#include "core/errors.h"

namespace normlab {

void restore_state(const NamedTensors& state, size_t n, const std::function<std::string(size_t)>& name_of,
                   const std::function<torch::Tensor&(size_t)>& dst) {
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  torch::NoGradGuard ng;
  for (size_t i = 0; i < n; ++i) {
    const std::string key = name_of(i);
    auto it = by_name.find(key);
    if (it == by_name.end()) throw RuntimeFailure("optimizer state lacks " + key);
    torch::Tensor& to = dst(i);
    if (!it->second.sizes().equals(to.sizes())) throw RuntimeFailure("optimizer state " + key + " has the wrong shape");
    to.copy_(it->second);
  }
}

}  // namespace normlab
