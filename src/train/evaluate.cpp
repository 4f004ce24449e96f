#include "train/evaluate.h"

#include "core/errors.h"

namespace normlab {

torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  const int64_t V = logits.size(-1);
  return torch::nn::functional::cross_entropy(logits.reshape({-1, V}).to(torch::kFloat),
                                              targets.reshape({-1}));
}

EvalResult evaluate(Transformer& model, const Corpus& corpus, int64_t max_windows,
                    const torch::Device& device, int64_t batch_size) {
  const int64_t ctx = model->config().ctx;
  const auto offsets = eval_offsets(corpus.size(), ctx, max_windows);
  if (offsets.empty()) {
    throw UsageError(corpus.path() + ": too short for one evaluation window of ctx + 1 tokens");
  }
  const bool was_training = model->is_training();
  model->eval();
  torch::NoGradGuard ng;
  // summed on the device, read once at the end
  auto sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(device));
  for (size_t i = 0; i < offsets.size(); i += batch_size) {
    std::vector<int64_t> chunk(offsets.begin() + i,
                               offsets.begin() + std::min(offsets.size(), i + batch_size));
    auto w = corpus.windows(chunk, ctx).to(device);
    auto logits = model->forward(w.narrow(1, 0, ctx));
    sum += lm_loss(logits, w.narrow(1, 1, ctx)).to(torch::kDouble) * static_cast<double>(chunk.size());
  }
  model->train(was_training);
  EvalResult r;
  r.windows = static_cast<int64_t>(offsets.size());
  r.loss = sum.item<double>() / static_cast<double>(r.windows);
  r.tokens = r.windows * ctx;
  return r;
}

}  // namespace normlab
