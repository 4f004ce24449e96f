#include "train/evaluate.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"

namespace normlab {

torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  const int64_t V = logits.size(-1);
  return torch::nn::functional::cross_entropy(logits.reshape({-1, V}).to(torch::kFloat),
                                              targets.reshape({-1}));
}

std::optional<int64_t> bytes_behind_targets(const Corpus& corpus, const std::vector<int64_t>& offsets, int64_t ctx,
                                            const Tokenizer* tokenizer) {
  if (corpus.tokens_are_bytes()) return static_cast<int64_t>(offsets.size()) * ctx;
  if (!tokenizer) return std::nullopt;
  int64_t bytes = 0;
  std::vector<int64_t> targets(static_cast<size_t>(ctx));
  for (int64_t off : offsets) {
    corpus.copy(off + 1, ctx, targets.data());
    for (int64_t t : targets) bytes += tokenizer->token_bytes(t);
  }
  return bytes;
}

std::vector<std::string> line_tasks(const Corpus& corpus, int64_t begin, int64_t count) {
  const int64_t b0 = std::max<int64_t>(0, begin - kTaskScan);
  const int64_t end = std::min(corpus.size(), begin + count + 1);  // one past: a line's second byte
  std::vector<int64_t> bytes(static_cast<size_t>(end - b0));
  corpus.copy(b0, end - b0, bytes.data());
  auto byte = [&](int64_t pos) { return pos < end ? bytes[static_cast<size_t>(pos - b0)] : -1; };
  auto label = [&](int64_t start) {
    const int64_t c = byte(start);
    return c >= 'a' && c <= 'z' && byte(start + 1) == ':' ? std::string(1, static_cast<char>(c)) : std::string("other");
  };
  // The line at b0: looked up when it starts there (a line that starts before b0 is not).
  std::string task = b0 == 0 || corpus.token(b0 - 1) == '\n' ? label(b0) : "other";
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t pos = b0; pos < begin + count; ++pos) {
    if (pos > b0 && byte(pos - 1) == '\n') task = label(pos);
    if (pos >= begin) out.push_back(task);
  }
  return out;
}

EvalResult evaluate(Transformer& model, const Corpus& corpus, int64_t max_windows,
                    const torch::Device& device, const Tokenizer* tokenizer, int64_t batch_size, bool by_task) {
  const int64_t ctx = model->config().ctx;
  const auto offsets = eval_offsets(corpus.size(), ctx, max_windows);
  if (offsets.empty()) {
    throw UsageError(corpus.name() + ": too short for one evaluation window of ctx + 1 tokens");
  }
  if (by_task && !corpus.tokens_are_bytes()) {
    throw UsageError(corpus.name() + ": the loss per task needs a byte-level corpus (its lines' first bytes name the task)");
  }
  std::map<std::string, std::pair<int64_t, double>> tasks;  // label -> (tokens, summed loss)
  const bool was_training = model->is_training();
  model->eval();
  torch::NoGradGuard ng;
  // summed on the device, read once at the end
  auto sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(device));
  std::vector<torch::Tensor> states;  // the first kEffRankPositions positions, in window order
  int64_t kept = 0;
  for (size_t i = 0; i < offsets.size(); i += batch_size) {
    std::vector<int64_t> chunk(offsets.begin() + i,
                               offsets.begin() + std::min(offsets.size(), i + batch_size));
    auto w = corpus.windows(chunk, ctx).to(device);
    auto h = model->hidden(w.narrow(1, 0, ctx));
    if (kept < kEffRankPositions) {
      auto rows = h.reshape({-1, h.size(-1)});
      rows = rows.narrow(0, 0, std::min(rows.size(0), kEffRankPositions - kept));
      kept += rows.size(0);
      states.push_back(rows.to(torch::kDouble));
    }
    auto logits = model->head(h);
    sum += lm_loss(logits, w.narrow(1, 1, ctx)).to(torch::kDouble) * static_cast<double>(chunk.size());
    if (by_task) {
      const int64_t V = logits.size(-1);
      const auto per_token = torch::nn::functional::cross_entropy(
                                 logits.reshape({-1, V}).to(torch::kFloat), w.narrow(1, 1, ctx).reshape({-1}),
                                 torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone))
                                 .to(torch::kDouble)
                                 .cpu();
      const double* l = per_token.data_ptr<double>();
      for (size_t k = 0; k < chunk.size(); ++k) {
        const auto labels = line_tasks(corpus, chunk[k] + 1, ctx);  // the targets' positions
        for (int64_t t = 0; t < ctx; ++t) {
          auto& [n, s] = tasks[labels[static_cast<size_t>(t)]];
          n += 1;
          s += l[static_cast<int64_t>(k) * ctx + t];
        }
      }
    }
  }
  model->train(was_training);
  EvalResult r;
  r.windows = static_cast<int64_t>(offsets.size());
  r.loss = sum.item<double>() / static_cast<double>(r.windows);
  r.tokens = r.windows * ctx;
  r.eff_rank = effective_rank(torch::cat(states));
  r.bytes = bytes_behind_targets(corpus, offsets, ctx, tokenizer);
  for (const auto& [name, ns] : tasks) r.by_task[name] = {ns.first, ns.second / static_cast<double>(ns.first)};
  if (r.bytes && *r.bytes > 0) r.bpb = r.loss * static_cast<double>(r.tokens) / (static_cast<double>(*r.bytes) * std::log(2.0));
  return r;
}

double effective_rank(const torch::Tensor& h) {
  torch::NoGradGuard ng;
  if (!torch::isfinite(h).all().item<bool>()) return std::nan("");  // a diverged model
  auto s = torch::linalg_svdvals(h.to(torch::kDouble).cpu());
  auto total = s.sum();
  if (total.item<double>() <= 0) return 0;
  auto p = s / total;
  auto entropy = -(p * p.clamp_min(1e-300).log()).sum();
  return std::exp(entropy.item<double>());
}

}  // namespace normlab
