// The diagnostics of one update (src/metrics/README.md) beyond gradient norms: parameter norm,
// the per-layer series (update ratio, then every series the model's forward captured: residual-
// stream RMS, max, kurtosis, block cosine, attention entropy, max logit and sink), output logit
// max and mean logsumexp. Everything is gathered as device tensors and moved to the host in one
// transfer per step (Flat), so a logging step costs one sync.
#pragma once

#include <string>
#include <vector>

#include "core/json.h"
#include "core/torch.h"
#include "metrics/grad_stats.h"

namespace normlab {

struct Diagnostics {
  double param_norm = 0;
  // layers.<name> of the train record, in order: update_ratio first, then the model's series.
  std::vector<std::pair<std::string, std::vector<double>>> layers;
  double logit_max = 0, lse_mean = 0;
  // AttnRes: each reader's mean weight per source (attnres_weights), in reading order.
  std::vector<std::pair<std::string, std::vector<double>>> depth_weights;
  // The series `name` (empty if absent).
  const std::vector<double>& layer(const std::string& name) const;
};

class UpdateProbe {
 public:
  // Before the optimizer step: remembers W.
  void before(const std::vector<torch::Tensor>& params);
  // After it: squared group norms of dW and of W (before), for the update ratio.
  torch::Tensor update_ratio(const std::vector<torch::Tensor>& params, const GradStats& groups, int64_t L);

  // The weight statistics of each block over its `matrix` parameters (src/metrics/README.md):
  // block[i] is the block of params[i], or -1 where params[i] is not a block's matrix. Each (L).
  struct WeightStats {
    torch::Tensor rms;          // w_rms: RMS of all their entries
    torch::Tensor spec_max;     // w_spec_max: the largest singular value among them
    torch::Tensor stable_rank;  // w_stable_rank: mean of |W|_F^2 / sigma_max(W)^2
    torch::Tensor update_cos;   // update_cos: cos(W_after - W_before, W_before), matrices concatenated
  };
  WeightStats weight_stats(const std::vector<torch::Tensor>& params, const std::vector<int64_t>& block, int64_t L) const;

 private:
  std::vector<torch::Tensor> before_;
};

// The largest singular value of a matrix, in double: the square root of the largest eigenvalue
// of its smaller Gram matrix (exact to rounding; the reference of spectral_norms).
torch::Tensor spectral_norm(const torch::Tensor& W);

// The largest singular value of each matrix, as the diagnostics compute it (src/metrics/README.md,
// w_spec_max): Lanczos with full reorthogonalisation on each smaller Gram matrix (fp32), all
// matrices with Grams of one size at once, `steps` steps (all of them where the Gram is no larger)
// from a fixed start vector, the largest eigenvalue of the resulting tridiagonal matrix in double.
// Deterministic; held to spectral_norm within 1e-4 relative by the tests. Each a 0-dim double.
// The one dispatch point: float32 CPU Grams run lanczos_kernel.h; anything else (and allow_fast
// false) the same iteration in LibTorch ops, the reference the kernel is tested against.
std::vector<torch::Tensor> spectral_norms(const std::vector<torch::Tensor>& matrices, int64_t steps = 48,
                                          bool allow_fast = true);

// Appends tensors (scalars or 1-D) into one flat vector and reads them back in the same order
// after a single host transfer.
class Flat {
 public:
  size_t add(const torch::Tensor& t);             // returns the slot index
  size_t add(const std::vector<torch::Tensor>& scalars);  // stacked
  void fetch();                                     // one device-to-host copy
  std::vector<double> get(size_t slot) const;
  double scalar(size_t slot) const { return get(slot).at(0); }

 private:
  std::vector<torch::Tensor> parts_;
  std::vector<std::pair<size_t, size_t>> spans_;
  size_t size_ = 0;
  std::vector<double> host_;
};

}  // namespace normlab
