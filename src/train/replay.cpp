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
#include "core/json.h"
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

// The batch of the step about to run (micro-batches from `micro`), with the weights as they are:
// the loss of every row, its worst positions, and every statistic of the first micro-batch. The
// forwards change nothing (buffers such as batchnorm's running statistics are put back).
StepCapture capture_batch(const Config& cfg, Trainable& t, const Corpus& data, const torch::Device& device,
                          int64_t micro, const Tokenizer* tok) {
  StepCapture c;
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> buffers;
  for (const auto& b : t.model->buffers()) buffers.push_back(b.clone());
  const int64_t B = cfg.train.batch_size, T = cfg.model.ctx;
  double sum = 0;
  for (int64_t a = 0; a < cfg.train.accum; ++a) {
    const auto offsets = batch_offsets(data.size(), T, B, micro + a, cfg.data.shuffle, static_cast<uint64_t>(cfg.seed));
    const auto w = data.windows(offsets, T);
    t.model->set_capture(a == 0);
    torch::Tensor per_token;
    {
      AutocastGuard autocast(device, precision_dtype(cfg.train.precision));
      const auto logits = t.model->forward(w.narrow(1, 0, T).to(device));
      per_token = torch::nn::functional::cross_entropy(
                      logits.reshape({-1, logits.size(-1)}).to(torch::kFloat), w.narrow(1, 1, T).reshape({-1}).to(device),
                      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone))
                      .view({B, T})
                      .to(torch::kCPU, torch::kDouble);
    }
    if (a == 0) {
      for (const auto& [name, values] : t.model->stats().all()) {
        std::vector<double> v;
        for (const auto& x : values) v.push_back(x.to(torch::kCPU, torch::kDouble).item<double>());
        c.layers.emplace_back(name, std::move(v));
      }
      for (int64_t i = 0; i < t.model->n_blocks(); ++i) {
        const AttentionStats& st = t.model->block(i)->attention()->stats();
        auto to_vec = [](const torch::Tensor& x) {
          if (!x.defined()) return std::vector<double>{};
          const auto d = x.to(torch::kCPU, torch::kDouble).contiguous();
          return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
        };
        c.head_logit_max.push_back(to_vec(st.head_max));
        c.head_entropy.push_back(to_vec(st.head_entropy));
      }
      t.model->set_capture(false);
    }
    const double* pt = per_token.data_ptr<double>();
    for (int64_t r = 0; r < B; ++r) {
      RowLoss row;
      row.micro_batch = micro + a;
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
        wp.context = data.slice(begin, end - begin);
        wp.text = tokens_text(wp.context, tok, cfg.model.vocab_size);
        row.worst.push_back(std::move(wp));
      }
      sum += row.loss;
      c.rows.push_back(std::move(row));
    }
  }
  c.rows_mean = sum / static_cast<double>(c.rows.size());
  const auto now = t.model->buffers();
  for (size_t i = 0; i < now.size(); ++i) now[i].copy_(buffers[i]);
  return c;
}

// ||W_after - W_before|| / ||W_before|| over blocks.{i}.*, per block.
std::vector<double> update_ratios(const Trainable& t, const std::vector<torch::Tensor>& before, int64_t L) {
  std::vector<double> num(L, 0), den(L, 0);
  torch::NoGradGuard ng;
  for (size_t p = 0; p < t.names.size(); ++p) {
    const std::string& n = t.names[p];
    if (n.rfind("blocks.", 0) != 0) continue;
    const int64_t i = std::stoll(n.substr(7, n.find('.', 7) - 7));
    num[i] += (t.params[p] - before[p]).to(torch::kDouble).pow(2).sum().item<double>();
    den[i] += before[p].to(torch::kDouble).pow(2).sum().item<double>();
  }
  std::vector<double> out(L);
  for (int64_t i = 0; i < L; ++i) out[i] = den[i] > 0 ? std::sqrt(num[i] / den[i]) : 0;
  return out;
}

