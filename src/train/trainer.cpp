#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <thread>

#include <fmt/format.h>

#include "config/load.h"
#include "core/errors.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/system.h"
#include "data/corpus.h"
#include "dist/comm.h"
#include "metrics/grad_stats.h"
#include "metrics/spike.h"
#include "model/transformer.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "data/tokenizer.h"
#include "train/evaluate.h"
#include "train/loss_scale.h"
#include "train/run_config.h"
#include "train/schedule.h"
#include "train/recorder.h"
#include "train/step.h"

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

// The fp16 loss scale a fresh run starts from: 2^16 (src/train/README.md). Test hook, like
// NORMLAB_CRASH_AT: NORMLAB_TEST_LOSS_SCALE overrides it, so a test can force overflows.
double initial_loss_scale() {
  const char* v = std::getenv("NORMLAB_TEST_LOSS_SCALE");
  return v && *v ? std::stod(v) : LossScaler::kInitialScale;
}

class Run {
 public:
  Run(const Config& cfg, const TrainOptions& opts)
      : cfg_(cfg),
        opts_(opts),
        device_(choice_name(cfg.train.device)),
        loss_spikes_(cfg.diag.spike.window, cfg.diag.spike.zscore),
        grad_spikes_(cfg.diag.spike.window, cfg.diag.spike.zscore),
        scaler_(cfg.train.precision == Precision::kFp16, initial_loss_scale()) {
    env_ = dist_env_from_environment();
    if (env_.distributed() && device_.is_cuda()) device_ = torch::Device(torch::kCUDA, env_.local_rank);
  }

  int go() {
    if (env_.distributed()) {
      // One rendezvous before anything else, so a rank that fails below takes the others with it.
      // auto: NCCL on CUDA where this build has it, else Gloo (src/dist/README.md).
      DistBackend backend = cfg_.train.dist_backend;
      if (backend == DistBackend::kAuto) backend = device_.is_cuda() && have_nccl() ? DistBackend::kNccl : DistBackend::kGloo;
      if (backend == DistBackend::kNccl && !device_.is_cuda()) {
        throw UsageError(fmt::format("{}: train.dist_backend: nccl needs train.device: cuda (it is {}); use "
                                     "gloo or auto on the CPU", cfg_.out_dir, choice_name(cfg_.train.device)));
      }
      comm_ = connect_ranks(env_, backend, cfg_.train.dist_timeout);
      if (!writer()) spdlog::set_level(spdlog::level::err);  // rank 0 alone reports
    }
    // Rank 0 alone takes the run directory and checks it, then tells the others how to start.
    if (writer()) {
      try {
        open_directory();
      } catch (...) {
        if (comm_) share_start(/*failed=*/true);
        throw;
      }
    }
    if (comm_) share_start(/*failed=*/false);
    configure_threads(threads_per_rank(cfg_.train.threads, env_, std::max<int64_t>(1, std::thread::hardware_concurrency())));
    train_data_ = Corpus::load(cfg_.data.train, cfg_.data.format);
    val_data_ = Corpus::load(cfg_.data.val, cfg_.data.format);
    if (cfg_.data.val.size() == 1) floor_ = read_entropy_floor(cfg_.data.val[0]);
    if (!cfg_.data.tokenizer.empty()) tokenizer_ = Tokenizer::load(cfg_.data.tokenizer);

    t_ = make_trainable(cfg_, device_);
    step_ = std::make_unique<TrainStep>(cfg_, t_, train_data_, device_, scaler_, loss_spikes_, grad_spikes_,
                                        comm_.get());
    layer_windows_.assign(cfg_.model.n_layers + 2, RollingWindow(cfg_.diag.spike.window));

    if (resuming_) {
      load_model_weights(checkpoint_dir_, t_.model);
      load_trainer_state(checkpoint_dir_, *t_.optimizer, state_);
      set_torch_rng_state_hex(state_.torch_rng);
      scaler_.restore(state_.loss_scale, state_.loss_scale_good_steps);  // fp16; else starts at 2^16
      loss_spikes_.window().assign(state_.spike_loss);
      grad_spikes_.window().assign(state_.spike_grad_norm);
      for (size_t i = 0; i < layer_windows_.size() && i < state_.spike_layers.size(); ++i) {
        layer_windows_[i].assign(state_.spike_layers[i]);
      }
      state_.world_size = env_.world_size;
      if (state_.step >= cfg_.train.steps) {
        spdlog::info("{}: the run is finished ({} of train.steps {} done); nothing to do. Raise "
                     "train.steps (--set train.steps=N) to train further", cfg_.out_dir, state_.step,
                     cfg_.train.steps);
        return 0;
      }
    } else {
      state_.best_val = std::nan("");
      state_.world_size = env_.world_size;
    }
    if (comm_) broadcast_parameters(*comm_, t_.params);  // every rank starts from rank 0's weights
    if (!writer()) return loop();
    // Everything is checked: only now is the run directory written to.
    rec_->start(state_.step);
    warn_about_setup();
    if (resuming_) spdlog::info("resumed from {} (step {})", checkpoint_dir_, state_.step);
    log_header();
    if (!resuming_ && cfg_.train.save_init) checkpoint();
    if (!resuming_) run_eval();
    return loop();
  }

