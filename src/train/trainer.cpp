#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "config/load.h"
#include "core/errors.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/system.h"
#include "data/corpus.h"
#include "metrics/grad_stats.h"
#include "metrics/sink.h"
#include "model/transformer.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "train/schedule.h"

namespace normlab {
namespace fs = std::filesystem;

void configure_threads(int64_t threads) {
  const int64_t n = threads > 0 ? threads : std::max<int64_t>(1, std::thread::hardware_concurrency());
  torch::set_num_threads(static_cast<int>(n));
}

namespace {

using Clock = std::chrono::steady_clock;

std::string human_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

class Run {
 public:
  Run(const Config& cfg, const TrainOptions& opts) : cfg_(cfg), opts_(opts), device_(cfg.train.device) {}

  int go() {
    prepare_directory();
    configure_threads(cfg_.train.threads);
    if (reference_blas_loaded()) {
      spdlog::warn("warning: the slow reference BLAS is loaded ({}); install libopenblas0-pthread "
                   "for ~30x faster matmuls", loaded_blas_library());
    }
    if (cfg_.model.norm.type == "batchnorm" || (cfg_.model.qk_norm && cfg_.model.qk_norm_type == std::string("batchnorm"))) {
      spdlog::warn("warning: batchnorm pools statistics over all B*T positions in training, so a "
                   "token's normalisation sees later tokens of the batch (a causal leak; eval uses "
                   "running statistics)");
    }
    train_data_ = Corpus::load(cfg_.data.train);
    val_data_ = Corpus::load(cfg_.data.val);
    floor_ = read_entropy_floor(cfg_.data.val);

    torch::manual_seed(cfg_.seed);
    model_ = Transformer(cfg_.model);
    init_weights(model_, cfg_.init);
    model_->to(device_);
    model_->train();
    std::vector<std::pair<std::string, torch::Tensor>> named;
    std::vector<std::string> names;
    for (auto& kv : model_->named_parameters()) {
      named.emplace_back(kv.key(), kv.value());
      names.push_back(kv.key());
      params_.push_back(kv.value());
    }
    optimizer_ = std::make_unique<AdamW>(named, cfg_.optim);
    grad_stats_ = std::make_unique<GradStats>(names, cfg_.model.n_layers);

    if (opts_.resume) {
      const std::string ckpt = find_checkpoint(cfg_.out_dir, std::nullopt);
      load_model_weights(ckpt, model_);
      load_trainer_state(ckpt, *optimizer_, state_);
      set_torch_rng_state_hex(state_.torch_rng);
      spdlog::info("resumed from {} (step {})", ckpt, state_.step);
    } else {
      state_.best_val = std::nan("");
    }
    sink_ = std::make_unique<MetricsSink>((fs::path(cfg_.out_dir) / "metrics.jsonl").string(),
                                          opts_.resume ? state_.step : -1);
    log_header();
    if (!opts_.resume && cfg_.train.save_init) checkpoint();
    if (!opts_.resume) run_eval();
    return loop();
  }

 private:
  void prepare_directory() {
    const fs::path out(cfg_.out_dir);
    const bool has_run = file_exists((out / "metrics.jsonl").string()) || fs::exists(out / "checkpoints");
    if (!opts_.resume && has_run) {
      throw UsageError(fmt::format("{}: already holds a run; pass --resume to continue it or --out "
                                   "DIR to start a new one", cfg_.out_dir));
    }
    if (opts_.resume && !file_exists((out / "checkpoints" / "LATEST").string())) {
      throw UsageError(fmt::format("{}: nothing to resume (no checkpoints/LATEST)", cfg_.out_dir));
    }
    fs::create_directories(out);
    config_yaml_ = dump_config(cfg_);
    const std::string cfg_path = (out / "config.yaml").string();
    if (opts_.resume && file_exists(cfg_path) && read_file(cfg_path) != config_yaml_) {
      spdlog::warn("warning: config differs from the one the run started with; {} is replaced", cfg_path);
    }
    write_file_atomic(cfg_path, config_yaml_);
    add_log_file((out / "train.log").string());
  }

