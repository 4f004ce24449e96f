// Value rules of the config that need no registry: ranges, divisibility, keys that only mean
// something together (the model's registry-backed rules are check_model_config's).
#include <cmath>

#include <fmt/format.h>

#include "config/load.h"

namespace normlab {

constexpr int64_t kMaxVocab = 2147483647;  // token ids are int32 (SentencePiece) and int64 tensors

void validate_config(const Config& c, Problems& p) {
  auto positive = [&](const std::string& key, int64_t v) {
    if (v <= 0) p.add(key, fmt::format("{} must be a positive integer", v));
  };
  auto non_negative = [&](const std::string& key, double v) {
    if (!(v >= 0)) p.add(key, fmt::format("{} must be >= 0", v));
  };
  const auto& m = c.model;
  if (m.vocab_size < 2 || m.vocab_size > kMaxVocab) {
    p.add("model.vocab_size", fmt::format("{} must be in [2, {}] (tokens are at most uint32, ids int32)",
                                          m.vocab_size, kMaxVocab));
  }
  positive("model.ctx", m.ctx);
  positive("model.d_model", m.d_model);
  positive("model.n_layers", m.n_layers);
  positive("model.n_heads", m.n_heads);
  positive("model.d_ff", m.d_ff);
  if (m.n_heads > 0 && m.d_model > 0 && m.d_model % m.n_heads != 0) {
    p.add("model.n_heads", fmt::format("{} does not divide d_model {}", m.n_heads, m.d_model));
  } else if (m.pos == Position::kRope && m.n_heads > 0 && (m.d_model / m.n_heads) % 2 != 0) {
    p.add("model.pos", fmt::format("rope needs an even head size, d_model/n_heads = {}",
                                   m.d_model / m.n_heads));
  }
  if (m.norm.eps && !(*m.norm.eps > 0)) p.add("model.norm.eps", fmt::format("{} must be > 0", *m.norm.eps));
  non_negative("model.attn_softcap", m.attn_softcap);
  non_negative("model.logit_softcap", m.logit_softcap);
  if (!(m.layerscale >= 0) || !std::isfinite(m.layerscale))
    p.add("model.layerscale", fmt::format("{} must be a finite number >= 0 (0 = off)", m.layerscale));
  if (!(m.embed_scale >= 0) || !std::isfinite(m.embed_scale))
    p.add("model.embed_scale", fmt::format("{} must be a finite number >= 0 (0 = off)", m.embed_scale));
  if (m.qk_norm_position == QkNormPosition::kAfterRope && m.pos != Position::kRope)
    p.add("model.qk_norm_position", "'after_rope' needs model.pos: rope (there is no RoPE to come after)");

  if (!(c.init.std > 0)) p.add("init.std", fmt::format("{} must be > 0", c.init.std));
  if (!(c.init.embed_std > 0)) p.add("init.embed_std", fmt::format("{} must be > 0", c.init.embed_std));

  const auto& o = c.optim;
  if (!(o.lr > 0)) p.add("optim.lr", fmt::format("{} must be > 0", o.lr));
  non_negative("optim.min_lr", o.min_lr);
  for (double b : o.betas) {
    if (!(b >= 0 && b < 1)) {
      p.add("optim.betas", fmt::format("[{}, {}] must both be in [0, 1)", o.betas[0], o.betas[1]));
      break;
    }
  }
  if (!(o.eps > 0)) p.add("optim.eps", fmt::format("{} must be > 0", o.eps));
  non_negative("optim.weight_decay", o.weight_decay);
  if (o.warmup < 0) p.add("optim.warmup", fmt::format("{} must be >= 0", o.warmup));
  non_negative("optim.grad_clip", o.grad_clip);
  non_negative("optim.z_loss", o.z_loss);
  if (!(o.qk_clip >= 0) || !std::isfinite(o.qk_clip))
    p.add("optim.qk_clip", fmt::format("{} must be a finite threshold > 0, or 0 = off", o.qk_clip));
  for (const Role r : {Role::kEmbedding, Role::kHead, Role::kGain, Role::kBias, Role::kMixing}) {
    const double v = o.lr_mult.of(r);
    if (!(v >= 0) || !std::isfinite(v))
      p.add(fmt::format("optim.lr_mult.{}", choice_name(r)), fmt::format("{} must be a finite number >= 0", v));
  }
  // optim.type names an optimizer and optim.schedule a schedule; the keys they own (optim.muon.*,
  // optim.wsd.*) keep their defaults unless their owner is selected, and pass their owner's rules.
  const bool optimizer = is_owner_name(OwnerKind::kOptim, o.type), schedule = is_owner_name(OwnerKind::kSchedule, o.schedule);
  if (!optimizer)
    p.add("optim.type", fmt::format("'{}' is not a registered optimizer; expected one of: {}", o.type,
                                    owner_names(OwnerKind::kOptim)));
  if (!schedule)
    p.add("optim.schedule", fmt::format("'{}' is not a registered schedule; expected one of: {}", o.schedule,
                                        owner_names(OwnerKind::kSchedule)));
  // Each kind's keys are checked where its name is known: an unknown name hides no other rule.
  check_optim_keys(o, c.model, [&](const std::string& key, const std::string& message) { p.add(key, message); });

  const auto& t = c.train;
  positive("train.steps", t.steps);
  positive("train.batch_size", t.batch_size);
  positive("train.accum", t.accum);
  positive("train.log_every", t.log_every);
  positive("train.checkpoint_every", t.checkpoint_every);
  if (t.threads < 0) p.add("train.threads", fmt::format("{} must be >= 0 (0 = all cores)", t.threads));
  if (t.precision == Precision::kFp16 && t.device != DeviceKind::kCuda) {
    p.add("train.precision", "fp16 needs train.device: cuda (fp16 autocast and loss scaling are a GPU "
                             "recipe); bf16 also runs on the CPU");
  }
  if (!(t.dist_timeout > 0) || !std::isfinite(t.dist_timeout))
    p.add("train.dist_timeout", fmt::format("{} must be a positive number of seconds", t.dist_timeout));
  if (c.eval.every < 0) p.add("eval.every", fmt::format("{} must be >= 0", c.eval.every));
  positive("eval.max_windows", c.eval.max_windows);
  positive("diag.every", c.diag.every);
  positive("diag.spike.window", c.diag.spike.window);
  if (!(c.diag.spike.zscore > 0))
    p.add("diag.spike.zscore", fmt::format("{} must be > 0", c.diag.spike.zscore));
  if (c.out_dir.empty()) p.add("out_dir", "must not be empty");
  for (const auto& [key, paths] : {std::pair{"data.train", &c.data.train}, std::pair{"data.val", &c.data.val}}) {
    if (paths->empty()) p.add(key, "must name a file");
    for (const std::string& f : *paths) {
      if (f.empty()) p.add(key, "must not hold an empty file name");
    }
  }
}

}  // namespace normlab