 private:
  // Takes the run directory for this process's whole life (the Recorder) and decides, without
  // writing anything the run reads, whether this is a fresh start, a start-over or a resume.
  void open_directory() {
    rec_ = std::make_unique<Recorder>(cfg_, opts_.resume);
    resuming_ = rec_->resuming();
    checkpoint_dir_ = rec_->checkpoint_dir();
    if (resuming_) check_resume_config();
  }

  // W > 1: rank 0 broadcasts whether it could open the directory and which checkpoint it resumes
  // from; the other ranks find the same checkpoint themselves (the directory must be shared) and
  // refuse to go on when they see another one.
  void share_start(bool failed) {
    auto ckpt_step = [](const std::string& dir) -> int64_t {
      return dir.empty() ? -1 : std::stoll(fs::path(dir).filename().string().substr(5));
    };
    std::vector<torch::Tensor> v{torch::tensor({int64_t{failed}, int64_t{resuming_}, ckpt_step(checkpoint_dir_)})};
    comm_->broadcast(v, 0);
    if (writer()) return;
    if (v[0][0].item<int64_t>() != 0) {
      throw UsageError(fmt::format("rank {}: rank 0 could not start the run (its error is above)", comm_->rank()));
    }
    resuming_ = opts_.resume && file_exists((fs::path(cfg_.out_dir) / "checkpoints" / "LATEST").string());
    if (resuming_) checkpoint_dir_ = find_checkpoint(cfg_.out_dir, std::nullopt);
    if (v[0][1].item<int64_t>() != int64_t{resuming_} || v[0][2].item<int64_t>() != ckpt_step(checkpoint_dir_)) {
      throw RuntimeFailure(fmt::format(
          "rank {}: {} shows this rank {} but rank 0 {}; every rank must see the same run directory "
          "(a filesystem all of them share)", comm_->rank(), cfg_.out_dir,
          resuming_ ? "checkpoint " + checkpoint_name_of(checkpoint_dir_) : std::string("no checkpoint"),
          v[0][1].item<int64_t>() ? fmt::format("resumes from step {}", v[0][2].item<int64_t>())
                                  : std::string("starts a new run")));
    }
  }

  // How long ranks wait while rank 0 alone evaluates or writes a checkpoint: far beyond
  // train.dist_timeout, which is about lost ranks (a rank that dies still fails the wait at once).
  double writer_wait_s() const { return std::max(3600.0, 10 * cfg_.train.dist_timeout); }

  bool writer() const { return !comm_ || comm_->rank() == 0; }

