#include "train/step.h"

#include "train/qk_clip.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include <fmt/format.h>

#include "core/torch_compat.h"
#include "model/roles.h"
#include "train/evaluate.h"
#include "train/schedule.h"

namespace normlab {

torch::ScalarType precision_dtype(Precision precision) {
  switch (precision) {
    case Precision::kBf16:
      return torch::kBFloat16;
    case Precision::kFp16:
      return torch::kHalf;
    case Precision::kFp32:
      break;
  }
  return torch::kFloat;
}

namespace {
// Test hook, like NORMLAB_CRASH_AT: NORMLAB_TEST_NAN_GRAD="R:K" makes rank R's gradients NaN in
// the update that starts at global micro-batch K (its last backward runs from a NaN seed, the loss
// stays finite), so a test can show that a non-finite gradient on one rank stops every rank.
bool nan_gradient_requested(int rank, int64_t first_micro_batch) {
  static const char* v = std::getenv("NORMLAB_TEST_NAN_GRAD");
  if (!v || !*v) return false;
  int r = -1;
  long long k = -1;
  return std::sscanf(v, "%d:%lld", &r, &k) == 2 && r == rank && k == first_micro_batch;
}

// The fp16 loss scale a fresh run starts from: 2^16 (src/train/README.md). Test hook, like
// NORMLAB_CRASH_AT: NORMLAB_TEST_LOSS_SCALE overrides it, so a test can force overflows.
double initial_loss_scale() {
  const char* v = std::getenv("NORMLAB_TEST_LOSS_SCALE");
  return v && *v ? std::stod(v) : LossScaler::kInitialScale;
}

std::atomic<int64_t> g_training_steps{0};  // TrainStep::count()

}  // namespace

int64_t TrainStep::count() { return g_training_steps.load(); }

StepPlan plan_at(const Config& cfg, int64_t s) {
  StepPlan p;
  const int64_t steps = cfg.train.steps, next = s + 1;
  p.step = s;
  p.lr = lr_at(cfg.optim, s, steps);
  p.diag = s % cfg.diag.every == 0;
  p.last = next == steps;
  p.progress = s % cfg.train.log_every == 0 || p.last;
  p.log = p.progress || p.diag;
  p.per_param = cfg.diag.per_param && p.log;
  p.eval = cfg.eval.every > 0 && next % cfg.eval.every == 0 && !p.last;
  p.checkpoint = next % cfg.train.checkpoint_every == 0 || p.last;
  return p;
}

std::vector<double> layer_values(const GradNorms& g) {
  std::vector<double> v = g.block;
  v.push_back(g.embed);
  v.push_back(g.head);
  return v;
}

std::string layer_name(size_t i, int64_t n_layers) {
  const size_t L = static_cast<size_t>(n_layers);
  return i < L ? fmt::format("blocks.{}", i) : (i == L ? "embed" : "head");
}

RecordLayers grad_norm_series(const GradNorms& g) {
  RecordLayers out{{"grad_norm", g.block}, {"grad_norm_attn", g.attn}, {"grad_norm_ffn", g.ffn}, {"grad_norm_norms", g.norms}};
  if (g.has_mixing) out.push_back({"grad_norm_mixing", g.mixing});
  return out;
}

std::vector<ParamPlace> param_places(TransformerImpl& model, const std::vector<torch::Tensor>& params) {
  using Part = ParamPlace::Part;
  std::unordered_map<const c10::TensorImpl*, ParamPlace> at;
  auto mark = [&](const torch::nn::Module& m, ParamPlace place) {
    for (const auto& t : m.parameters(/*recurse=*/true)) at[t.unsafeGetTensorImpl()] = place;
  };
  for (int64_t i = 0; i < model.n_blocks(); ++i) {
    Block& b = model.block(i);
    mark(*b, {i, Part::kNorms});
    mark(*b->attention(), {i, Part::kAttn});
    mark(*b->feed_forward(), {i, Part::kFfn});
  }
  if (!model.tok_emb.is_empty()) mark(*model.tok_emb, {-1, Part::kEmbed});
  if (!model.pos_emb.is_empty()) mark(*model.pos_emb, {-1, Part::kEmbed});  // learned positions only
  if (model.embed_norm) mark(*model.embed_norm, {-1, Part::kEmbed});
  if (model.embed_scale.defined()) at[model.embed_scale.unsafeGetTensorImpl()] = {-1, Part::kEmbed};
  std::vector<ParamPlace> out;
  for (const auto& p : params) {
    const auto it = at.find(p.unsafeGetTensorImpl());
    ParamPlace place = it != at.end() ? it->second : ParamPlace{-1, Part::kHead};
    if (place.block >= 0 && role_of(p) == Role::kMixing) place.part = Part::kMixing;
    out.push_back(place);
  }
  return out;
}

TrainRecord train_record(const Config& cfg, const StepPlan& plan, const StepOutcome& o,
                         const std::vector<std::string>& param_names, int64_t tokens, double tok_per_s) {
  TrainRecord r;
  r.step = plan.step;
  r.loss = o.loss;
  r.lr = plan.lr;
  r.grad_norm = o.grads.total;
  if (cfg.train.precision == Precision::kFp16) r.loss_scale = o.loss_scale;
  r.tokens = tokens;
  r.overflow = o.action == StepAction::kSkipOverflow;
  r.nonfinite = o.action == StepAction::kSkipNonFinite || o.action == StepAction::kStopNonFinite;
  r.skipped = is_skip(o.action);
  if (!r.overflow && !r.nonfinite) {
    if (o.loss_z.active) r.loss_z = o.loss_z.z;
    if (o.grad_norm_z.active) r.grad_norm_z = o.grad_norm_z.z;
  }
  r.applied = o.action == StepAction::kUpdate;
  if (!r.applied) return r;
  const GradNorms& g = o.grads;
  r.tok_per_s = tok_per_s;
  r.layers = grad_norm_series(g);
  r.grad_norm_embed = g.embed;
  r.grad_norm_head = g.head;
  if (std::isfinite(o.grad_noise_scale)) r.grad_noise_scale = o.grad_noise_scale;
  if (cfg.optim.qk_clip > 0) r.qk_clipped = o.qk_clipped;
  if (const std::optional<Diagnostics>& d = o.diag) {
    r.param_norm = d->param_norm;
    r.layers.insert(r.layers.end(), d->layers.begin(), d->layers.end());
    r.logit_max = d->logit_max;
    r.lse_mean = d->lse_mean;
    r.depth_weights = d->depth_weights;
  }
  if (cfg.diag.per_param) {
    for (size_t i = 0; i < param_names.size() && i < o.per_param_sq.size(); ++i) {
      r.params.emplace_back(param_names[i], std::sqrt(o.per_param_sq[i]));
    }
  }
  return r;
}

SpikeForensics spike_forensics(const Config& cfg, int64_t step, const StepOutcome& o) {
  SpikeForensics f;
  f.step = step;
  f.action = choice_name(cfg.diag.spike.action);
  f.window = cfg.diag.spike.window;
  f.zscore_threshold = cfg.diag.spike.zscore;
  f.loss = {o.loss, o.loss_z.mean, o.loss_z.std, o.loss_z.z};
  f.grad_norm = {o.grads.total, o.grad_norm_z.mean, o.grad_norm_z.std, o.grad_norm_z.z};
  f.data = cfg.data.train;
  f.format = choice_name(cfg.data.format);
  f.ctx = cfg.model.ctx;
  f.first_micro_batch = o.pass.first_micro_batch;
  f.offsets = o.pass.offsets;
  const auto now = layer_values(o.grads);
  for (size_t i = 0; i < now.size(); ++i) {
    f.layers.push_back({layer_name(i, cfg.model.n_layers), now[i],
                        i < o.layer_baseline.size() ? o.layer_baseline[i] : std::nan("")});
  }
  return f;
}

namespace {
// The model's buffers (batchnorm's running statistics) as they were, put back when it goes: for
// forwards that must leave the model unchanged (replay's extra capture, the bf16 timing).
class BuffersKept {
 public:
  explicit BuffersKept(Transformer& model) : model_(model) {
    for (const auto& b : model_->buffers()) kept_.push_back(b.clone());
  }
  ~BuffersKept() {
    torch::NoGradGuard ng;
    const auto now = model_->buffers();
    for (size_t i = 0; i < now.size(); ++i) now[i].copy_(kept_[i]);
  }
  BuffersKept(const BuffersKept&) = delete;
  BuffersKept& operator=(const BuffersKept&) = delete;

