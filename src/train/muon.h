// Muon (Keller Jordan et al. 2024, in the exact form of torch.optim.Muon) and NorMuon (Li et al.
// 2025, its authors' code) for the parameters of role `matrix`: momentum (optionally Nesterov),
// orthogonalisation by Newton-Schulz (Keller's coefficients or Polar Express), NorMuon's per-row
// second-moment normalisation, the per-shape rate adjustment and decoupled (optionally cautious)
// weight decay. The equations are in src/train/README.md ("Optimizers"). State is named by the
// contract's tensor names: `<name>.muon_momentum` and `<name>.normuon_v`.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "core/torch.h"

namespace normlab {

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
// set_ns_bf16_gemm_allowed(false) keeps every bf16 product on the reference path (tests hold both).
void set_ns_bf16_gemm_allowed(bool allowed);

// adjust(A, B): original sqrt(max(1, A/B)); match_rms_adamw 0.2 sqrt(max(A, B)).
double muon_lr_adjust(AdjustLr rule, int64_t A, int64_t B);

class Muon {
 public:
  // Every tensor 2-D (role matrix). o.type is muon or normuon.
  Muon(std::vector<std::pair<std::string, torch::Tensor>> params, const OptimConfig& o);

  // One update with the current .grad() of every parameter times grad_scale; f = lr(s) / optim.lr
  // (the schedule's factor), so the peak optim.muon.lr follows the shared schedule.
  void step(double f, double grad_scale = 1.0);

  // <name>.muon_momentum (and <name>.normuon_v [A, 1] for normuon) for every parameter.
  std::vector<std::pair<std::string, torch::Tensor>> state() const;
  // Restores state() output; throws RuntimeFailure naming a missing or mis-shaped tensor.
  void load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state);

  const std::vector<std::pair<std::string, torch::Tensor>>& params() const { return params_; }

 private:
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  std::vector<torch::Tensor> momentum_, row_v_;  // row_v_: normuon only
  OptimConfig o_;
};

}  // namespace normlab