// A step's capture; `header` adds its step, loss and grad_norm (the baseline's; step N's are the
// autopsy's own top-level keys).
JsonObject& add_capture(JsonObject& j, const StepCapture& c, bool header) {
  if (header) j.add("step", c.step).add("loss", c.loss).add("grad_norm", c.grad_norm);
  j.add("action", c.action).add("rows_mean_loss", c.rows_mean);
  std::string rows = "[";
  for (size_t i = 0; i < c.rows.size(); ++i) {
    const RowLoss& r = c.rows[i];
    std::string worst = "[";
    for (size_t k = 0; k < r.worst.size(); ++k) {
      const auto& w = r.worst[k];
      worst += (k ? "," : "") + JsonObject().add("position", w.position).add("loss", w.loss).add("tokens", w.context)
                                    .add("text", w.text).str();
    }
    rows += (i ? "," : "") + JsonObject().add("micro_batch", r.micro_batch).add("row", r.row).add("offset", r.offset)
                                 .add("loss", r.loss).add_raw("worst", worst + "]").str();
  }
  j.add_raw("rows", rows + "]");
  JsonObject layers;
  for (const auto& [name, v] : c.layers) layers.add(name, v);
  j.add("layers", layers);
  auto matrix = [](const std::vector<std::vector<double>>& m) {
    std::string o = "[";
    for (size_t i = 0; i < m.size(); ++i) {
      std::string row = "[";
      for (size_t h = 0; h < m[i].size(); ++h) row += (h ? "," : "") + json_number(m[i][h]);
      o += (i ? "," : "") + row + "]";
    }
    return o + "]";
  };
  j.add("heads", JsonObject().add_raw("attn_logit_max", matrix(c.head_logit_max))
                     .add_raw("attn_entropy", matrix(c.head_entropy)));
  return j;
}
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
  // W processes with batch B optimise as one with W*B (src/dist/README.md): replayed as one.
  if (state.world_size > 1) cfg.train.batch_size *= state.world_size;

  ReplayResult r;
  r.run = run;
  r.step = N;
  r.checkpoint = fs::path(ckpt).filename().string();
  int64_t micro = state.micro_batches;
  const int64_t L = cfg.model.n_layers;
  for (int64_t s = state.step; s <= N; ++s) {
    const bool capture = s == N || s + 1 == N;
    StepCapture c;
    std::vector<torch::Tensor> before;
    if (capture) {
      c = capture_batch(cfg, t, data, device, micro, tok ? &*tok : nullptr);
      torch::NoGradGuard ng;
      for (const auto& p : t.params) before.push_back(p.detach().clone());
    }
    const StepOutcome o = step.run(micro, step.plan_at(s));
    ++r.updates_replayed;
    if (!capture) continue;
    c.step = s;
    c.loss = o.loss;
    c.grad_norm = o.grads.total;
    c.action = action_name(o.action);
    c.layers.emplace_back("grad_norm", o.grads.block);
    c.layers.emplace_back("grad_norm_attn", o.grads.attn);
    c.layers.emplace_back("grad_norm_ffn", o.grads.ffn);
    c.layers.emplace_back("grad_norm_norms", o.grads.norms);
    c.layers.emplace_back("update_ratio", update_ratios(t, before, L));
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
  write_file_atomic(r.autopsy_path, replay_json(r) + "\n");
  return r;
}

std::string replay_json(const ReplayResult& r) {
  JsonObject j;
  j.add("run", r.run).add("step", r.step).add("checkpoint", r.checkpoint).add("updates_replayed", r.updates_replayed)
      .add("reproducible", r.reproducible).add("loss", r.loss).add("logged_loss", r.logged_loss)
      .add("grad_norm", r.grad_norm).add("logged_grad_norm", r.logged_grad_norm);
  add_capture(j, r.at, /*header=*/false);
  if (r.before) {
    JsonObject b;
    j.add("baseline", add_capture(b, *r.before, /*header=*/true));
  } else {
    j.add_raw("baseline", "null");
  }
  return j.str();
}

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