 private:
  Transformer& model_;
  std::vector<torch::Tensor> kept_;
};

// StepInspector's view of micro-batch a (inside the step's autocast): its logits, and for the
// first the model's statistics, from a no-grad capture forward of the same windows where the step
// itself does not capture.
void inspect_micro_batch(StepInspector& inspect, const Config& cfg, Transformer& model, int64_t a, int64_t index,
                         const std::vector<int64_t>& offsets, const torch::Tensor& w, const torch::Tensor& logits,
                         bool captured) {
  torch::NoGradGuard ng;
  inspect.micro_batch(index, offsets, w, logits.detach());
  if (a != 0) return;
  if (!captured) {
    BuffersKept kept(model);
    model->set_track_head_max(false);
    model->set_capture(true);
    model->forward(w.narrow(1, 0, cfg.model.ctx));
    model->set_capture(false);
    model->set_track_head_max(cfg.optim.qk_clip > 0);
  }
  inspect.statistics(*model);
}
}  // namespace

Pass forward_backward(const Config& cfg, Transformer& model, Optimizer& optimizer, const Corpus& data,
                      const torch::Device& device, int64_t& micro_batch, bool diag, double loss_scale,
                      int rank, int world_size, GradientReducer* reducer, StepInspector* inspect) {
  optimizer.zero_grad();
  Pass pass;
  pass.first_micro_batch = micro_batch;
  const int64_t B = cfg.train.batch_size, T = cfg.model.ctx, accum = cfg.train.accum;
  torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().device(device));
  // grad_noise_scale needs each micro-batch's own gradient: the difference the backward adds.
  const bool noise = diag && accum * world_size > 1;
  std::vector<torch::Tensor> params;
  if (noise) {
    params = model->parameters();
    pass.micro_sq = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(device));
  }
  std::vector<torch::Tensor> before(params.size());
  for (int64_t a = 0; a < accum; ++a) {
    if (noise && a > 0) {
      torch::NoGradGuard ng;
      for (size_t i = 0; i < params.size(); ++i) {
        before[i] = params[i].grad().defined() ? params[i].grad().clone() : torch::Tensor();
      }
    }
    pass.offsets.push_back(batch_offsets(data.size(), T, B * world_size, micro_batch, cfg.data.shuffle,
                                         static_cast<uint64_t>(cfg.seed)));
    const auto& all = pass.offsets.back();
    const std::vector<int64_t> mine = world_size == 1 ? all : std::vector<int64_t>(all.begin() + rank * B, all.begin() + (rank + 1) * B);
    auto w = data.windows(mine, T);
    // A pageable host-to-device copy waits for the GPU; from pinned memory it is queued.
    w = device.is_cuda() ? w.pin_memory().to(device, /*non_blocking=*/true) : w.to(device);
    model->set_capture(diag && a == 0);  // statistics of the first micro-batch
    torch::Tensor total, loss;
    {
      AutocastGuard autocast(device, precision_dtype(cfg.train.precision));
      auto logits = model->forward(w.narrow(1, 0, T));
      loss = lm_loss(logits, w.narrow(1, 1, T));  // fp32
      if (inspect) inspect_micro_batch(*inspect, cfg, model, a, micro_batch, mine, w, logits, diag && a == 0);
      total = loss;
      if (cfg.optim.z_loss > 0 || (diag && a == 0)) {
        auto lse = torch::logsumexp(logits.to(torch::kFloat), -1);
        if (cfg.optim.z_loss > 0) total = total + cfg.optim.z_loss * lse.pow(2).mean();
        if (diag && a == 0) {
          pass.lse_mean = lse.detach().mean();
          pass.logit_max = logits.detach().max().to(torch::kFloat);
        }
      }
    }
    const bool last = a + 1 == accum;
    if (last && reducer) reducer->arm();  // this backward completes the gradients: all-reduce as they come
    if (last && nan_gradient_requested(rank, pass.first_micro_batch)) {
      (total * std::nan("")).backward();
    } else {
      (loss_scale == 1.0 ? total / static_cast<double>(accum)
                         : total * (loss_scale / static_cast<double>(accum))).backward();
    }
    loss_sum += loss.detach();
    if (noise) {
      // The backward added g_a / accum (times the loss scale) to every gradient.
      torch::NoGradGuard ng;
      std::vector<torch::Tensor> sq;
      for (size_t i = 0; i < params.size(); ++i) {
        const auto& g = params[i].grad();
        if (!g.defined()) continue;
        const auto d = before[i].defined() ? g - before[i] : g;
        sq.push_back(d.to(torch::kDouble).pow(2).sum());
      }
      if (!sq.empty()) pass.micro_sq += torch::stack(sq).sum() * static_cast<double>(accum * accum);
    }
    ++micro_batch;
  }
  model->set_capture(false);
  pass.loss = loss_sum / static_cast<double>(accum);
  return pass;
}

