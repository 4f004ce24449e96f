// The feed-forward registry (src/model/README.md, "Feed-forward"): the single list of valid
// `model.ffn` names. An entry is the FFN's hidden activation: ungated, h = act(fc1 x); gated,
// h = act(gate x) * (fc1 x) with a third matrix ffn.gate [d_ff, d]. The FFN module (model/ffn.cpp)
// builds the matrices, the optional mid norm and fc2 around it. Adding one = one file defining
// `FfnType xxx_ffn()` + one line in registry.cpp + one row in src/model/README.md's table.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/torch.h"

namespace normlab {

struct FfnType {
  std::string name;     // model.ffn
  std::string formula;  // one line, M(x) (`normlab keys`, README)
  bool gated = false;   // has ffn.gate: h = act(gate x) * (fc1 x)
  // The activation, elementwise, on fc1 x (ungated) or gate x (gated), in the input's dtype.
  std::function<torch::Tensor(const torch::Tensor& a)> act;
  // The same activation on one number in double, written out independently of `act` (the
  // registry-wide test holds act to it).
  std::function<double(double a)> reference;
};

const std::vector<FfnType>& ffn_registry();
const FfnType* find_ffn(const std::string& name);  // nullptr if unknown
std::string ffn_names();                             // "gelu, swiglu, ..."

}  // namespace normlab
