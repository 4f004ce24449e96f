// Value residual (ResFormer, Zhou et al. 2024; modded-nanogpt) as a registry entry,
// `model.value_residual`: block 0's raw values V_0 (v_proj x, before any v_norm) are mixed into the
// raw values of every later block, by a rule the mode owns together with its parameters. The
// attention is the only code that meets it: block 0's attention puts V_0 into the forward's
// ValueSource, each later block's attention mixes through its ValueMix, and the last block's
// takes V_0 out again, so nothing is kept between forwards and the block loop does not know value
// residuals exist. Adding a mode = one file defining `ValueResidualType xxx_value_residual()` +
// one line in registry.cpp + one row in src/model/README.md.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/torch.h"

namespace normlab {

// Block 0's raw values (B, T, d) during one forward, shared by the blocks' attentions.
class ValueSource {
 public:
  void put(torch::Tensor v0) { v0_ = std::move(v0); }
  // The values put by block 0 in this forward.
  const torch::Tensor& get() const;
  void release() { v0_ = torch::Tensor(); }

 private:
  torch::Tensor v0_;
};

// One mixing block's rule. x: the attention's input (B, T, d); v: the block's raw values (B, T, d);
// v0: block 0's. weight_on_v0, when not null, receives the mean weight the mix puts on v0 (the
// `vres_lambda` diagnostic, a 0-dim fp32 tensor).
class ValueMix {
 public:
  virtual ~ValueMix() = default;
  virtual torch::Tensor mix(const torch::Tensor& x, const torch::Tensor& v, const torch::Tensor& v0,
                            torch::Tensor* weight_on_v0) const = 0;
};

struct ValueMixShape {
  int64_t d_model = 0, n_heads = 0;
};

struct ValueResidualType {
  std::string name;
  std::string equation;  // one line, for the README table and `normlab keys`
  // Why param.type mup and completep do not take this mode (empty: they do).
  std::string outside_parametrization;
  // Registers the mode's parameters on a mixing block's attention (blocks 1 .. L-1; role mixing,
  // so they keep these constructor values through init and get no weight decay) and returns its
  // rule. Empty for `none`, the mode that mixes nothing.
  std::function<std::unique_ptr<ValueMix>(torch::nn::Module& attn, const ValueMixShape& shape)> make;
};

const std::vector<ValueResidualType>& value_residual_registry();
const ValueResidualType* find_value_residual(const std::string& name);  // nullptr if unknown
std::string value_residual_names();

}  // namespace normlab