double gradient_pass_seconds(const Config& cfg, Transformer& model, const torch::Device& device, Precision precision,
                             int repeats) {
  const int64_t B = cfg.train.batch_size, T = cfg.model.ctx;
  const auto w = (torch::arange(B * (T + 1), torch::kLong) * 7919 % cfg.model.vocab_size).view({B, T + 1}).to(device);
  BuffersKept kept(model);
  auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.has_index() ? device.index() : -1);
  };
  double best = INFINITY;
  for (int r = 0; r <= repeats; ++r) {  // r = 0: the warm-up
    sync();
    const auto t0 = std::chrono::steady_clock::now();
    torch::Tensor loss;
    {
      AutocastGuard autocast(device, precision_dtype(precision));
      loss = lm_loss(model->forward(w.narrow(1, 0, T)), w.narrow(1, 1, T));
    }
    loss.backward();
    sync();
    if (r > 0) best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  return best;
}

double simple_noise_scale(double mean_small_sq, double big_sq, int64_t small, int64_t n) {
  if (n < 2) return std::nan("");
  const double bs = static_cast<double>(small), bb = static_cast<double>(small * n);
  const double g2 = (bb * big_sq - bs * mean_small_sq) / (bb - bs);  // estimate of |G|^2
  const double s = (mean_small_sq - big_sq) / (1.0 / bs - 1.0 / bb);  // estimate of tr(S)
  return s / g2;
}

