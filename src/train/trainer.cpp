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
#include "parallel/comm.h"
#include "metrics/records.h"
#include "model/transformer.h"
#include "optim/adamw.h"
#include "optim/registry.h"
#include "train/checkpoint.h"
#include "data/tokenizer.h"
#include "train/evaluate.h"
#include "train/resume.h"
#include "train/run_config.h"
#include "train/run_data.h"
#include "train/recorder.h"
#include "train/step.h"

namespace normlab {
namespace fs = std::filesystem;

void configure_threads(int64_t threads) {
  const int64_t n = threads > 0 ? threads : std::max<int64_t>(1, std::thread::hardware_concurrency());
  torch::set_num_threads(static_cast<int>(n));
  // Subnormal floats flushed to zero (x86 FTZ + DAZ) on this thread and on each intra-op worker
  // (one parallel_for chunk per thread; threads created later inherit the setting). Sharp
  // attention at a high learning rate puts probabilities below 1.2e-38, and every multiply with
  // one then costs a microcode assist: such runs trained up to 13x slower (src/train/README.md).
  at::globalContext().setFlushDenormal(true);
  at::parallel_for(0, n, 1, [](int64_t, int64_t) { at::globalContext().setFlushDenormal(true); });
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

// Warnings about the set-up, once the run is checked: a slow BLAS, batchnorm's causal leak.
void warn_about_setup(const Config& cfg, Transformer& model, const torch::Device& device) {
  if (reference_blas_loaded()) {
    spdlog::warn("warning: the slow reference BLAS is loaded ({}); install libopenblas0-pthread "
                 "for ~30x faster matmuls", loaded_blas_library());
  }
  // bf16 pays on a CPU only where this LibTorch reaches bf16 matrix units (AVX512-BF16, AMX):
  // measured on this model's own gradient pass, not guessed from the CPU or a small matmul
  // (src/train/README.md, Precision).
  if (cfg.train.precision == Precision::kBf16 && !device.is_cuda()) {
    const double bf16 = gradient_pass_seconds(cfg, model, device, Precision::kBf16);
    const double fp32 = gradient_pass_seconds(cfg, model, device, Precision::kFp32);
    spdlog::info("bf16 check: a forward and backward of one micro-batch, {:.1f} ms in bf16, {:.1f} ms in fp32",
                 bf16 * 1e3, fp32 * 1e3);
    if (bf16 > fp32) {
      spdlog::warn("warning: train.precision bf16 on this CPU: a forward and backward of one micro-batch takes {:.0f} ms "
                   "in bf16 against {:.0f} ms in fp32 ({:.1f}x slower; no bf16 units, or a LibTorch without a path to "
                   "them); use fp32", bf16 * 1e3, fp32 * 1e3, bf16 / fp32);
    }
  }
  if (model->entries().batch_statistics()) {
    spdlog::warn("warning: batchnorm pools statistics over all B*T positions in training, so a "
                 "token's normalisation sees later tokens of the batch (a causal leak; eval uses "
                 "running statistics)");
  }
}

// The data the config checks loaded (moved from), or loaded now when there is none.
RunData take_data(const Config& cfg, RunData* loaded) {
  RunData d;
  if (loaded) {
    d = std::move(*loaded);
  } else {
    d.train = Corpus::load(cfg.data.train, cfg.data.format);
    d.val = Corpus::load(cfg.data.val, cfg.data.format);
    if (!cfg.data.tokenizer.empty()) d.tokenizer = Tokenizer::load(cfg.data.tokenizer);
  }
  if (cfg.eval.by_task && !d.val.tokens_are_bytes()) {
    throw UsageError(fmt::format("{}: eval.by_task: {} is read as tokens, not bytes; the loss per task needs a "
                                 "byte-level corpus (its lines' first bytes name the task)",
                                 cfg.out_dir, d.val.name()));
  }
  return d;
}

void log_header(const Config& cfg, Transformer& model, const Corpus& train, const Corpus& val,
                const std::optional<EntropyFloor>& floor) {
  const int64_t n_all = count_params(model, true), n_body = count_params(model, false);
  spdlog::info("normlab train: {} | layout {} | norm {} | L={} d={} H={} ctx={} | {:.2f}M params "
               "({:.2f}M non-embedding)", cfg.out_dir, cfg.model.layout, cfg.model.norm.type,
               cfg.model.n_layers, cfg.model.d_model, cfg.model.n_heads, cfg.model.ctx, n_all / 1e6, n_body / 1e6);
  spdlog::info("data: {} ({} tokens, {}), val {} ({} tokens), {} threads", train.name(), train.size(),
               choice_name(train.files()[0].format), val.name(), val.size(), torch::get_num_threads());
  if (floor) spdlog::info("val entropy floor {:.4f} nats/token, unigram entropy {:.4f}", floor->floor, floor->unigram);
  const OptimizerEntry* optimizer = find_optimizer(cfg.optim.type);
  for (const std::string& line : model->parametrization().role_table(optimizer && optimizer->width_aware_matrices))
    spdlog::info("{}", line);
}

class Run {
 public:
  Run(const Config& cfg, const TrainOptions& opts) : cfg_(cfg), opts_(opts), device_(choice_name(cfg.train.device)) {
    env_ = dist_env_from_environment();
    if (env_.distributed() && device_.is_cuda()) device_ = torch::Device(torch::kCUDA, env_.local_rank);
  }

  int go() {
    if (env_.distributed()) {
      // One rendezvous before anything else, so a rank that fails below takes the others with it.
      // auto: NCCL on CUDA where this build has it, else Gloo (src/parallel/README.md).
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
        if (comm_) share_start(*comm_, cfg_.out_dir, opts_.resume, /*rank0_failed=*/true, start_);
        throw;
      }
    }
    if (comm_) start_ = share_start(*comm_, cfg_.out_dir, opts_.resume, /*rank0_failed=*/false, start_);
    configure_threads(threads_per_rank(cfg_.train.threads, env_, std::max<int64_t>(1, std::thread::hardware_concurrency())));
    data_ = take_data(cfg_, opts_.data);
    if (cfg_.data.val.size() == 1) floor_ = read_entropy_floor(cfg_.data.val[0]);

    t_ = make_trainable(cfg_, device_);
    step_ = std::make_unique<TrainStep>(cfg_, t_, data_.train, device_, comm_.get());
    if (start_.resuming) {
      state_ = restore_checkpoint(start_.checkpoint_dir, t_, *step_);
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
    rec_->start(state_.step, device_);
    warn_about_setup(cfg_, t_.model, device_);
    if (start_.resuming) spdlog::info("resumed from {} (step {})", start_.checkpoint_dir, state_.step);
    log_header(cfg_, t_.model, data_.train, data_.val, floor_);
    if (!start_.resuming && cfg_.train.save_init) checkpoint();
    if (!start_.resuming) run_eval();
    return loop();
  }

 private:
  // Takes the run directory for this process's whole life (the Recorder) and decides, without
  // writing anything the run reads, whether this is a fresh start, a start-over or a resume.
  void open_directory() {
    rec_ = std::make_unique<Recorder>(cfg_, opts_.resume);
    start_ = {rec_->resuming(), rec_->checkpoint_dir()};
    if (start_.resuming) check_resume_config(cfg_, start_.checkpoint_dir, env_.world_size);
  }

  // How long ranks wait while rank 0 alone evaluates or writes a checkpoint: far beyond
  // train.dist_timeout, which is about lost ranks (a rank that dies still fails the wait at once).
  double writer_wait_s() const { return std::max(3600.0, 10 * cfg_.train.dist_timeout); }

  bool writer() const { return !comm_ || comm_->rank() == 0; }

  // A metrics record (rank 0 alone writes them).
  template <class Record>
  void record(const Record& r) {
    if (rec_) rec_->record(to_json(r));
  }

  void run_eval() {
    if (!writer()) return;  // rank 0 evaluates while the others go on to the next exchange
    auto r = evaluate(t_.model, data_.val, cfg_.eval.max_windows, device_, data_.tokenizer ? &*data_.tokenizer : nullptr,
                      kEvalBatch, cfg_.eval.by_task);
    if (std::isnan(state_.best_val) || r.loss < state_.best_val) state_.best_val = r.loss;
    EvalRecord rec;
    rec.step = state_.step;
    rec.val_loss = r.loss;
    rec.eff_rank = r.eff_rank;
    rec.by_task = r.by_task;
    std::string excess;
    if (r.bpb) {
      rec.val_bpb = *r.bpb;
      excess += fmt::format(", {:.4f} bits/byte", *r.bpb);
    }
    if (floor_) {
      rec.val_excess = r.loss - floor_->floor;
      excess += fmt::format(" (floor {:.4f}, excess {:.4f})", floor_->floor, r.loss - floor_->floor);
    }
    record(rec);
    spdlog::info("eval step {}: val_loss {:.4f}{}", state_.step, r.loss, excess);
    last_eval_ = r.loss;
  }

  void checkpoint() {
    if (!writer()) return;
    state_.torch_rng = torch_rng_state_hex();
    step_->snapshot(state_);
    rec_->checkpoint(t_.model, t_.optimizer.get(), state_);
  }

  // Spike records and, on a spike, spikes/step_<N>.json (rank 0).
  void report_spikes(int64_t s, const StepOutcome& o) {
    if (!writer() || !(o.loss_spike || o.grad_norm_spike)) return;
    const auto spike = [&](const char* metric, double value, const ZScore& z) {
      record(SpikeRecord{s, metric, choice_name(cfg_.diag.spike.action), value, z.mean, z.std, z.z});
      spdlog::warn("spike at step {}: {} {:.4g} (baseline {:.4g} +- {:.3g}, z = {:.1f}) -> {}", s, metric, value,
                   z.mean, z.std, z.z, choice_name(cfg_.diag.spike.action));
    };
    if (o.loss_spike) spike("loss", o.loss, o.loss_z);
    if (o.grad_norm_spike) spike("grad_norm", o.grads.total, o.grad_norm_z);
    rec_->spike_forensics(s, to_json(spike_forensics(cfg_, s, o)));
  }

  int loop() {
    if (comm_) comm_->barrier(writer_wait_s());  // rank 0 wrote the directory and evaluated step 0
    while (state_.step < cfg_.train.steps) {
      const StepPlan plan = step_->plan_at(state_.step);  // s: the batch seen with the weights after s updates
      const auto t0 = Clock::now();
      if (comm_) comm_->set_step(plan.step);
      const StepOutcome o = step_->run(state_.micro_batches, plan, opts_.stop);
      stop_now_ = comm_ ? o.stop : false;
      report_spikes(plan.step, o);
      if (o.action != StepAction::kUpdate) {
        record(train_record(cfg_, plan, o, t_.names, state_.tokens, std::nan("")));
        stop_or_report(plan, o);  // a stop throws
        ++state_.skipped;  // the batch and its schedule slot are consumed; nothing else changes
        ++state_.step;
        if (after_update(plan)) return kInterrupted;
        continue;
      }
      state_.tokens += tokens_per_update();
      ++state_.step;
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      if (plan.log && writer()) {
        const double tok_s = (interval_tokens_ + tokens_per_update()) / std::max(interval_time_ + dt, 1e-9);
        record(train_record(cfg_, plan, o, t_.names, state_.tokens, tok_s));
      }
      progress(plan, o, std::chrono::duration<double>(Clock::now() - t0).count());
      if (after_update(plan)) return kInterrupted;
    }
    std::string excess;
    if (floor_) excess = fmt::format(", {:.4f} above the entropy floor {:.4f}", last_eval_ - floor_->floor, floor_->floor);
    spdlog::info("done: {} steps ({} skipped), val_loss {:.4f}{}; run in {}", cfg_.train.steps, state_.skipped,
                 last_eval_, excess, cfg_.out_dir);
    if (rec_) rec_->check_log();
    return 0;
  }

  // Tokens of the global batch: every rank's rows.
  int64_t tokens_per_update() const {
    return cfg_.train.batch_size * env_.world_size * cfg_.model.ctx * cfg_.train.accum;
  }

  // A step that made no update: says why (fp16 overflow: the scale was halved; non-finite values)
  // and, when the step decided to stop, checkpoints the weights before it and throws.
  void stop_or_report(const StepPlan& plan, const StepOutcome& o) {
    const int64_t s = plan.step;
    if (o.action == StepAction::kSkipOverflow && plan.log) {
      spdlog::info("step {}: fp16 gradient overflow; update skipped, loss scale {} -> {}", s, o.loss_scale,
                   step_->scaler().scale());
    }
    if (o.action == StepAction::kSkipNonFinite || o.action == StepAction::kStopNonFinite) {
      spdlog::warn("step {}: non-finite loss ({}) or gradient norm ({})", s, o.loss, o.grads.total);
    }
    if (!is_stop(o.action)) return;
    checkpoint();  // the weights after s updates: the last good state
    if (o.action == StepAction::kStopNonFinite) {
      throw RuntimeFailure(fmt::format(
          "stopped at step {}: the loss or gradients are not finite (loss {}, grad norm {}); "
          "checkpoint {} holds the last good weights. Lower optim.lr, add warmup or clipping, "
          "or set diag.nonfinite: skip", s, o.loss, o.grads.total, checkpoint_name(state_.step)));
    }
    throw RuntimeFailure(fmt::format(
        "stopped at step {} by a {} spike (diag.spike.action: stop); checkpoint {} holds the "
        "weights before it; forensics in {}/spikes/step_{:08d}.json", s, o.loss_spike ? "loss" : "grad-norm",
        checkpoint_name(state_.step), cfg_.out_dir, s));
  }

  // Time accounting of an updated step (dt seconds) and the progress line every train.log_every.
  void progress(const StepPlan& plan, const StepOutcome& o, double dt) {
    state_.elapsed_s += dt;
    session_time_ += dt;
    ++session_steps_;
    interval_time_ += dt;
    interval_tokens_ += tokens_per_update();
    if (!plan.progress) return;
    const double eta = (cfg_.train.steps - state_.step) * (session_time_ / static_cast<double>(session_steps_));
    spdlog::info("step {:>5}/{} | loss {:.4f} | lr {:.2e} | gnorm {:.3f} | {:.1f}k tok/s | ETA {}", plan.step,
                 cfg_.train.steps, o.loss, plan.lr, o.grads.total,
                 interval_tokens_ / std::max(interval_time_, 1e-9) / 1000.0, human_duration(eta));
    interval_time_ = 0;
    interval_tokens_ = 0;
  }

  // Evaluation, checkpoints and Ctrl-C after the step counter moved, as the plan says. Returns
  // true to stop now.
  bool after_update(const StepPlan& plan) {
    if (rec_) rec_->check_log();
    if (plan.eval) run_eval();
    if (plan.checkpoint) {
      if (plan.last) run_eval();
      checkpoint();
    }
    // W > 1: decided on the all-reduced flag, so every rank stops after this same update.
    const bool stop = comm_ ? stop_now_ : opts_.stop && opts_.stop->load();
    if (stop && !plan.last && !plan.checkpoint) checkpoint();
    if (comm_ && (plan.eval || plan.checkpoint || stop)) comm_->barrier(writer_wait_s());  // rank 0 wrote alone
    if (stop && !plan.last) {
      spdlog::info("interrupted: checkpoint {} written; continue with --resume", checkpoint_name(state_.step));
      if (rec_) rec_->check_log();
      return true;
    }
    return false;
  }

  Config cfg_;
  TrainOptions opts_;
  DistEnv env_;
  std::unique_ptr<Comm> comm_;     // W > 1 ranks
  bool stop_now_ = false;          // some rank was asked to stop
  std::unique_ptr<Recorder> rec_;  // rank 0 only: the one writer of the run directory
  StartPoint start_;               // a new run, or the checkpoint a resume starts from
  torch::Device device_;
  RunData data_;  // corpora, and the tokenizer (the bytes behind val tokens: val_bpb)
  std::optional<EntropyFloor> floor_;
  Trainable t_;
  std::unique_ptr<TrainStep> step_;
  TrainState state_;
  double session_time_ = 0;   // this process's training time, for the ETA
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
