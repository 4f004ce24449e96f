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

// Forward and backward over cfg.train.accum micro-batches starting at global micro-batch index
// `micro_batch` (advanced); gradients are left in .grad(). diag: capture activation/attention
// statistics and output-logit statistics of the first micro-batch.
Pass forward_backward(const Config& cfg, Transformer& model, AdamW& optimizer, const Corpus& data,
                      const torch::Device& device, int64_t& micro_batch, bool diag);

// Global-norm clipping at cfg.optim.grad_clip (coefficient min(1, clip / (norm + 1e-6)), as
// torch.nn.utils.clip_grad_norm_) from the total gradient norm (already read to the host, where
// the step decides on spikes), applied inside the AdamW step.
void clip_and_step(const Config& cfg, AdamW& optimizer, double lr, double grad_norm);

}  // namespace normlab
