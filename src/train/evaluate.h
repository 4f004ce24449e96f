// Validation loss (MODEL.md section 6): mean next-token cross-entropy in nats over the
// non-overlapping windows at 0, ctx, 2ctx, ..., at most max_windows, in eval mode.
#pragma once

#include "data/corpus.h"
#include "model/transformer.h"

namespace normlab {

struct EvalResult {
  double loss = 0;
  int64_t windows = 0;
  int64_t tokens = 0;  // predicted tokens = windows * ctx
};

EvalResult evaluate(Transformer& model, const Corpus& corpus, int64_t max_windows,
                    const torch::Device& device, int64_t batch_size = 16);

// Mean cross-entropy of logits (B, T, V) against targets (B, T), in fp32.
torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace normlab