  // A resume continues the checkpoint's run: refuse every key that would change the weights'
  // shapes or the data order, all in one report, before anything is written.
  void check_resume_config() {
    const std::string where = checkpoint_dir_ + "/model.safetensors";
    Config saved = check_and_resolve(parse_config_text(checkpoint_config(checkpoint_dir_), where),
                                     /*check_data_files=*/false);
    std::error_code ec;
    if (saved.data.train.size() == cfg_.data.train.size()) {
      bool same = true;  // the same files, some reached by another path
      for (size_t i = 0; i < saved.data.train.size() && same; ++i) {
        same = saved.data.train[i] == cfg_.data.train[i] || fs::equivalent(saved.data.train[i], cfg_.data.train[i], ec);
      }
      if (same) saved.data.train = cfg_.data.train;
    }
    const auto was = flat_values(saved), now = flat_values(cfg_);
    std::vector<std::string> problems;
    // train.batch_size is per process: any world size that keeps the global batch may resume.
    const int64_t saved_world = checkpoint_world_size(checkpoint_dir_);
    const int64_t saved_global = saved.train.batch_size * saved_world, global = cfg_.train.batch_size * env_.world_size;
    for (size_t i = 0; i < now.size(); ++i) {
      if (now[i].first == "train.batch_size" && global != saved_global) {
        problems.push_back(fmt::format(
            "{}: --resume: train.batch_size: is {} but the run has {} ({}): the global batch (batch_size x "
            "processes) would be {} x {} = {} instead of {} x {} = {}; batch_size and the process count "
            "may change only together", cfg_.out_dir, cfg_.train.batch_size, saved.train.batch_size,
            checkpoint_name_of(checkpoint_dir_), cfg_.train.batch_size, env_.world_size, global,
            saved.train.batch_size, saved_world, saved_global));
        continue;
      }
      if (now[i].first == "train.batch_size") continue;
      if (now[i].second == was[i].second || may_change_on_resume(now[i].first)) continue;
      problems.push_back(fmt::format(
          "{}: --resume: {}: is {} but the run has {} ({}); only these keys may change on resume: {}",
          cfg_.out_dir, now[i].first, now[i].second, was[i].second, checkpoint_name_of(checkpoint_dir_),
          keys_that_may_change_on_resume()));
    }
    if (!problems.empty()) throw ConfigError(problems);
  }

  static std::string checkpoint_name_of(const std::string& dir) {
    return "checkpoints/" + fs::path(dir).filename().string();
  }

  void warn_about_setup() {
    if (reference_blas_loaded()) {
      spdlog::warn("warning: the slow reference BLAS is loaded ({}); install libopenblas0-pthread "
                   "for ~30x faster matmuls", loaded_blas_library());
    }
    const NormType* norm = find_norm(cfg_.model.norm.type);
    const NormType* qk_norm = find_norm(cfg_.model.qk_norm_type.value_or(cfg_.model.norm.type));
    const LayoutType* layout = find_layout(cfg_.model.layout);
    const bool qkv_used = cfg_.model.qk_norm || cfg_.model.v_norm || (layout && layout->qkv_norm);
    if ((norm && norm->batch_statistics) || (qkv_used && qk_norm && qk_norm->batch_statistics)) {
      spdlog::warn("warning: batchnorm pools statistics over all B*T positions in training, so a "
                   "token's normalisation sees later tokens of the batch (a causal leak; eval uses "
                   "running statistics)");
    }
  }

  void log_header() {
    const int64_t n_all = count_params(t_.model, true), n_body = count_params(t_.model, false);
    spdlog::info("normlab train: {} | layout {} | norm {} | L={} d={} H={} ctx={} | {:.2f}M params "
                 "({:.2f}M non-embedding)", cfg_.out_dir, cfg_.model.layout, cfg_.model.norm.type,
                 cfg_.model.n_layers, cfg_.model.d_model, cfg_.model.n_heads, cfg_.model.ctx,
                 n_all / 1e6, n_body / 1e6);
    spdlog::info("data: {} ({} tokens, {}), val {} ({} tokens), {} threads", train_data_.name(),
                 train_data_.size(), choice_name(train_data_.files()[0].format), val_data_.name(),
                 val_data_.size(), torch::get_num_threads());
    if (floor_) {
      spdlog::info("val entropy floor {:.4f} nats/token, unigram entropy {:.4f}", floor_->floor, floor_->unigram);
    }
  }

