// Validation loss (data/README.md): mean next-token cross-entropy in nats over the
// non-overlapping windows at 0, ctx, 2ctx, ..., at most max_windows, in eval mode.
#pragma once

#include <optional>
#include <string>

#include "data/corpus.h"
#include "data/tokenizer.h"
#include "metrics/records.h"
#include "model/transformer.h"

namespace normlab {

struct EvalResult {
  double loss = 0;
  int64_t windows = 0;
  int64_t tokens = 0;  // predicted tokens = windows * ctx
  double eff_rank = 0; // exp(entropy of s / sum(s)), s the singular values of the head's input
                       // states over the first kEffRankPositions positions (src/metrics/README.md)
  std::optional<int64_t> bytes;  // bytes of text behind the predicted tokens, where known
  std::optional<double> bpb;     // bits per byte: loss * tokens / (bytes * ln 2)
  TaskLosses by_task;  // with by_task: per task label (line_task)
};

// The task a byte-level corpus's line belongs to, read from the line a target byte sits on (the
// byte ending a line belongs to it): the line's first byte when it is a lowercase letter followed
// by ':' (the toy corpus's `w:`, `c:`, `r:`, `b:`, `k:`; data/README.md), else "other"; also
// "other" when the line starts more than kTaskScan bytes before the position (not looked up).
constexpr int64_t kTaskScan = 4096;
std::vector<std::string> line_tasks(const Corpus& corpus, int64_t begin, int64_t count);

// The bytes of text behind the predicted (target) tokens of the evaluation windows: one per
// token when every file is read as bytes; with a tokenizer, the sum of its token_bytes; else
// unknown (nullopt): raw token files without a tokenizer say nothing about bytes.
std::optional<int64_t> bytes_behind_targets(const Corpus& corpus, const std::vector<int64_t>& offsets, int64_t ctx,
                                            const Tokenizer* tokenizer);

constexpr int64_t kEffRankPositions = 1024;

// exp(H(s / sum(s))) of the singular values s of h (N, d), computed in double.
double effective_rank(const torch::Tensor& h);

// Windows a forward takes at a time (the loss is the same whatever it is, up to rounding).
constexpr int64_t kEvalBatch = 16;

// by_task: also the loss per task (line_tasks of every target); a byte-level corpus only.
EvalResult evaluate(Transformer& model, const Corpus& corpus, int64_t max_windows,
                    const torch::Device& device, const Tokenizer* tokenizer = nullptr, int64_t batch_size = kEvalBatch,
                    bool by_task = false);

// Mean cross-entropy of logits (B, T, V) against targets (B, T), in fp32.
torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace normlab
