// Muon (Keller Jordan et al. 2024, in the exact form of torch.optim.Muon) for the parameters of role
// `matrix`: momentum (optionally Nesterov), orthogonalisation by Newton-Schulz (Keller's
// coefficients or Polar Express), the per-shape rate adjustment and decoupled (optionally cautious)
// weight decay; every other role by AdamW. NorMuon (optim/normuon.cpp) is this rule with one more
// step on the orthogonalised update. The equations are in src/optim/README.md. State is named by
// the contract's tensor names: `<name>.muon_momentum`.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "config/owned_keys.h"
#include "core/torch.h"
#include "optim/rule.h"

namespace normlab {

// Muon's orthogonalisation: Keller Jordan's quintic Newton-Schulz or the Polar Express coefficients.
enum class NsKind { kKeller, kPolarExpress };
NORMLAB_CHOICE(NsKind, {NsKind::kKeller, "keller"}, {NsKind::kPolarExpress, "polar_express"});
enum class NsDtype { kBf16, kFp32 };
NORMLAB_CHOICE(NsDtype, {NsDtype::kBf16, "bf16"}, {NsDtype::kFp32, "fp32"});
// Muon's per-shape learning-rate factor: sqrt(max(1, A/B)), or Moonlight's 0.2 sqrt(max(A, B)).
enum class AdjustLr { kOriginal, kMatchRmsAdamw };
NORMLAB_CHOICE(AdjustLr, {AdjustLr::kOriginal, "original"}, {AdjustLr::kMatchRmsAdamw, "match_rms_adamw"});

// The most Newton-Schulz iterations a config may ask for: 5 is everyone's choice, each one costs
// three products per matrix and update, and past ~10 the iteration has converged long since.
constexpr int64_t kMaxNsSteps = 100;

// optim.muon.*: the keys muon and normuon own (beta2 normuon alone), read once into types.
struct MuonSettings {
  double lr = 0.02;
  double momentum = 0.95;
  bool nesterov = true;
  NsKind ns = NsKind::kKeller;
  int64_t ns_steps = 5;
  NsDtype ns_dtype = NsDtype::kBf16;
  AdjustLr adjust_lr = AdjustLr::kOriginal;
  bool cautious_wd = false;
  double beta2 = 0.95;  // normuon's row second moment

  static MuonSettings from(const OptimConfig& o);
};
// The keys of optim.muon that muon declares (normuon declares these and beta2), and the rule
// between them (polar_express has coefficients for 5 steps).
std::vector<KeySpec> muon_keys();
void check_muon_keys(const OwnedValues& keys, const KeyOwner::Problem& add);
// A KeySpec check: a number in [0, 1) (momenta, decay rates).
std::string check_unit_interval(const KeyValue& v, const ModelConfig&);

// NS(U): the orthogonalised U [A, B] (float32), its products in `dtype`: U rounded to bf16 and
// every product, sum and scaling rounded to bf16 as torch.optim.Muon's bf16 ops round them (each
// result once, from float32 sums of exact products), or all in float32.
// The matrix is transposed while A > B so the Gram matrix is the smaller one.
// With bf16, the products run as LibTorch bf16 GEMMs where ns_uses_bf16_gemm says LibTorch computes
// them that way for this shape on this device (a probe, once per shape), else as float32 GEMMs on
// bf16 values, each result rounded (the reference; the results differ only in the order of the
// float32 sums).
torch::Tensor newton_schulz(const torch::Tensor& U, NsKind kind, int64_t steps, NsDtype dtype);

// Whether newton_schulz's bf16 products for an [A, B] matrix on `device` take LibTorch's bf16 GEMMs.
bool ns_uses_bf16_gemm(int64_t A, int64_t B, const torch::Device& device);
// Where the bf16 products take LibTorch's bf16 GEMMs. kWhereFast (the default): where the probe says
// they round as the contract says and the device multiplies bf16 natively (CUDA; a CPU with
// AVX512-BF16); on other CPUs LibTorch's bf16 GEMMs convert to float32 and run about 2x slower than
// the reference path's float32 GEMMs. kWhereExact: wherever the probe says so, fast or not (tests
// hold that path to the reference on every CPU). kNever: the reference path everywhere.
enum class NsBf16Gemm { kNever, kWhereFast, kWhereExact };
// Sets the policy; returns the one it replaces.
NsBf16Gemm set_ns_bf16_gemm(NsBf16Gemm policy);
// The policy for one scope, the one before restored at its end, also when a test throws (tests).
class ScopedNsBf16Gemm {
 public:
  explicit ScopedNsBf16Gemm(NsBf16Gemm policy) : before_(set_ns_bf16_gemm(policy)) {}
  ~ScopedNsBf16Gemm() { set_ns_bf16_gemm(before_); }
  ScopedNsBf16Gemm(const ScopedNsBf16Gemm&) = delete;
  ScopedNsBf16Gemm& operator=(const ScopedNsBf16Gemm&) = delete;

 private:
  NsBf16Gemm before_;
};

// adjust(A, B): original sqrt(max(1, A/B)); match_rms_adamw 0.2 sqrt(max(A, B)).
double muon_lr_adjust(AdjustLr rule, int64_t A, int64_t B);

class Muon : public UpdateRule {
 public:
  // Every tensor 2-D (role matrix).
  Muon(std::vector<RatedParam> params, const MuonSettings& s);

  const char* name() const override { return "muon"; }
  // Parameter i's peak is optim.muon.lr times its multiplier, times f(s) of the shared schedule.
  void step(const ScheduledRate& rate, double grad_scale) override;
  void step(double f, double grad_scale = 1.0) { step(ScheduledRate{0, f}, grad_scale); }
  // <name>.muon_momentum for every parameter.
  NamedTensors state() const override;
  void load_state(const NamedTensors& state, int64_t steps) override;
  const std::vector<RatedParam>& params() const override { return params_; }

 protected:
  // The orthogonalised update O of parameter i, before its rate and decay apply (NorMuon's step).
  virtual void shape_update(size_t i, torch::Tensor& O) {}
  std::vector<RatedParam> params_;
  MuonSettings s_;

 private:
  std::vector<torch::Tensor> momentum_;
};

}  // namespace normlab