void clip_and_step(const Config& cfg, Optimizer& optimizer, double lr, double grad_norm, double loss_scale) {
  const double coef =
      cfg.optim.grad_clip > 0 ? std::min(1.0, cfg.optim.grad_clip / (grad_norm + 1e-6)) : 1.0;
  optimizer.step(lr, coef / loss_scale);
}

Trainable make_trainable(const Config& cfg, const torch::Device& device) {
  Trainable t;
  torch::manual_seed(cfg.seed);
  t.model = Transformer(cfg.model, cfg.param);
  init_weights(t.model, cfg.init);
  t.model->to(device);
  t.model->train();
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (auto& kv : t.model->named_parameters()) {
    named.emplace_back(kv.key(), kv.value());
    t.names.push_back(kv.key());
    t.params.push_back(kv.value());
  }
  t.places = param_places(*t.model, t.params);
  std::vector<bool> in_block;
  for (const ParamPlace& p : t.places) in_block.push_back(p.block >= 0);
  t.optimizer = std::make_unique<Optimizer>(named, cfg.optim, RoleRates::of(cfg), in_block);
  t.grad_stats = std::make_unique<GradStats>(t.places, cfg.model.n_layers);
  return t;
}

StepAction decide_step(double loss, double grad_norm, bool loss_scaling, bool spike, const DiagConfig& diag) {
  const bool finite = std::isfinite(loss) && std::isfinite(grad_norm);
  if (std::isfinite(loss) && !std::isfinite(grad_norm) && loss_scaling) return StepAction::kSkipOverflow;
  if (!finite) return diag.nonfinite == NonFinitePolicy::kStop ? StepAction::kStopNonFinite : StepAction::kSkipNonFinite;
  if (spike && diag.spike.action == SpikeAction::kStop) return StepAction::kStopSpike;
  if (spike && diag.spike.action == SpikeAction::kSkip) return StepAction::kSkipSpike;
  return StepAction::kUpdate;
}

bool is_skip(StepAction a) {
  return a == StepAction::kSkipOverflow || a == StepAction::kSkipNonFinite || a == StepAction::kSkipSpike;
}
bool is_stop(StepAction a) { return a == StepAction::kStopNonFinite || a == StepAction::kStopSpike; }

TrainStep::TrainStep(const Config& cfg, Trainable& t, const Corpus& data, const torch::Device& device, Comm* comm)
    : cfg_(cfg), t_(t), data_(data), device_(device), comm_(comm),
      scaler_(cfg.train.precision == Precision::kFp16, initial_loss_scale()),
      loss_spikes_(cfg.diag.spike.window, cfg.diag.spike.zscore),
      grad_spikes_(cfg.diag.spike.window, cfg.diag.spike.zscore),
      layer_windows_(cfg.model.n_layers + 2, RollingWindow(cfg.diag.spike.window)) {
  if (comm_) reducer_ = std::make_unique<GradientReducer>(*comm_, t_.params);
  // The weight statistics' groups: each block's matrices (by role and place).
  for (size_t i = 0; i < t_.places.size(); ++i) {
    matrix_block_.push_back(t_.optimizer->role(i) == Role::kMatrix ? t_.places[i].block : -1);
  }
}

