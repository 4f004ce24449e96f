// What the `eval` and `sample` commands do with a trained run: load a checkpoint's model with its
// config, evaluate it, and generate tokens from it. The command line only parses flags and prints.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>

#include "config/config.h"
#include "model/transformer.h"
#include "data/tokenizer.h"
#include "train/evaluate.h"

namespace normlab {

// A model from a run directory's checkpoint, in eval mode, with its config.
struct LoadedModel {
  Config config;
  Transformer model{nullptr};
  std::string checkpoint;
  std::optional<Tokenizer> tokenizer;  // data.tokenizer, checked against the SHA-256 the checkpoint recorded
};

// The checkpoint of `step` (default: LATEST), with the run's tokenizer where it has one (a
// UsageError when that file's SHA-256 is no longer the one recorded with the checkpoint). Checkpoints hold CPU float32 tensors; the model is
// moved to `device` after loading, so a checkpoint written on a GPU evaluates on a CPU and back.
LoadedModel load_run_model(const std::string& run, std::optional<int64_t> step, const torch::Device& device);

// Validation loss of a run's checkpoint on `data` (default: the run's data.val). A token outside
// the model's vocabulary is a UsageError. by_task: also the loss per task (evaluate()).
EvalResult evaluate_run(const std::string& run, std::optional<int64_t> step, std::string data,
                        const torch::Device& device, bool by_task = false);

struct SampleOptions {
  int64_t max_new = 256;    // tokens to generate, at most kMaxNewTokens
  double temperature = 1.0; // 0 = greedy argmax
  int64_t top_k = 0;        // 0 = the whole vocabulary
  uint64_t seed = 0;
};
constexpr int64_t kMaxNewTokens = 1000000;  // hours on a CPU, far beyond any use

// Checks the options (UsageError naming the flag).
void check_sample_options(const SampleOptions& o);

// The prompt's tokens: the tokenizer's encoding where the run has one, else its bytes (each
// checked against the vocabulary). UsageError when empty.
std::vector<int64_t> prompt_tokens(const LoadedModel& lm, const std::string& prompt);

// Generates up to o.max_new tokens after the prompt's tokens, the context cropped
// to the last ctx tokens, calling on_token with each as soon as it exists. Returns false when
// `stop` was raised before all were generated.
bool sample_tokens(LoadedModel& lm, std::vector<int64_t> prompt, const SampleOptions& o, const torch::Device& device,
                   const std::function<void(int64_t token)>& on_token, const std::atomic<bool>* stop);

}  // namespace normlab
