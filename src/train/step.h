// One training update, shared by the trainer and `normlab bench` so that the benchmark times
// exactly the code that trains: the set-up (Trainable), the gradient pass (forward_backward), the
// decision (decide_step, a pure function of values every process agrees on) and the update
// (TrainStep::run, which does all three and returns a plain outcome).
#pragma once

#include <atomic>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/corpus.h"
#include "dist/comm.h"
#include "metrics/grad_stats.h"
#include "metrics/probe.h"
#include "metrics/spike.h"
#include "model/transformer.h"
#include "train/adamw.h"
#include "train/loss_scale.h"

namespace normlab {

// What one update's gradient pass produced (device tensors, not yet read).
struct Pass {
  torch::Tensor loss;                         // mean over micro-batches (this rank's rows), 0-dim
  torch::Tensor logit_max, lse_mean;          // with diag only
  std::vector<std::vector<int64_t>> offsets;  // window starts of each micro-batch (all ranks' rows)
  int64_t first_micro_batch = 0;
  // Diagnostics steps with accum x W > 1: the sum over this rank's micro-batches of |g_a|^2, g_a
  // the gradient of micro-batch a's own mean loss (times loss_scale^2), for grad_noise_scale.
  torch::Tensor micro_sq;
};

// The simple noise scale B_simple = tr(S) / |G|^2 (src/metrics/README.md; McCandlish et al. 2018,
// appendix A) from n > 1 gradients of batches of `small` sequences each: `mean_small_sq` the mean
// of their squared norms, `big_sq` the squared norm of their average (a batch of n * small).
// In sequences; NaN when n < 2. Unbiased but noisy: a single estimate may be negative.
double simple_noise_scale(double mean_small_sq, double big_sq, int64_t small, int64_t n);

// The autocast type of train.precision: kFloat (no autocast), kBFloat16 or kHalf.
torch::ScalarType precision_dtype(Precision precision);

// Forward and backward over cfg.train.accum micro-batches starting at global micro-batch index
// `micro_batch` (advanced); gradients are left in .grad(). diag: capture activation/attention
// statistics and output-logit statistics of the first micro-batch. The forward runs under
// autocast in train.precision (src/train/README.md), the backward outside it; the loss stays fp32.
// loss_scale (fp16) multiplies the loss before the backward, so the gradients come out scaled.
// On CUDA each micro-batch is copied to the device from pinned memory without a host sync.
// With W ranks, micro-batch k is the one a single process with batch W*B would draw, and rank r
// takes its rows r*B .. (r+1)*B-1 (src/dist/README.md). A reducer is armed before the last
// micro-batch's backward, so its all-reduces start while that backward runs.
Pass forward_backward(const Config& cfg, Transformer& model, AdamW& optimizer, const Corpus& data,
                      const torch::Device& device, int64_t& micro_batch, bool diag,
                      double loss_scale = 1.0, int rank = 0, int world_size = 1,
                      GradientReducer* reducer = nullptr);

// Global-norm clipping at cfg.optim.grad_clip (coefficient min(1, clip / (norm + 1e-6)), as
// torch.nn.utils.clip_grad_norm_) from the total gradient norm of the unscaled gradients (already
// read to the host, where the step decides on spikes), applied inside the AdamW step together
// with the unscaling by loss_scale.
void clip_and_step(const Config& cfg, AdamW& optimizer, double lr, double grad_norm, double loss_scale = 1.0);

// The model a run trains, built and initialised from cfg (torch seeded with cfg.seed), on
// `device` in training mode, with its optimizer and gradient-norm groups over the parameters in
// the contract's order.
struct Trainable {
  Transformer model{nullptr};
  std::vector<std::string> names;
  std::vector<torch::Tensor> params;
  std::unique_ptr<AdamW> optimizer;
  std::unique_ptr<GradStats> grad_stats;
};
Trainable make_trainable(const Config& cfg, const torch::Device& device);

// What a step does with its gradients (src/train/README.md and src/metrics/README.md), in order of precedence:
// an fp16 overflow (finite loss, non-finite scaled gradients, loss scaling on) skips the update;
// a non-finite loss or gradient norm skips it or stops the run (diag.nonfinite); a loss or
// gradient-norm spike skips it or stops the run when diag.spike.action says so; else update.
enum class StepAction { kUpdate, kSkipOverflow, kSkipNonFinite, kStopNonFinite, kSkipSpike, kStopSpike };
StepAction decide_step(double loss, double grad_norm, bool loss_scaling, bool spike, const DiagConfig& diag);
bool is_skip(StepAction a);  // a skip of the update that the run continues after
bool is_stop(StepAction a);

// One update's outcome, on the host.
struct StepOutcome {
  StepAction action = StepAction::kUpdate;
  Pass pass;                          // device tensors: offsets, diagnostics statistics
  double loss = 0;                    // mean over the micro-batches
  double loss_scale = 1;              // the scale this step's backward ran at (fp16)
  GradNorms grads;                    // of the unscaled gradients, before clipping
  std::vector<double> per_param_sq;   // squared per-tensor gradient norms, when asked for
  ZScore loss_z, grad_norm_z;         // against baselines that exclude this step
  bool loss_spike = false, grad_norm_spike = false;
  // Full-diagnostics steps that updated, on the process that records (rank 0): parameter norm,
  // update ratio, activation and attention statistics, output-logit statistics (one host read).
  std::optional<Diagnostics> diag;
  bool stop = false;                   // W > 1: some rank was asked to stop (Ctrl-C) during this step
  double grad_noise_scale = std::nan("");  // diag steps with accum x W > 1, in sequences
  int64_t qk_clipped = 0;                  // heads QK-Clip rescaled after this update
};

// Runs updates of one Trainable: forward and backward, one host read (loss, gradient-norm groups
// and, when asked, per-tensor norms), the decision, then on kUpdate gradient clipping and AdamW,
// the loss scaler and the spike baselines advanced; on a skip the gradients are dropped and
// nothing else changes. What to record or write is the caller's. With a Comm (W > 1 ranks) the
// gradients are averaged over the ranks while the last backward runs (GradientReducer) and the
// loss and stop flag all-reduced right after it, so every decision is taken on values every rank
// holds.
class TrainStep {
 public:
  TrainStep(const Config& cfg, Trainable& t, const Corpus& data, const torch::Device& device,
            LossScaler& scaler, SpikeDetector& loss_spikes, SpikeDetector& grad_spikes,
            Comm* comm = nullptr);
  // One update at learning rate lr, from global micro-batch `micro_batch` (advanced); diag
  // captures the statistics of the first micro-batch and, after an update, reads them with the
  // update ratio into the outcome's `diag` (rank 0 only). With W > 1 ranks,
  // `stop` (this process's Ctrl-C flag) is read after the backward and all-reduced with the
  // gradients: the outcome's `stop` says whether any rank was asked, so all of them stop together.
  StepOutcome run(int64_t& micro_batch, double lr, bool diag, bool per_param,
                  const std::atomic<bool>* stop = nullptr);

 private:
  const Config& cfg_;
  Trainable& t_;
  const Corpus& data_;
  torch::Device device_;
  LossScaler& scaler_;
  SpikeDetector &loss_spikes_, &grad_spikes_;
  Comm* comm_;
  std::unique_ptr<GradientReducer> reducer_;  // W > 1
  UpdateProbe probe_;  // the weights before a diagnostics step's update (buffers kept between steps)
  Diagnostics read_diagnostics(const Pass& pass);
};

}  // namespace normlab