  // A metrics record (rank 0 alone writes them).
  void record(const JsonObject& rec) {
    if (rec_) rec_->record(rec);
  }

  void run_eval() {
    if (!writer()) return;  // rank 0 evaluates while the others go on to the next exchange
    auto r = evaluate(t_.model, val_data_, cfg_.eval.max_windows, device_, tokenizer_ ? &*tokenizer_ : nullptr);
    if (std::isnan(state_.best_val) || r.loss < state_.best_val) state_.best_val = r.loss;
    JsonObject rec;
    rec.add("kind", "eval").add("step", state_.step).add("val_loss", r.loss).add("eff_rank", r.eff_rank);
    std::string excess;
    if (r.bpb) {
      rec.add("val_bpb", *r.bpb);
      excess += fmt::format(", {:.4f} bits/byte", *r.bpb);
    }
    if (floor_) {
      rec.add("val_excess", r.loss - floor_->floor);
      excess += fmt::format(" (floor {:.4f}, excess {:.4f})", floor_->floor, r.loss - floor_->floor);
    }
    record(rec);
    spdlog::info("eval step {}: val_loss {:.4f}{}", state_.step, r.loss, excess);
    last_eval_ = r.loss;
  }

  void checkpoint() {
    if (!writer()) return;
    state_.torch_rng = torch_rng_state_hex();
    state_.spike_loss.assign(loss_spikes_.window().values().begin(), loss_spikes_.window().values().end());
    state_.spike_grad_norm.assign(grad_spikes_.window().values().begin(), grad_spikes_.window().values().end());
    state_.spike_layers.clear();
    for (const auto& w : layer_windows_) state_.spike_layers.emplace_back(w.values().begin(), w.values().end());
    state_.loss_scale = scaler_.enabled() ? scaler_.scale() : 0;
    state_.loss_scale_good_steps = scaler_.good_steps();
    rec_->checkpoint(t_.model, t_.optimizer.get(), state_);
  }

  // Per-layer gradient norms as the forensic files list them: blocks, then embed and head.
  std::vector<double> layer_values(const GradNorms& g) const {
    std::vector<double> v = g.block;
    v.push_back(g.embed);
    v.push_back(g.head);
    return v;
  }
  std::string layer_name(size_t i) const {
    const size_t L = static_cast<size_t>(cfg_.model.n_layers);
    return i < L ? fmt::format("blocks.{}", i) : (i == L ? "embed" : "head");
  }

  void write_spike(int64_t s, const std::string& metric, double value, const ZScore& z) {
    if (!writer()) return;
    record(JsonObject()
                     .add("kind", "spike").add("step", s).add("metric", metric).add("value", value)
                     .add("mean", z.mean).add("std", z.std).add("z", z.z).add("action", choice_name(cfg_.diag.spike.action)));
    spdlog::warn("spike at step {}: {} {:.4g} (baseline {:.4g} +- {:.3g}, z = {:.1f}) -> {}", s, metric,
                 value, z.mean, z.std, z.z, choice_name(cfg_.diag.spike.action));
  }