void TrainStep::snapshot(TrainState& state) const {
  state.spike_loss.assign(loss_spikes_.window().values().begin(), loss_spikes_.window().values().end());
  state.spike_grad_norm.assign(grad_spikes_.window().values().begin(), grad_spikes_.window().values().end());
  state.spike_layers.clear();
  for (const auto& w : layer_windows_) state.spike_layers.emplace_back(w.values().begin(), w.values().end());
  state.loss_scale = scaler_.enabled() ? scaler_.scale() : 0;
  state.loss_scale_good_steps = scaler_.good_steps();
}

void TrainStep::restore(const TrainState& state) {
  scaler_.restore(state.loss_scale, state.loss_scale_good_steps);  // fp16; else it starts at 2^16
  loss_spikes_.window().assign(state.spike_loss);
  grad_spikes_.window().assign(state.spike_grad_norm);
  for (size_t i = 0; i < layer_windows_.size() && i < state.spike_layers.size(); ++i) {
    layer_windows_[i].assign(state.spike_layers[i]);
  }
}

namespace {
// Squared gradient norms of scaled gradients (fp16) -> of the true gradients.
std::vector<double> unscaled(std::vector<double> squared, double scale) {
  if (scale != 1.0) {
    for (auto& v : squared) v /= scale * scale;
  }
  return squared;
}
}  // namespace

StepOutcome TrainStep::run(int64_t& micro_batch, const StepPlan& plan, const std::atomic<bool>* stop,
                           StepInspector* inspect) {
  ++g_training_steps;
  const bool diag = plan.diag, per_param = plan.per_param;
  StepOutcome o;
  o.loss_scale = scaler_.scale();  // fp16: gradients come out multiplied by it
  const int rank = comm_ ? comm_->rank() : 0, world = comm_ ? comm_->world_size() : 1;
  const double tau = cfg_.optim.qk_clip;
  if (tau > 0) {  // this step's maxima only (evaluation forwards in between are not training)
    t_.model->set_track_head_max(true);
    apply_qk_clip(t_.model, tau, nullptr, /*apply=*/false);
  }
  o.pass = forward_backward(cfg_, t_.model, *t_.optimizer, data_, device_, micro_batch, diag, o.loss_scale,
                            rank, world, reducer_.get(), inspect);
  if (comm_) {
    // Gradients averaged over the ranks (the mean over all W*B rows), loss and stop flag summed.
    const bool stop_requested = stop && stop->load();
    std::vector<torch::Tensor> scalars{o.pass.loss, torch::full({}, stop_requested ? 1.0f : 0.0f, o.pass.loss.options())};
    if (o.pass.micro_sq.defined()) scalars.push_back(o.pass.micro_sq);  // summed over the ranks
    reducer_->finish(scalars);
    o.pass.loss = scalars[0] / static_cast<double>(world);
    o.stop = scalars[1].item<float>() > 0;
    if (o.pass.micro_sq.defined()) o.pass.micro_sq = scalars[2];
  }
  // One host read for everything the step must decide on: loss and gradient-norm groups.
  auto per_tensor = GradStats::squared_per_tensor(t_.params);
  auto groups = t_.grad_stats->groups(per_tensor);
  if (comm_) {
    // The ranks hold the same averaged gradients, but a norm's reduction order can depend on the
    // thread count: rank 0's norms decide for everyone, so clipping and skips never diverge.
    std::vector<torch::Tensor> g{groups.contiguous()};
    comm_->broadcast(g, 0);
    groups = g[0];
  }
  Flat host;
  const size_t k_loss = host.add(o.pass.loss), k_groups = host.add(groups);
  const size_t k_pt = per_param ? host.add(per_tensor) : 0;
  const size_t k_micro = o.pass.micro_sq.defined() ? host.add(o.pass.micro_sq.to(torch::kDouble).reshape({1})) : 0;
  host.fetch();
  o.loss = host.scalar(k_loss);
  o.grads = t_.grad_stats->unpack(unscaled(host.get(k_groups), o.loss_scale));
  if (per_param) o.per_param_sq = unscaled(host.get(k_pt), o.loss_scale);
  if (o.pass.micro_sq.defined()) {
    const int64_t n = cfg_.train.accum * world;
    const double mean_small_sq = host.scalar(k_micro) / (o.loss_scale * o.loss_scale) / static_cast<double>(n);
    o.grad_noise_scale = simple_noise_scale(mean_small_sq, o.grads.total * o.grads.total, cfg_.train.batch_size, n);
  }

  // Spikes are scored against baselines that exclude this step, and only on finite values.
  const bool finite = std::isfinite(o.loss) && std::isfinite(o.grads.total);
  if (finite) {
    o.loss_z = loss_spikes_.score(o.loss);
    o.grad_norm_z = grad_spikes_.score(o.grads.total);
    o.loss_spike = loss_spikes_.is_spike(o.loss_z);
    o.grad_norm_spike = grad_spikes_.is_spike(o.grad_norm_z);
  }
  if (o.loss_spike || o.grad_norm_spike) {
    for (const auto& w : layer_windows_) o.layer_baseline.push_back(w.mean());
  }
  o.action = decide_step(o.loss, o.grads.total, scaler_.enabled(), o.loss_spike || o.grad_norm_spike, cfg_.diag);
  if (o.action == StepAction::kSkipOverflow) scaler_.update(/*gradients_finite=*/false);
  if (is_skip(o.action)) t_.optimizer->zero_grad();
  if (o.action != StepAction::kUpdate) return o;

  const bool read_diag = diag && rank == 0;  // only the first process records
  if (read_diag || inspect) probe_.before(t_.params);
  clip_and_step(cfg_, *t_.optimizer, plan.lr, o.grads.total, o.loss_scale);
  t_.model->after_update();  // the layout's action (nGPT's renormalisation), on every rank
  if (tau > 0) o.qk_clipped = apply_qk_clip(t_.model, tau, comm_);
  if (read_diag) o.diag = read_diagnostics(o.pass);
  if (inspect) {
    Flat f;
    const size_t k = f.add(probe_.update_ratio(t_.params, *t_.grad_stats, cfg_.model.n_layers));
    f.fetch();
    o.update_ratio = f.get(k);
  }
  scaler_.update(/*gradients_finite=*/true);
  loss_spikes_.accept(o.loss);
  grad_spikes_.accept(o.grads.total);
  const auto lv = layer_values(o.grads);
  for (size_t i = 0; i < lv.size() && i < layer_windows_.size(); ++i) layer_windows_[i].push(lv[i]);
  return o;
}