  void log_header() {
    const int64_t n_all = count_params(model_, true), n_body = count_params(model_, false);
    spdlog::info("normlab train: {} | layout {} | norm {} | L={} d={} H={} ctx={} | {:.2f}M params "
                 "({:.2f}M non-embedding)", cfg_.out_dir, cfg_.model.layout, cfg_.model.norm.type,
                 cfg_.model.n_layers, cfg_.model.d_model, cfg_.model.n_heads, cfg_.model.ctx,
                 n_all / 1e6, n_body / 1e6);
    spdlog::info("data: {} ({} tokens), val {} ({} tokens), {} threads", cfg_.data.train,
                 train_data_.size(), cfg_.data.val, val_data_.size(), torch::get_num_threads());
    if (floor_) {
      spdlog::info("val entropy floor {:.4f} nats/token, unigram entropy {:.4f}", floor_->floor, floor_->unigram);
    }
  }

  void run_eval() {
    auto r = evaluate(model_, val_data_, cfg_.eval.max_windows, device_);
    if (std::isnan(state_.best_val) || r.loss < state_.best_val) state_.best_val = r.loss;
    JsonObject rec;
    rec.add("kind", "eval").add("step", state_.step).add("val_loss", r.loss);
    std::string excess;
    if (floor_) {
      rec.add("val_excess", r.loss - floor_->floor);
      excess = fmt::format(" (floor {:.4f}, excess {:.4f})", floor_->floor, r.loss - floor_->floor);
    }
    sink_->write(rec);
    spdlog::info("eval step {}: val_loss {:.4f}{}", state_.step, r.loss, excess);
    last_eval_ = r.loss;
  }

  void checkpoint() {
    state_.torch_rng = torch_rng_state_hex();
    save_checkpoint(cfg_.out_dir, model_, optimizer_.get(), state_, config_yaml_);
  }

  // One update: accum micro-batches, clip, AdamW. Returns the mean loss (a 0-dim tensor).
  torch::Tensor update(double lr, torch::Tensor& grad_sq) {
    optimizer_->zero_grad();
    const int64_t B = cfg_.train.batch_size, T = cfg_.model.ctx, accum = cfg_.train.accum;
    torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().device(device_));
    for (int64_t a = 0; a < accum; ++a) {
      const auto offsets = batch_offsets(train_data_.size(), T, B, state_.micro_batches,
                                         cfg_.data.shuffle, static_cast<uint64_t>(cfg_.seed));
      auto w = train_data_.windows(offsets, T).to(device_);
      auto logits = model_->forward(w.narrow(1, 0, T));
      auto loss = lm_loss(logits, w.narrow(1, 1, T));
      auto total = loss;
      if (cfg_.optim.z_loss > 0) {
        auto lse = torch::logsumexp(logits.to(torch::kFloat), -1);
        total = total + cfg_.optim.z_loss * lse.pow(2).mean();
      }
      (total / static_cast<double>(accum)).backward();
      loss_sum += loss.detach();
      ++state_.micro_batches;
    }
    grad_sq = grad_stats_->squared(params_);
    if (cfg_.optim.grad_clip > 0) {
      torch::NoGradGuard ng;
      // clip coefficient min(1, clip / (norm + 1e-6)), as torch.nn.utils.clip_grad_norm_.
      auto coef = (cfg_.optim.grad_clip / (grad_sq[0].sqrt() + 1e-6)).clamp_max(1.0);
      for (auto& p : params_) {
        if (p.grad().defined()) p.mutable_grad().mul_(coef);
      }
    }
    optimizer_->step(lr);
    state_.tokens += B * T * accum;
    return loss_sum / static_cast<double>(accum);
  }