  // spikes/step_<N>.json: enough to replay the batch and see which layers jumped.
  void write_forensics(int64_t s, const Pass& pass, double loss, const ZScore& zl, double gnorm,
                       const ZScore& zg, const GradNorms& g) {
    if (!writer()) return;
    const auto now = layer_values(g);
    struct Row {
      size_t i;
      double value, mean, jump;
    };
    std::vector<Row> rows;
    for (size_t i = 0; i < now.size(); ++i) {
      const double m = layer_windows_[i].mean();
      rows.push_back({i, now[i], m, m > 0 ? now[i] / m : std::nan("")});
    }
    std::vector<Row> ranked = rows;
    std::stable_sort(ranked.begin(), ranked.end(), [](const Row& a, const Row& b) {
      return (std::isnan(b.jump) ? -1.0 : b.jump) < (std::isnan(a.jump) ? -1.0 : a.jump);
    });
    auto row_json = [&](const Row& r) {
      return JsonObject().add("layer", layer_name(r.i)).add("grad_norm", r.value).add("rolling_mean", r.mean)
          .add("relative_jump", r.jump).str();
    };
    std::string layers = "[", ranking = "[";
    for (size_t k = 0; k < rows.size(); ++k) {
      layers += (k ? "," : "") + row_json(rows[k]);
      ranking += (k ? "," : "") + row_json(ranked[k]);
    }
    layers += "]";
    ranking += "]";
    std::string offsets = "[";
    for (size_t a = 0; a < pass.offsets.size(); ++a) {
      offsets += (a ? "," : "") + JsonObject().add("micro_batch", pass.first_micro_batch + static_cast<int64_t>(a))
                                      .add("offsets", pass.offsets[a]).str();
    }
    offsets += "]";
    JsonObject f;
    f.add("step", s).add("action", choice_name(cfg_.diag.spike.action)).add("window", cfg_.diag.spike.window)
        .add("zscore_threshold", cfg_.diag.spike.zscore)
        .add("loss", JsonObject().add("value", loss).add("mean", zl.mean).add("std", zl.std).add("z", zl.z))
        .add("grad_norm", JsonObject().add("value", gnorm).add("mean", zg.mean).add("std", zg.std).add("z", zg.z))
        .add("batch", JsonObject().add("data", cfg_.data.train).add("format", choice_name(cfg_.data.format))
                          .add("ctx", cfg_.model.ctx)
                          .add("window_tokens", cfg_.model.ctx + 1).add_raw("micro_batches", offsets))
        .add_raw("layers", layers)
        .add_raw("layers_by_jump", ranking);
    rec_->spike_forensics(s, f);
  }

  int loop() {
    if (comm_) comm_->barrier(writer_wait_s());  // rank 0 wrote the directory and evaluated step 0
    const int64_t steps = cfg_.train.steps;
    while (state_.step < steps) {
      const int64_t s = state_.step;  // record index: the batch seen with the weights after s updates
      const double lr = lr_at(cfg_.optim, s, steps);
      const bool diag = s % cfg_.diag.every == 0;
      const bool log_now = s % cfg_.train.log_every == 0 || s + 1 == steps || diag;
      const auto t0 = Clock::now();
      if (comm_) comm_->set_step(s);
      const StepOutcome o = step_->run(state_.micro_batches, lr, diag, cfg_.diag.per_param && log_now, opts_.stop);
      stop_now_ = comm_ ? o.stop : false;
      JsonObject rec;
      rec.add("kind", "train").add("step", s).add("loss", o.loss).add("lr", lr).add("grad_norm", o.grads.total);
      if (scaler_.enabled()) rec.add("loss_scale", o.loss_scale);
      if (!act_on_decision(s, o, rec, log_now)) {  // skipped (a stop has thrown)
        if (skip_update()) return kInterrupted;
        continue;
      }
      const auto lv = layer_values(o.grads);
      for (size_t i = 0; i < lv.size(); ++i) layer_windows_[i].push(lv[i]);
      state_.tokens += tokens_per_update();
      ++state_.step;
      if (log_now && writer()) {
        const double dt_now = std::chrono::duration<double>(Clock::now() - t0).count();
        record(add_update_fields(rec, o, (interval_tokens_ + tokens_per_update()) / std::max(interval_time_ + dt_now, 1e-9)));
      }
      progress(s, lr, o, std::chrono::duration<double>(Clock::now() - t0).count());
      if (after_update()) return kInterrupted;
    }
    std::string excess;
    if (floor_) excess = fmt::format(", {:.4f} above the entropy floor {:.4f}", last_eval_ - floor_->floor, floor_->floor);
    spdlog::info("done: {} steps ({} skipped), val_loss {:.4f}{}; run in {}", steps, state_.skipped,
                 last_eval_, excess, cfg_.out_dir);
    if (rec_) rec_->check_log();
    return 0;
  }

  // Tokens of the global batch: every rank's rows.
  int64_t tokens_per_update() const {
    return cfg_.train.batch_size * env_.world_size * cfg_.model.ctx * cfg_.train.accum;
  }

