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
#include "parallel/comm.h"
#include "metrics/grad_stats.h"
#include "metrics/probe.h"
#include "metrics/spike.h"
#include "model/transformer.h"
#include "metrics/records.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"
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


// What `normlab replay` looks at inside a step (src/train/README.md, "Replaying a step"), given to
// TrainStep::run: the step's own batch and logits, and the model's statistics of its first
// micro-batch (an extra no-grad capture forward of the same window where the plan captures none,
// with running buffers put back and QK-Clip's maxima untouched). The step's numbers do not change.
class StepInspector {
 public:
  virtual ~StepInspector() = default;
  // After micro-batch `index`'s forward, under the step's autocast: this process's window starts,
  // the windows (rows, ctx + 1) on the device and the logits (detached).
  virtual void micro_batch(int64_t index, const std::vector<int64_t>& offsets, const torch::Tensor& windows,
                           const torch::Tensor& logits) = 0;
  // The model holds the first micro-batch's statistics (stats() and each attention's stats()).
  virtual void statistics(TransformerImpl& model) = 0;
};

// The autocast type of train.precision: kFloat (no autocast), kBFloat16 or kHalf.
torch::ScalarType precision_dtype(Precision precision);

// Forward and backward over cfg.train.accum micro-batches starting at global micro-batch index
// `micro_batch` (advanced); gradients are left in .grad(). diag: capture activation/attention
// statistics and output-logit statistics of the first micro-batch. The forward runs under
// autocast in train.precision (src/train/README.md), the backward outside it; the loss stays fp32.
// loss_scale (fp16) multiplies the loss before the backward, so the gradients come out scaled.
// On CUDA each micro-batch is copied to the device from pinned memory without a host sync.
// With W ranks, micro-batch k is the one a single process with batch W*B would draw, and rank r
// takes its rows r*B .. (r+1)*B-1 (src/parallel/README.md). A reducer is armed before the last
// micro-batch's backward, so its all-reduces start while that backward runs.
// `inspect` (replay) sees every micro-batch (StepInspector).
Pass forward_backward(const Config& cfg, Transformer& model, Optimizer& optimizer, const Corpus& data,
                      const torch::Device& device, int64_t& micro_batch, bool diag,
                      double loss_scale = 1.0, int rank = 0, int world_size = 1,
                      GradientReducer* reducer = nullptr, StepInspector* inspect = nullptr);

// Seconds of one gradient pass (forward and backward of one micro-batch of a fixed token pattern,
// no optimizer step) under `precision`: the best of `repeats` after one warm-up. The parameters'
// gradients and the running buffers are as before afterwards. The start-up check of bf16 on the
// CPU compares it across precisions (src/train/README.md, Precision).
double gradient_pass_seconds(const Config& cfg, Transformer& model, const torch::Device& device, Precision precision,
                             int repeats = 2);

// Global-norm clipping at cfg.optim.grad_clip (coefficient min(1, clip / (norm + 1e-6)), as
// torch.nn.utils.clip_grad_norm_) from the total gradient norm of the unscaled gradients (already
// read to the host, where the step decides on spikes), applied inside the AdamW step together
// with the unscaling by loss_scale.
void clip_and_step(const Config& cfg, Optimizer& optimizer, double lr, double grad_norm, double loss_scale = 1.0);

// The model a run trains, built and initialised from cfg (torch seeded with cfg.seed), on
// `device` in training mode, with its optimizer and gradient-norm groups over the parameters in
// the contract's order.
struct Trainable {
  Transformer model{nullptr};
  std::vector<std::string> names;
  std::vector<torch::Tensor> params;
  std::vector<ParamPlace> places;  // each parameter's block and part (the gradient groups)
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<GradStats> grad_stats;
};
// Each parameter's place (metrics/grad_stats.h) from the model's structure (which block, which of
// its sublayers) and its role (mixing), in the order given: no name is read.
std::vector<ParamPlace> param_places(TransformerImpl& model, const std::vector<torch::Tensor>& params);
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
  // On a spike: each layer's rolling mean of gradient norms before this step (layer_values' order).
  std::vector<double> layer_baseline;
  // With a StepInspector, an applied update's per-block update ratio (as layers.update_ratio).
  std::vector<double> update_ratio;
};

