#include "train/inference.h"

#include <cmath>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/sha256.h"
#include "data/corpus.h"
#include "train/checkpoint.h"
#include "train/run_config.h"

namespace normlab {

LoadedModel load_run_model(const std::string& run, std::optional<int64_t> step, const torch::Device& device) {
  LoadedModel lm;
  lm.checkpoint = find_checkpoint(run, step);
  lm.config = check_and_resolve(parse_config_text(checkpoint_config(lm.checkpoint),
                                                  lm.checkpoint + "/model.safetensors"),
                                /*check_data_files=*/false);
  lm.model = Transformer(lm.config.model, lm.config.param);
  load_model_weights(lm.checkpoint, lm.model);
  lm.model->to(device);
  lm.model->eval();
  if (!lm.config.data.tokenizer.empty()) {
    // The file is checked before it is parsed: any change is this error, not a parse failure.
    const std::string sha = sha256_file_hex(lm.config.data.tokenizer);
    const auto meta = checkpoint_metadata(lm.checkpoint);
    const auto it = meta.find("tokenizer_sha256");
    if (it != meta.end() && it->second != sha) {
      throw UsageError(fmt::format("{}: the tokenizer changed since {} was written (SHA-256 {} there, {} now); "
                                   "restore the model file it was trained with", lm.config.data.tokenizer,
                                   lm.checkpoint, it->second, sha));
    }
    lm.tokenizer = Tokenizer::load(lm.config.data.tokenizer);
  }
  return lm;
}

EvalResult evaluate_run(const std::string& run, std::optional<int64_t> step, std::string data,
                        const torch::Device& device, bool by_task) {
  auto lm = load_run_model(run, step, device);
  const Corpus corpus = data.empty() ? Corpus::load(lm.config.data.val, lm.config.data.format)
                                     : Corpus::load(data, lm.config.data.format);
  if (const auto bad = corpus.first_token_at_or_above(lm.config.model.vocab_size)) {
    throw UsageError(fmt::format("{}: holds token {} at position {} >= the model's vocab_size {}", bad->path,
                                 bad->token, bad->position, lm.config.model.vocab_size));
  }
  return evaluate(lm.model, corpus, lm.config.eval.max_windows, device, lm.tokenizer ? &*lm.tokenizer : nullptr,
                  16, by_task);
}

std::vector<int64_t> prompt_tokens(const LoadedModel& lm, const std::string& prompt) {
  if (prompt.empty()) throw UsageError("--prompt must not be empty");
  const int64_t V = lm.config.model.vocab_size;
  if (lm.tokenizer) return lm.tokenizer->encode(prompt);
  std::vector<int64_t> tokens;
  for (unsigned char c : prompt) {
    if (c >= V) throw UsageError(fmt::format("--prompt: byte {} is outside the model's vocabulary of {}", c, V));
    tokens.push_back(c);
  }
  return tokens;
}

void check_sample_options(const SampleOptions& o) {
  if (!std::isfinite(o.temperature) || o.temperature < 0) {
    throw UsageError(fmt::format("--temperature: expected a finite number >= 0, got {}", o.temperature));
  }
  if (o.top_k < 0) throw UsageError("--top-k must be >= 0");
  if (o.max_new > kMaxNewTokens) {
    throw UsageError(fmt::format("--max-new: at most {} tokens, got {}", kMaxNewTokens, o.max_new));
  }
}

bool sample_tokens(LoadedModel& lm, std::vector<int64_t> tokens, const SampleOptions& o, const torch::Device& device,
                   const std::function<void(int64_t token)>& on_token, const std::atomic<bool>* stop) {
  const int64_t V = lm.config.model.vocab_size, ctx = lm.config.model.ctx;
  if (tokens.empty()) throw UsageError("--prompt must not be empty");
  std::mt19937_64 rng(o.seed);
  torch::NoGradGuard ng;
  for (int64_t i = 0; i < o.max_new; ++i) {
    if (stop && stop->load()) return false;
    const int64_t start = std::max<int64_t>(0, static_cast<int64_t>(tokens.size()) - ctx);
    auto input = torch::tensor(std::vector<int64_t>(tokens.begin() + start, tokens.end())).unsqueeze(0).to(device);
    // the last position's logits, read back once per token (sampling happens on the host)
    auto logits = lm.model->forward(input).select(1, input.size(1) - 1).squeeze(0).to(torch::kCPU, torch::kDouble);
    int64_t next;
    if (o.temperature == 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      auto l = logits / o.temperature;
      if (o.top_k > 0 && o.top_k < V) {
        auto kth = std::get<0>(l.topk(o.top_k)).min();
        l = l.masked_fill(l < kth, -std::numeric_limits<double>::infinity());
      }
      auto p = torch::softmax(l, 0).contiguous();
      const double* pp = p.data_ptr<double>();
      std::uniform_real_distribution<double> u(0.0, 1.0);
      double r = u(rng), acc = 0;
      next = V - 1;
      for (int64_t v = 0; v < V; ++v) {
        acc += pp[v];
        if (r < acc) {
          next = v;
          break;
        }
      }
    }
    tokens.push_back(next);
    on_token(next);
  }
  return true;
}

}  // namespace normlab
