// One training update's gradient pass and parameter step, shared by the trainer and
// `normlab bench` so that the benchmark times exactly the code that trains.
#pragma once

#include <vector>

#include "config/config.h"
#include "data/corpus.h"
#include "model/transformer.h"
#include "train/adamw.h"

namespace normlab {

// What one update's gradient pass produced (device tensors, not yet read).
struct Pass {
  torch::Tensor loss;                         // mean over micro-batches, 0-dim
  torch::Tensor logit_max, lse_mean;          // with diag only
  std::vector<std::vector<int64_t>> offsets;  // window starts of each micro-batch
  int64_t first_micro_batch = 0;
};

// The autocast type of train.precision: kFloat (no autocast), kBFloat16 or kHalf.
torch::ScalarType precision_dtype(const std::string& precision);

// Forward and backward over cfg.train.accum micro-batches starting at global micro-batch index
// `micro_batch` (advanced); gradients are left in .grad(). diag: capture activation/attention
// statistics and output-logit statistics of the first micro-batch. The forward runs under
// autocast in train.precision (MODEL.md section 7), the backward outside it; the loss stays fp32.
// loss_scale (fp16) multiplies the loss before the backward, so the gradients come out scaled.
// On CUDA each micro-batch is copied to the device from pinned memory without a host sync.
Pass forward_backward(const Config& cfg, Transformer& model, AdamW& optimizer, const Corpus& data,
                      const torch::Device& device, int64_t& micro_batch, bool diag,
                      double loss_scale = 1.0);

// Global-norm clipping at cfg.optim.grad_clip (coefficient min(1, clip / (norm + 1e-6)), as
// torch.nn.utils.clip_grad_norm_) from the total gradient norm of the unscaled gradients (already
// read to the host, where the step decides on spikes), applied inside the AdamW step together
// with the unscaling by loss_scale.
void clip_and_step(const Config& cfg, AdamW& optimizer, double lr, double grad_norm, double loss_scale = 1.0);

}  // namespace normlab