  // Acts on the step's decision: records a skipped step (overflow, non-finite, spike), writes
  // spike records and forensics, and on a stop checkpoints the last good weights and throws.
  // Returns true when the step updated the weights.
  bool act_on_decision(int64_t s, const StepOutcome& o, JsonObject& rec, bool log_now) {
    const double loss = o.loss;
    const GradNorms& g = o.grads;
    // fp16 overflow: not a spike, not a failure: the update was skipped and the scale halved
    // (src/train/README.md).
    if (o.action == StepAction::kSkipOverflow) {
      record(rec.add("tokens", state_.tokens).add("skipped", true).add("overflow", true));
      if (log_now) {
        spdlog::info("step {}: fp16 gradient overflow; update skipped, loss scale {} -> {}", s,
                     o.loss_scale, scaler_.scale());
      }
      return false;
    }
    // Non-finite loss or gradients: they never reach the weights.
    if (o.action == StepAction::kSkipNonFinite || o.action == StepAction::kStopNonFinite) {
      record(rec.add("tokens", state_.tokens).add("skipped", true).add("nonfinite", true));
      spdlog::warn("step {}: non-finite loss ({}) or gradient norm ({})", s, loss, g.total);
      if (o.action == StepAction::kStopNonFinite) {
        checkpoint();  // the weights after s updates: the last good state
        throw RuntimeFailure(fmt::format(
            "stopped at step {}: the loss or gradients are not finite (loss {}, grad norm {}); "
            "checkpoint {} holds the last good weights. Lower optim.lr, add warmup or clipping, "
            "or set diag.nonfinite: skip", s, loss, g.total, checkpoint_name(state_.step)));
      }
      return false;
    }
    // Spikes: recorded whatever the action; the step decided whether to update.
    const ZScore &zl = o.loss_z, &zg = o.grad_norm_z;
    if (zl.active) rec.add("loss_z", zl.z);
    if (zg.active) rec.add("grad_norm_z", zg.z);
    if (o.loss_spike) write_spike(s, "loss", loss, zl);
    if (o.grad_norm_spike) write_spike(s, "grad_norm", g.total, zg);
    if (o.loss_spike || o.grad_norm_spike) write_forensics(s, o.pass, loss, zl, g.total, zg, g);
    if (o.action == StepAction::kStopSpike) {
      record(rec.add("tokens", state_.tokens));
      checkpoint();
      throw RuntimeFailure(fmt::format(
          "stopped at step {} by a {} spike (diag.spike.action: stop); checkpoint {} holds the "
          "weights before it; forensics in {}/spikes/step_{:08d}.json", s, o.loss_spike ? "loss" : "grad-norm",
          checkpoint_name(state_.step), cfg_.out_dir, s));
    }
    if (o.action == StepAction::kSkipSpike) {
      record(rec.add("tokens", state_.tokens).add("skipped", true));
      return false;
    }
    return true;
  }

  // The rest of an updated step's train record: tokens, speed, per-layer gradient norms and, on
  // diagnostics steps, the statistics (src/metrics/README.md).
  JsonObject& add_update_fields(JsonObject& rec, const StepOutcome& o, double tok_s) const {
    const GradNorms& g = o.grads;
    JsonObject layers;
    layers.add("grad_norm", g.block).add("grad_norm_attn", g.attn).add("grad_norm_ffn", g.ffn)
        .add("grad_norm_norms", g.norms);
    const std::optional<Diagnostics>& d = o.diag;
    if (d) {
      for (const auto& [name, values] : d->layers) layers.add(name, values);
    }
    rec.add("tokens", state_.tokens).add("tok_per_s", tok_s);
    if (d) rec.add("param_norm", d->param_norm);
    if (std::isfinite(o.grad_noise_scale)) rec.add("grad_noise_scale", o.grad_noise_scale);
    if (cfg_.optim.qk_clip > 0) rec.add("qk_clipped", o.qk_clipped);
    rec.add("layers", layers).add("grad_norm_embed", g.embed).add("grad_norm_head", g.head);
    if (d) rec.add("logit_max", d->logit_max).add("lse_mean", d->lse_mean);
    if (d && !d->depth_weights.empty()) {
      JsonObject w;
      for (const auto& [reader, values] : d->depth_weights) w.add(reader, values);
      rec.add("attnres_weights", w);
    }
    if (cfg_.diag.per_param) {
      const auto& sq = o.per_param_sq;
      JsonObject pp;
      for (size_t i = 0; i < t_.names.size(); ++i) pp.add(t_.names[i], std::sqrt(sq[i]));
      rec.add("params", pp);
    }
    return rec;
  }

