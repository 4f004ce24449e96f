#include "train/replay.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/load.h"
#include "core/errors.h"
#include "core/fs.h"
#include "core/torch_compat.h"
#include "data/corpus.h"
#include "data/tokenizer.h"
#include "metrics/records.h"
#include "train/checkpoint.h"
#include "train/device.h"
#include "train/evaluate.h"
#include "train/resume.h"
#include "train/run_config.h"
#include "train/step.h"
#include "train/trainer.h"

namespace normlab {

namespace {
namespace fs = std::filesystem;

constexpr int64_t kWorstPerRow = 3;
constexpr int64_t kContextTokens = 24;

const char* action_name(StepAction a) {
  switch (a) {
    case StepAction::kUpdate: return "update";
    case StepAction::kSkipOverflow: return "skipped: fp16 overflow";
    case StepAction::kSkipNonFinite: return "skipped: non-finite";
    case StepAction::kStopNonFinite: return "stopped: non-finite";
    case StepAction::kSkipSpike: return "skipped: spike";
    case StepAction::kStopSpike: return "stopped: spike";
  }
  return "?";
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Tokens as text: the tokenizer's decoding, else (bytes) printable ASCII with the rest escaped.
std::string tokens_text(const std::vector<int64_t>& toks, const Tokenizer* tok, int64_t vocab) {
  if (tok) return tok->decode(toks);
  if (vocab > 256) return "";
  std::string out;
  for (int64_t t : toks) {
    if ((t >= 32 && t < 127) || t == '\n' || t == '\t') {
      out += static_cast<char>(t);
    } else {
      out += fmt::format("\\x{:02x}", t);
    }
  }
  return out;
}

// Replay's StepInspector: the loss of every row of the step's batch with its worst positions, and
// the first micro-batch's statistics, as the step computed them.
class Capture : public StepInspector {
 public:
  Capture(const Config& cfg, const Corpus& data, const Tokenizer* tok) : cfg_(cfg), data_(data), tok_(tok) {}

  void micro_batch(int64_t index, const std::vector<int64_t>& offsets, const torch::Tensor& windows,
                   const torch::Tensor& logits) override {
    const int64_t B = windows.size(0), T = cfg_.model.ctx;
    const auto per_token = torch::nn::functional::cross_entropy(
                               logits.reshape({-1, logits.size(-1)}).to(torch::kFloat), windows.narrow(1, 1, T).reshape({-1}),
                               torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone))
                               .view({B, T})
                               .to(torch::kCPU, torch::kDouble)
                               .contiguous();
    const double* pt = per_token.data_ptr<double>();
    for (int64_t r = 0; r < B; ++r) {
      RowLoss row;
      row.micro_batch = index;
      row.row = r;
      row.offset = offsets[r];
      const double* l = pt + r * T;
      for (int64_t j = 0; j < T; ++j) row.loss += l[j];
      row.loss /= static_cast<double>(T);
      std::vector<int64_t> order(T);
      for (int64_t j = 0; j < T; ++j) order[j] = j;
      std::partial_sort(order.begin(), order.begin() + std::min(kWorstPerRow, T), order.end(),
                        [&](int64_t x, int64_t y) { return l[x] > l[y]; });
      for (int64_t k = 0; k < std::min(kWorstPerRow, T); ++k) {
        WorstPosition wp;
        wp.position = order[k];
        wp.loss = l[order[k]];
        const int64_t end = offsets[r] + order[k] + 2;  // through the target token
        const int64_t begin = std::max(offsets[r], end - kContextTokens - 1);
        wp.context = data_.slice(begin, end - begin);
        wp.text = tokens_text(wp.context, tok_, cfg_.model.vocab_size);
        row.worst.push_back(std::move(wp));
      }
      sum_ += row.loss;
      c.rows.push_back(std::move(row));
    }
    c.rows_mean = sum_ / static_cast<double>(c.rows.size());
  }

  void statistics(TransformerImpl& model) override {
    auto to_vec = [](const torch::Tensor& x) {
      if (!x.defined()) return std::vector<double>{};
      const auto d = x.to(torch::kCPU, torch::kDouble).contiguous();
      return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
    };
    for (const auto& [name, values] : model.stats().all()) {
      std::vector<double> v;
      for (const auto& x : values) v.push_back(to_vec(x).at(0));
      c.layers.emplace_back(name, std::move(v));
    }
    for (int64_t i = 0; i < model.n_blocks(); ++i) {
      const AttentionStats& st = model.block(i)->attention()->stats();
      c.head_logit_max.push_back(to_vec(st.head_max));
      c.head_entropy.push_back(to_vec(st.head_entropy));
    }
  }

  StepCapture c;

 private:
  const Config& cfg_;
  const Corpus& data_;
  const Tokenizer* tok_;
  double sum_ = 0;
};
}  // namespace

ReplayResult replay_step(const std::string& run, int64_t N) {
  if (N < 0) throw UsageError(fmt::format("--step: expected a step >= 0, got {}", N));
  const RunRecords recs = read_run(run);
  const TrainRecord* logged = nullptr;
  for (const auto& t : recs.train) {
    if (t.step == N) logged = &t;
  }
  if (!logged) {
    std::string near;
    for (const auto& t : recs.train) {
      if (std::llabs(t.step - N) <= 50) near += (near.empty() ? "" : ", ") + std::to_string(t.step);
    }
    throw UsageError(fmt::format("{}: step {} has no train record (steps are logged every train.log_every and on "
                                 "diagnostics steps; logged near it: {})", run, N, near.empty() ? "none" : near));
  }
  Config cfg = check_and_resolve(parse_config_file((fs::path(run) / "config.yaml").string()), /*check_data_files=*/false);
  const int64_t want = std::max<int64_t>(N - 1, 0);
  std::optional<int64_t> from;
  for (int64_t s : checkpoint_steps(run)) {
    if (s <= want) from = s;
  }
  if (!from) throw UsageError(fmt::format("{}: no checkpoint at or before step {} to replay step {} from", run, want, N));
  const std::string ckpt = find_checkpoint(run, *from);
  configure_threads(cfg.train.threads);
  const torch::Device device = resolve_device(choice_name(cfg.train.device), "train.device");
  const Corpus data = Corpus::load(cfg.data.train, cfg.data.format);
  std::optional<Tokenizer> tok;
  if (!cfg.data.tokenizer.empty() && file_exists(cfg.data.tokenizer)) tok = Tokenizer::load(cfg.data.tokenizer);
  Trainable t = make_trainable(cfg, device);
  TrainStep step(cfg, t, data, device);
  const TrainState state = restore_checkpoint(ckpt, t, step);
  // W processes with batch B optimise as one with W*B (src/parallel/README.md): replayed as one.
  if (state.world_size > 1) cfg.train.batch_size *= state.world_size;

  ReplayResult r;
  r.run = run;
  r.step = N;
  r.checkpoint = fs::path(ckpt).filename().string();
  int64_t micro = state.micro_batches;
  for (int64_t s = state.step; s <= N; ++s) {
    const bool capture = s == N || s + 1 == N;
    Capture inspector(cfg, data, tok ? &*tok : nullptr);
    const StepOutcome o = step.run(micro, step.plan_at(s), nullptr, capture ? &inspector : nullptr);
    ++r.updates_replayed;
    if (!capture) continue;
    StepCapture& c = inspector.c;
    c.step = s;
    c.loss = o.loss;
    c.grad_norm = o.grads.total;
    c.action = action_name(o.action);
    const RecordLayers grads = grad_norm_series(o.grads);
    c.layers.insert(c.layers.end(), grads.begin(), grads.end());
    if (!o.update_ratio.empty()) c.layers.emplace_back("update_ratio", o.update_ratio);  // none when skipped
    if (s == N) {
      r.at = std::move(c);
    } else {
      r.before = std::move(c);
    }
  }
  r.loss = r.at.loss;
  r.grad_norm = r.at.grad_norm;
  r.logged_loss = logged->loss;
  r.logged_grad_norm = logged->grad_norm;
  r.reproducible = same_bits(r.loss, r.logged_loss) && same_bits(r.grad_norm, r.logged_grad_norm);
  const fs::path dir = fs::path(run) / "spikes";
  fs::create_directories(dir);
  r.autopsy_path = (dir / fmt::format("step_{:08d}.autopsy.json", N)).string();
  write_file_atomic(r.autopsy_path, to_json(static_cast<const Autopsy&>(r)) + "\n");
  return r;
}

std::string replay_json(const ReplayResult& r) { return to_json(static_cast<const Autopsy&>(r)); }

std::string replay_text(const ReplayResult& r) {
  std::string o = fmt::format("replayed {} update(s) of {} from {}\n", r.updates_replayed, r.run, r.checkpoint);
  o += fmt::format("step {}: loss {} (logged {}), grad_norm {} (logged {}): {}\n", r.step, r.loss, r.logged_loss,
                   r.grad_norm, r.logged_grad_norm,
                   r.reproducible ? "reproducible, bit for bit (a cause in the data or the model, not the machine)"
                                  : "NOT reproducible (nondeterminism or a hardware fault; or a changed build)");
  auto rows = [&](const StepCapture& c) {
    std::vector<const RowLoss*> sorted;
    for (const auto& row : c.rows) sorted.push_back(&row);
    std::sort(sorted.begin(), sorted.end(), [](const RowLoss* a, const RowLoss* b) { return a->loss > b->loss; });
    std::string s = fmt::format("step {} ({}): loss {:.4f}, rows' mean {:.4f}; worst rows:\n", c.step, c.action, c.loss,
                                c.rows_mean);
    for (size_t i = 0; i < sorted.size() && i < 3; ++i) {
      const RowLoss& row = *sorted[i];
      s += fmt::format("  row {} of micro-batch {} (offset {}): loss {:.4f}", row.row, row.micro_batch, row.offset, row.loss);
      if (!row.worst.empty() && !row.worst[0].text.empty()) {
        std::string txt = row.worst[0].text;
        std::replace(txt.begin(), txt.end(), '\n', '|');
        s += fmt::format("; worst at {} ({:.2f} nats): \"{}\"", row.worst[0].position, row.worst[0].loss, txt);
      }
      s += "\n";
    }
    return s;
  };
  if (r.before) o += rows(*r.before);
  o += rows(r.at);
  o += fmt::format("autopsy: {}\n", r.autopsy_path);
  return o;
}

}  // namespace normlab