// What happens around record index s (the batch seen with the weights after s updates), the one
// rule the trainer, replay and bench follow (src/train/README.md, "The training step"):
struct StepPlan {
  int64_t step = 0;
  double lr = 0;            // lr_at(optim, s, train.steps)
  bool diag = false;        // s % diag.every == 0: full diagnostics of the first micro-batch
  bool log = false;         // a train record: s % train.log_every == 0, the last step, or diag
  bool per_param = false;   // diag.per_param on a logged step: per-tensor gradient norms
  bool progress = false;    // a progress line: s % train.log_every == 0 or the last step
  // After the update, with the step counter at s + 1:
  bool last = false;        // s + 1 == train.steps: the final evaluation and checkpoint
  bool eval = false;        // s + 1 a multiple of eval.every (not the last step, which evaluates anyway)
  bool checkpoint = false;  // s + 1 a multiple of train.checkpoint_every, or the last step
};
StepPlan plan_at(const Config& cfg, int64_t s);

// Runs updates of one Trainable: forward and backward, one host read (loss, gradient-norm groups
// and, when asked, per-tensor norms), the decision, then on kUpdate gradient clipping and AdamW,
// the layout's after-update action, and the state a step carries between updates advanced (the
// fp16 loss scaler, the loss and gradient-norm spike baselines and the per-layer gradient-norm
// windows the spike forensics compare against); on a skip the gradients are dropped and nothing
// else changes. What to record or write is the caller's. With a Comm (W > 1 ranks) the
// gradients are averaged over the ranks while the last backward runs (GradientReducer) and the
// loss and stop flag all-reduced right after it, so every decision is taken on values every rank
// holds. The trainer, `normlab replay` and `normlab bench` drive it the same way:
// plan_at(s), then run(micro_batch, plan); snapshot/restore carry its state through checkpoints.
class TrainStep {
 public:
  // Steps (run calls) this process ran, over every TrainStep: training runs, benches and replays
  // all step through here. The unit test tier's guard reads it (tests/README.md, "Tiers").
  static int64_t count();
  TrainStep(const Config& cfg, Trainable& t, const Corpus& data, const torch::Device& device,
            Comm* comm = nullptr);
  StepPlan plan_at(int64_t s) const { return normlab::plan_at(cfg_, s); }
  // One update as `plan` says, from global micro-batch `micro_batch` (advanced); plan.diag
  // captures the statistics of the first micro-batch and, after an update, reads them with the
  // update ratio into the outcome's `diag` (rank 0 only). With W > 1 ranks, `stop` (this
  // process's Ctrl-C flag) is read after the backward and all-reduced with the gradients: the
  // outcome's `stop` says whether any rank was asked, so all of them stop together.
  // `inspect` (replay): see StepInspector; the outcome then carries the update ratio.
  StepOutcome run(int64_t& micro_batch, const StepPlan& plan, const std::atomic<bool>* stop = nullptr,
                  StepInspector* inspect = nullptr);

  // The state a checkpoint carries (loss scale, spike baselines, layer windows): into `state`,
  // and back from it (a resume makes the same decisions as the run it continues).
  void snapshot(TrainState& state) const;
  void restore(const TrainState& state);
  const LossScaler& scaler() const { return scaler_; }

 private:
  const Config& cfg_;
  Trainable& t_;
  const Corpus& data_;
  torch::Device device_;
  Comm* comm_;
  LossScaler scaler_;
  SpikeDetector loss_spikes_, grad_spikes_;
  std::vector<RollingWindow> layer_windows_;  // per block, then embed, head
  std::unique_ptr<GradientReducer> reducer_;  // W > 1
  UpdateProbe probe_;  // the weights before a diagnostics step's update (buffers kept between steps)
  std::vector<int64_t> matrix_block_;  // per parameter: its block when its role is matrix, else -1
  Diagnostics read_diagnostics(const Pass& pass);
};

// The per-layer gradient-norm series of a record (layers.grad_norm, _attn, _ffn, _norms).
RecordLayers grad_norm_series(const GradNorms& g);

// Per-layer gradient norms as the spike forensics list them: blocks, then embed and head.
std::vector<double> layer_values(const GradNorms& g);
std::string layer_name(size_t i, int64_t n_layers);  // "blocks.<i>", "embed", "head"

// The train record of a step (src/metrics/README.md, "Records"): what a skipped or stopped step
// leaves, or an applied step's gradient norms and, on diagnostics steps, its statistics.
// `tokens` are the tokens seen after it, `tok_per_s` the speed since the last record.
TrainRecord train_record(const Config& cfg, const StepPlan& plan, const StepOutcome& o,
                         const std::vector<std::string>& param_names, int64_t tokens, double tok_per_s);

// spikes/step_<N>.json of a step whose loss or gradient norm spiked.
SpikeForensics spike_forensics(const Config& cfg, int64_t step, const StepOutcome& o);

}  // namespace normlab