  // Time accounting of an updated step (dt seconds) and the progress line every train.log_every.
  void progress(int64_t s, double lr, const StepOutcome& o, double dt) {
    const int64_t steps = cfg_.train.steps;
    state_.elapsed_s += dt;
    session_time_ += dt;
    ++session_steps_;
    interval_time_ += dt;
    interval_tokens_ += tokens_per_update();
    if (s % cfg_.train.log_every == 0 || s + 1 == steps) {
      const double eta = (steps - state_.step) * (session_time_ / static_cast<double>(session_steps_));
      spdlog::info("step {:>5}/{} | loss {:.4f} | lr {:.2e} | gnorm {:.3f} | {:.1f}k tok/s | ETA {}", s,
                   steps, o.loss, lr, o.grads.total, interval_tokens_ / std::max(interval_time_, 1e-9) / 1000.0,
                   human_duration(eta));
      interval_time_ = 0;
      interval_tokens_ = 0;
    }
  }

  // A step whose update was skipped (TrainStep dropped its gradients) consumes its batch and its
  // schedule slot and changes nothing else (weights, optimizer moments and step count, spike
  // baselines). Returns true when the run must stop now (Ctrl-C).
  bool skip_update() {
    ++state_.skipped;
    ++state_.step;
    return after_update();
  }

  // Evaluation, checkpoints and Ctrl-C after step counter moved. Returns true to stop now.
  bool after_update() {
    if (rec_) rec_->check_log();
    const bool last = state_.step == cfg_.train.steps;
    const bool eval = cfg_.eval.every > 0 && state_.step % cfg_.eval.every == 0 && !last;
    if (eval) run_eval();
    const bool save = state_.step % cfg_.train.checkpoint_every == 0 || last;
    if (save) {
      if (last) run_eval();
      checkpoint();
    }
    // W > 1: decided on the all-reduced flag, so every rank stops after this same update.
    const bool stop = comm_ ? stop_now_ : opts_.stop && opts_.stop->load();
    if (stop && !last && !save) checkpoint();
    if (comm_ && (eval || save || stop)) comm_->barrier(writer_wait_s());  // rank 0 wrote alone
    if (stop && !last) {
      spdlog::info("interrupted: checkpoint {} written; continue with --resume", checkpoint_name(state_.step));
      if (rec_) rec_->check_log();
      return true;
    }
    return false;
  }

  Config cfg_;
  TrainOptions opts_;
  DistEnv env_;
  std::unique_ptr<Comm> comm_;  // W > 1 ranks
  bool stop_now_ = false;       // some rank was asked to stop
  std::unique_ptr<Recorder> rec_;  // rank 0 only: the one writer of the run directory
  bool resuming_ = false;
  std::string checkpoint_dir_;  // the checkpoint a resume starts from
  torch::Device device_;
  Corpus train_data_, val_data_;
  std::optional<Tokenizer> tokenizer_;  // data.tokenizer: the bytes behind val tokens (val_bpb)
  std::optional<EntropyFloor> floor_;
  Trainable t_;
  std::unique_ptr<TrainStep> step_;
  SpikeDetector loss_spikes_, grad_spikes_;
  LossScaler scaler_;
  std::vector<RollingWindow> layer_windows_;
  TrainState state_;
  double session_time_ = 0;  // this process's training time, for the ETA
  double interval_time_ = 0;  // since the last progress line: seconds and tokens
  int64_t interval_tokens_ = 0;
  int64_t session_steps_ = 0;
  double last_eval_ = std::nan("");
};

}  // namespace

int train(const Config& cfg, const TrainOptions& options) {
  Run run(cfg, options);
  return run.go();
}

}  // namespace normlab