  int loop() {
    const int64_t steps = cfg_.train.steps;
    double interval_time = 0;
    int64_t interval_tokens = 0;
    const int64_t tokens_per_update = cfg_.train.batch_size * cfg_.model.ctx * cfg_.train.accum;
    while (state_.step < steps) {
      const int64_t s = state_.step;  // this update's record index: weights after s updates
      const double lr = lr_at(cfg_.optim, s, steps);
      const auto t0 = Clock::now();
      torch::Tensor grad_sq;
      auto loss = update(lr, grad_sq);
      const bool log_now = s % cfg_.train.log_every == 0 || s + 1 == steps;
      double loss_v = 0;
      if (log_now) loss_v = loss.item<double>();
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      state_.elapsed_s += dt;
      session_time_ += dt;
      ++session_steps_;
      interval_time += dt;
      interval_tokens += tokens_per_update;
      ++state_.step;
      if (log_now) {
        const GradNorms g = grad_stats_->unpack(grad_sq);
        const double tok_s = interval_tokens / std::max(interval_time, 1e-9);
        JsonObject layers;
        layers.add("grad_norm", g.block).add("grad_norm_attn", g.attn).add("grad_norm_ffn", g.ffn).add("grad_norm_norms", g.norms);
        JsonObject rec;
        rec.add("kind", "train").add("step", s).add("loss", loss_v).add("lr", lr).add("grad_norm", g.total)
            .add("tokens", state_.tokens).add("tok_per_s", tok_s).add("layers", layers)
            .add("grad_norm_embed", g.embed).add("grad_norm_head", g.head);
        sink_->write(rec);
        const double eta = (steps - state_.step) * (session_time_ / static_cast<double>(session_steps_));
        spdlog::info("step {:>5}/{} | loss {:.4f} | lr {:.2e} | gnorm {:.3f} | {:.1f}k tok/s | ETA {}",
                     s, steps, loss_v, lr, g.total, tok_s / 1000.0, human_duration(eta));
        if (!std::isfinite(loss_v)) {
          checkpoint_if_finite();
          throw RuntimeFailure(fmt::format("loss is {} at step {}: the run diverged (try a lower "
                                           "optim.lr, warmup, or another layout)", loss_v, s));
        }
        interval_time = 0;
        interval_tokens = 0;
      }
      const bool last = state_.step == steps;
      if (cfg_.eval.every > 0 && (state_.step % cfg_.eval.every == 0) && !last) run_eval();
      if (state_.step % cfg_.train.checkpoint_every == 0 || last) {
        if (last) run_eval();
        checkpoint();
      }
      if (opts_.stop && opts_.stop->load() && !last) {
        checkpoint();
        spdlog::info("interrupted: checkpoint {} written; continue with --resume",
                     checkpoint_name(state_.step));
        return kInterrupted;
      }
    }
    std::string excess;
    if (floor_) excess = fmt::format(", {:.4f} above the entropy floor {:.4f}", last_eval_ - floor_->floor, floor_->floor);
    spdlog::info("done: {} steps, val_loss {:.4f}{}; run in {}", steps, last_eval_, excess, cfg_.out_dir);
    return 0;
  }

  void checkpoint_if_finite() {
    // Weights after a non-finite loss may already be poisoned; only save when they are finite.
    for (auto& p : params_) {
      if (!torch::isfinite(p).all().item<bool>()) return;
    }
    checkpoint();
  }

  Config cfg_;
  TrainOptions opts_;
  torch::Device device_;
  std::string config_yaml_;
  Corpus train_data_, val_data_;
  std::optional<EntropyFloor> floor_;
  Transformer model_{nullptr};
  std::vector<torch::Tensor> params_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<GradStats> grad_stats_;
  std::unique_ptr<MetricsSink> sink_;
  TrainState state_;
  double session_time_ = 0;  // this process's training time, for the ETA
  int64_t session_steps_ = 0;
  double last_eval_ = std::nan("");
};

}  // namespace

int train(const Config& cfg, const TrainOptions& options) {
  Run run(cfg, options);
  return run.go();
}

}  // namespace normlab
