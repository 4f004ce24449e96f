// The fuzz targets build the config loader without LibTorch, so without the model's registries:
// this table stands in for train/key_owners.cpp with one owner of each shape the registries use
// (a norm's boolean and number keys, a layout's auto numbers, an auto integer and a named choice, a
// residual key with two owners, optimizers with and without keys sharing one section, schedules
// with and without keys),
// so the loader's handling of owned keys is fuzzed all the same.
#include "config/owned_keys.h"

namespace normlab {

const std::vector<KeyOwner>& key_owners() {
  static const std::vector<KeyOwner> owners = {
      {OwnerKind::kNorm, "layernorm", "norm", {{"bias", KeyKind::kBoolean, true, "layernorm has a bias"}}},
      {OwnerKind::kNorm, "dyt", "norm", {{"dyt_alpha", KeyKind::kNumber, 0.5, "initial alpha of dyt"}}},
      {OwnerKind::kLayout, "deepnorm", "deepnorm",
       {{"alpha", KeyKind::kNumber, {}, "residual scale"}, {"beta", KeyKind::kNumber, {}, "init gain"}}},
      {OwnerKind::kLayout, "mix", "mix", {{"post_layers", KeyKind::kInteger, {}, "post blocks"}}},
      {OwnerKind::kLayout, "normformer", "normformer",
       {{"resid_scale", KeyKind::kName, std::string("none"), "skip scales", {"none", "ffn", "all"}}}},
      {OwnerKind::kResidual, "hc", "residual",
       {{"streams", KeyKind::kInteger, int64_t{4}, "streams"}, {"dynamic", KeyKind::kBoolean, true, "dynamic"}}},
      {OwnerKind::kResidual, "mhc", "residual", {{"streams", KeyKind::kInteger, int64_t{4}, "streams"}}},
      {OwnerKind::kOptim, "adamw", "", {}},
      {OwnerKind::kOptim, "muon", "muon",
       {{"lr", KeyKind::kNumber, 0.02, "rate"}, {"ns", KeyKind::kName, std::string("keller"), "ns", {"keller", "polar_express"}}}},
      {OwnerKind::kOptim, "normuon", "muon",
       {{"lr", KeyKind::kNumber, 0.02, "rate"}, {"beta2", KeyKind::kNumber, 0.95, "beta2"}}},
      {OwnerKind::kSchedule, "cosine", "cosine", {}},
      {OwnerKind::kSchedule, "linear", "linear", {}},
      {OwnerKind::kSchedule, "constant", "constant", {}},
      {OwnerKind::kSchedule, "wsd", "wsd",
       {{"decay_frac", KeyKind::kNumber, 0.2, "fraction"}, {"shape", KeyKind::kName, std::string("linear"), "shape", {"linear", "sqrt"}}}},
  };
  return owners;
}

}  // namespace normlab
