// Norm modules and their registry (src/model/README.md, "Norms"). A norm is a Module with a
// virtual forward over the last dimension; the registry is the single list of valid
// `model.norm.type` names. Adding a norm = one file defining `NormType xxx_norm()` (the module,
// its formula, default eps, the config keys it owns, and what the tests hold the module to: the
// formula again as loops, and the tensors it creates) + one line in registry.cpp + one README row.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/owned_keys.h"
#include "core/torch.h"

namespace normlab {

struct NormOptions {
  int64_t size = 128;  // n, the normalised (last) dimension
  double eps = 1e-5;   // already resolved (the type's default when config says auto)
  // The values of model.norm.<key> (keys declared by the norm types: "norm.dyt_alpha", ...).
  OwnedValues keys{OwnerKind::kNorm};
};

class NormImpl : public torch::nn::Module {
 public:
  // x: (..., n) -> (..., n), same dtype as x.
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
};
using NormPtr = std::shared_ptr<NormImpl>;

// A norm's parameters and buffers by name, as double tensors (contiguous), for NormReference.
using NormTensors = std::map<std::string, torch::Tensor>;
inline double element(const NormTensors& p, const std::string& name, int64_t j) {
  return p.at(name).data_ptr<double>()[j];
}

// The formula written a second time, apart from forward: plain loops in double over x, a row-major
// (rows, n) matrix, into y; training-mode statistics; p the module's tensors. The tests hold
// forward to it in float, double and bf16 (tests/model/norms/norms_test.cpp), so it must not call
// the module's code.
using NormReference = std::function<void(const double* x, double* y, int64_t rows, int64_t n,
                                         const NormTensors& p, double eps)>;

// A tensor the module creates (model.norm.bias true): its name, shape and initial value. The tests
// compare the module's tensors with this list, name for name.
struct NormTensorSpec {
  std::string name;
  bool per_channel = true;  // shape [n]; false: [1]
  double init = 0;          // the initial value of every element
  std::function<double(const NormOptions&)> init_from;  // when set, the initial value instead
  bool buffer = false;
};

struct NormType {
  std::string name;
  double default_eps;   // NaN for norms without an eps
  std::string formula;  // one line, shown in errors and `normlab keys`
  std::function<NormPtr(const NormOptions&)> make;
  NormReference reference;              // required (NormRegistryTest)
  std::vector<NormTensorSpec> tensors;  // every parameter and buffer; empty: none
  std::vector<KeySpec> keys;      // model.norm.<key> this type owns (name, kind, default, help, check)
  bool batch_statistics = false;  // statistics pooled over positions: warned about at start-up
};

// A value check for KeySpec::check: a number > 0.
std::string check_positive(const KeyValue& v, const ModelConfig&);

const std::vector<NormType>& norm_registry();
const NormType* find_norm(const std::string& name);  // nullptr if unknown
std::string norm_names();                              // "layernorm, rmsnorm, ..."
NormPtr make_norm(const std::string& type, const NormOptions& options);

// Norms compute in at least fp32 (double stays double, so gradient checks can run in double)
// and cast the result back to the input's dtype.
inline torch::Tensor compute_dtype(const torch::Tensor& x) {
  return x.scalar_type() == torch::kDouble ? x : x.to(torch::kFloat);
}

// Whether a norm with a hand-written CPU kernel (rmsnorm, rmsnorm_1p, layernorm) may use it for
// x, the already fp32-converted input: contiguous float32 on the CPU. Anything else (double for
// gradient checks, strided views, CUDA) takes the composed-op path.
inline bool cpu_fast_path_applies(const torch::Tensor& x) {
  return x.device().is_cpu() && x.layout() == torch::kStrided && x.scalar_type() == torch::kFloat &&
         x.dim() >= 1 && x.numel() > 0 && x.is_contiguous();
}

}  // namespace normlab