Diagnostics TrainStep::read_diagnostics(const Pass& pass) {
  const LayerSeries& st = t_.model->stats();
  const int64_t L = cfg_.model.n_layers;
  Flat f;
  torch::Tensor w2;
  {
    torch::NoGradGuard ng;
    std::vector<torch::Tensor> sq;
    for (const auto& p : t_.params) sq.push_back(p.detach().to(torch::kFloat).pow(2).sum());
    w2 = torch::stack(sq).sum();
  }
  const size_t k_pn = f.add(w2.sqrt()), k_ur = f.add(probe_.update_ratio(t_.params, *t_.grad_stats, L)),
               k_max = f.add(pass.logit_max), k_lse = f.add(pass.lse_mean);
  const UpdateProbe::WeightStats ws = probe_.weight_stats(t_.params, matrix_block_, L);
  const std::pair<const char*, size_t> k_weights[] = {{"w_rms", f.add(ws.rms)}, {"w_spec_max", f.add(ws.spec_max)},
                                                       {"w_stable_rank", f.add(ws.stable_rank)},
                                                       {"update_cos", f.add(ws.update_cos)}};
  std::vector<size_t> k_series;
  for (const auto& [name, values] : st.all()) k_series.push_back(f.add(values));
  std::vector<std::pair<std::string, size_t>> k_depth;
  if (ResidualStream* rs = t_.model->residual_stream()) {
    for (const auto& [name, w] : rs->depth_weights()) k_depth.emplace_back(name, f.add(w));
  }
  f.fetch();  // one host read for every statistic
  Diagnostics d;
  d.param_norm = f.scalar(k_pn);
  d.layers.emplace_back("update_ratio", f.get(k_ur));
  for (const auto& [name, k] : k_weights) d.layers.emplace_back(name, f.get(k));
  for (size_t i = 0; i < k_series.size(); ++i) d.layers.emplace_back(st.all()[i].first, f.get(k_series[i]));
  d.logit_max = f.scalar(k_max);
  d.lse_mean = f.scalar(k_lse);
  for (const auto& [name, k] : k_depth) d.depth_weights.emplace_back(name, f.get(k));
  return d;
}

}  // namespace normlab
