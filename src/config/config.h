// The run config: typed structs with their defaults (configs/README.md). Each struct lists its
// fields exactly once, in `describe()`; that one list drives YAML parsing (unknown keys and wrong
// types rejected), dumping the resolved config, and `normlab keys`. Choices are enums with one
// name table each (config/choice.h); the keys a norm type, a layout, a residual type or an optimizer owns are declared in that
// entry's own file and visited here through OwnedSection (config/owned_keys.h). Nothing outside
// config/ reads YAML.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/choice.h"
#include "config/owned_keys.h"

namespace normlab {

enum class Position { kLearned, kRope, kNone };
NORMLAB_CHOICE(Position, {Position::kLearned, "learned"}, {Position::kRope, "rope"}, {Position::kNone, "none"});
enum class QkNormAxis { kHead, kAll };
NORMLAB_CHOICE(QkNormAxis, {QkNormAxis::kHead, "head"}, {QkNormAxis::kAll, "all"});
enum class QkNormPosition { kBeforeRope, kAfterRope };
NORMLAB_CHOICE(QkNormPosition, {QkNormPosition::kBeforeRope, "before_rope"},
               {QkNormPosition::kAfterRope, "after_rope"});
enum class AttnGate { kNone, kHead, kElementwise };
NORMLAB_CHOICE(AttnGate, {AttnGate::kNone, "none"}, {AttnGate::kHead, "head"},
               {AttnGate::kElementwise, "elementwise"});
enum class InitScheme { kNormal, kXavier };
NORMLAB_CHOICE(InitScheme, {InitScheme::kNormal, "normal"}, {InitScheme::kXavier, "xavier"});
// A parameter's role (src/model/README.md, "Parameter roles"), declared where the parameter is
// created: it decides weight decay, the optimizer that updates it and its learning-rate multiplier.
enum class Role { kMatrix, kEmbedding, kHead, kGain, kBias, kMixing };
NORMLAB_CHOICE(Role, {Role::kMatrix, "matrix"}, {Role::kEmbedding, "embedding"}, {Role::kHead, "head"},
               {Role::kGain, "gain"}, {Role::kBias, "bias"}, {Role::kMixing, "mixing"});
enum class DeviceKind { kCpu, kCuda };
NORMLAB_CHOICE(DeviceKind, {DeviceKind::kCpu, "cpu"}, {DeviceKind::kCuda, "cuda"});
enum class Precision { kFp32, kBf16, kFp16 };
NORMLAB_CHOICE(Precision, {Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}, {Precision::kFp16, "fp16"});
enum class DistBackend { kAuto, kGloo, kNccl };
NORMLAB_CHOICE(DistBackend, {DistBackend::kAuto, "auto"}, {DistBackend::kGloo, "gloo"}, {DistBackend::kNccl, "nccl"});
enum class SpikeAction { kLog, kSkip, kStop };
NORMLAB_CHOICE(SpikeAction, {SpikeAction::kLog, "log"}, {SpikeAction::kSkip, "skip"}, {SpikeAction::kStop, "stop"});
enum class NonFinitePolicy { kSkip, kStop };
NORMLAB_CHOICE(NonFinitePolicy, {NonFinitePolicy::kSkip, "skip"}, {NonFinitePolicy::kStop, "stop"});

// How token files are read (data/README.md): auto tells llm.c shards by their header's magic and
// reads other files as bytes, but refuses a headerless .bin (its token width cannot be guessed).
enum class TokenFormat { kAuto, kBytes, kU16, kU32, kLlmc };
NORMLAB_CHOICE(TokenFormat, {TokenFormat::kAuto, "auto"}, {TokenFormat::kBytes, "bytes"}, {TokenFormat::kU16, "u16"},
               {TokenFormat::kU32, "u32"}, {TokenFormat::kLlmc, "llmc"});

// data.train / data.val: one file, a list, or glob patterns, read as one stream in order. A glob
// is expanded (sorted) when the config is resolved, so the resolved config lists the files.
using PathList = std::vector<std::string>;

struct DataConfig {
  PathList train{"data/toy/train.txt"};
  PathList val{"data/toy/val.txt"};
  TokenFormat format = TokenFormat::kAuto;
  std::string tokenizer;  // a SentencePiece model; empty = none (tokens are shown as bytes)
  bool shuffle = true;    // true: random window offsets from the seed; false: sequential
};

struct NormConfig {
  std::string type = "layernorm";  // a name from the norm registry
  std::optional<double> eps;       // auto (nullopt) = the type's default
  // model.norm.<key> of the norm types that own keys (layernorm's bias, dyt_alpha, derf_alpha):
  // declared in each norm's file, read as keys.number("norm.dyt_alpha").
  OwnedValues keys{OwnerKind::kNorm};
};

// model.residual: how the stream is carried between sublayers (a name from the residual registry,
// src/model/residual/) and the keys its entries own (streams, dynamic, sinkhorn_iters, ...),
// read as keys.integer("residual.streams").
struct ResidualConfig {
  std::string type = "add";
  OwnedValues keys{OwnerKind::kResidual};
};

struct ModelConfig {
  int64_t vocab_size = 256;
  int64_t ctx = 128;
  int64_t d_model = 128;
  int64_t n_layers = 4;
  int64_t n_heads = 4;
  int64_t d_ff = 512;
  std::string layout = "pre";  // a name from the layout registry
  NormConfig norm;
  bool qk_norm = false;
  std::optional<std::string> qk_norm_type;  // null = model.norm.type
  double attn_softcap = 0;
  double logit_softcap = 0;
  bool embed_norm = false;
  Position pos = Position::kLearned;
  std::string ffn = "gelu";  // a name from the feed-forward registry (src/model/ffns/)
  bool bias = false;
  bool tie_embeddings = true;
  QkNormAxis qk_norm_axis = QkNormAxis::kHead;
  QkNormPosition qk_norm_position = QkNormPosition::kBeforeRope;
  bool v_norm = false;
  AttnGate attn_gate = AttnGate::kNone;
  double layerscale = 0;  // 0 = off; c > 0: learnable ls1/ls2 [d] initialised to c
  double embed_scale = 0;  // 0 = off; c > 0: learnable embed_scale [1] initialised to c times the embedding
  std::string value_residual = "none";  // a value-residual mode (src/model/value_residual/)
  ResidualConfig residual;
  // model.<layout>.<key> of the layouts that own keys (deepnorm.alpha, mix.post_layers, ...):
  // declared in each layout's file, read as keys.number("deepnorm.alpha").
  OwnedValues keys{OwnerKind::kLayout};
};

struct InitConfig {
  InitScheme scheme = InitScheme::kNormal;
  double std = 0.02;
  double embed_std = 0.02;
  bool scaled_residual = true;  // out_proj, fc2: std / sqrt(2L)
  bool zero_query = false;      // every block's q_proj weight 0 after the draws (µP's suggestion)
};

// optim.lr_mult: the AdamW peak rate of each role is optim.lr times its multiplier (matrix has
// none: under adamw it takes optim.lr, under muon / normuon optim.muon.lr).
struct LrMultConfig {
  double embedding = 1, head = 1, gain = 1, bias = 1, mixing = 1;
  double of(Role r) const {  // 1 for kMatrix
    switch (r) {
      case Role::kEmbedding: return embedding;
      case Role::kHead: return head;
      case Role::kGain: return gain;
      case Role::kBias: return bias;
      case Role::kMixing: return mixing;
      case Role::kMatrix: break;
    }
    return 1;
  }
};

struct OptimConfig {
  std::string type = "adamw";  // a name from the optimizer registry (src/optim/)
  double lr = 1.0e-3;
  double min_lr = 1.0e-4;
  std::array<double, 2> betas{0.9, 0.95};
  double eps = 1.0e-8;
  double weight_decay = 0.1;
  int64_t warmup = 100;
  std::string schedule = "cosine";  // a name from the schedule registry (src/train/schedules/)
  double grad_clip = 1.0;           // 0 = off
  double z_loss = 0;
  double qk_clip = 0;  // 0 = off; tau > 0: QK-Clip threshold
  LrMultConfig lr_mult;
  // optim.<section>.<key> of the optimizers that own keys (optim.muon.lr, ...): declared in each
  // optimizer's file, read as keys.number("muon.lr").
  OwnedValues keys{OwnerKind::kOptim};
  // optim.<schedule>.<key> of the schedules that own keys (optim.wsd.decay_frac), read as
  // schedule_keys.number("wsd.decay_frac").
  OwnedValues schedule_keys{OwnerKind::kSchedule};
};

// param: the parametrization's mode and base shape; auto = the run's own (resolved into numbers).
struct ParamConfig {
  std::string type = "sp";  // a registered parametrization (model/parametrizations/)
  std::optional<double> base_width, base_depth, base_head_dim;
  double alpha = 1.0;        // completep: the branch multiplier's exponent, in [0.5, 1]
  double output_mult = 1.0;  // mup, completep: the readout's multiplier at base width
};

struct TrainConfig {
  int64_t steps = 2000;
  int64_t batch_size = 16;
  int64_t accum = 1;
  int64_t log_every = 10;
  int64_t checkpoint_every = 500;
  bool save_init = false;
  int64_t threads = 0;  // 0 = all cores
  DeviceKind device = DeviceKind::kCpu;
  Precision precision = Precision::kFp32;  // fp16 needs cuda (src/train/README.md)
  DistBackend dist_backend = DistBackend::kAuto;  // src/parallel/README.md
  double dist_timeout = 300;          // seconds until a lost or silent rank stops the others
};

struct EvalConfig {
  int64_t every = 200;
  int64_t max_windows = 64;
  bool by_task = false;  // eval records also carry the loss per task of each line (byte-level corpora)
};

struct SpikeConfig {
  int64_t window = 128;
  double zscore = 6;
  SpikeAction action = SpikeAction::kLog;
};

struct DiagConfig {
  int64_t every = 10;
  SpikeConfig spike;
  bool per_param = false;          // add per-tensor gradient norms to train records
  NonFinitePolicy nonfinite = NonFinitePolicy::kStop;  // NaN/Inf loss or gradients
  bool csv = false;                // also write metrics.csv (step,kind,key,value)
};

struct Config {
  int64_t seed = 1337;
  std::string out_dir = "runs/example";
  DataConfig data;
  ModelConfig model;
  InitConfig init;
  OptimConfig optim;
  ParamConfig param;
  TrainConfig train;
  EvalConfig eval;
  DiagConfig diag;
};

// The field lists. A visitor provides
//   field(name, T& value, help)      for a leaf
//   section(name, S& sub)            for a nested struct (calls describe(sub, visitor))
template <class V> void describe(DataConfig& c, V& v) {
  v.field("train", c.train, "training data: a file, a list of files or a glob, read as one stream");
  v.field("val", c.val, "validation data, the same way");
  v.field("format", c.format, "token files: auto (llm.c header or bytes), bytes, u16, u32 (headerless LE) or llmc");
  v.field("tokenizer", c.tokenizer, "SentencePiece model for sample's prompt and output and eval's val_bpb; empty = none");
  v.field("shuffle", c.shuffle, "random window offsets (true) or sequential (false)");
}
template <class V> void describe(NormConfig& c, V& v) {
  v.field("type", c.type, "norm module, from the norm registry");
  v.field("eps", c.eps, "epsilon; auto = the type's default");
  OwnedSection owned{"norm", &c.keys};
  describe(owned, v);  // the norm types' own keys, inline: model.norm.dyt_alpha
}
template <class V> void describe(ResidualConfig& c, V& v) {
  v.field("type", c.type, "how the stream is carried between sublayers, from the residual registry");
  OwnedSection owned{"residual", &c.keys};
  describe(owned, v);  // the residual types' own keys, inline: model.residual.streams
}
template <class V> void describe(ModelConfig& c, V& v) {
  v.field("vocab_size", c.vocab_size, "vocabulary size (256 = bytes)");
  v.field("ctx", c.ctx, "context length in tokens");
  v.field("d_model", c.d_model, "residual width d");
  v.field("n_layers", c.n_layers, "number of blocks L");
  v.field("n_heads", c.n_heads, "attention heads H (must divide d_model)");
  v.field("d_ff", c.d_ff, "FFN hidden width");
  v.field("layout", c.layout, "block layout, from the layout registry");
  v.section("norm", c.norm);
  v.field("qk_norm", c.qk_norm, "normalise q and k per head before RoPE");
  v.field("qk_norm_type", c.qk_norm_type, "norm type for q/k; null = model.norm.type");
  v.field("attn_softcap", c.attn_softcap, "c*tanh(s/c) on attention scores; 0 = off");
  v.field("logit_softcap", c.logit_softcap, "c*tanh(z/c) on output logits; 0 = off");
  v.field("embed_norm", c.embed_norm, "extra norm after the embedding");
  v.field("embed_scale", c.embed_scale, "learnable scalar [1] initialised to this that multiplies the embedding (DyT's LLM recipe: sqrt(d)); 0 = off");
  v.field("pos", c.pos, "positions: pos_emb added (learned), q and k rotated (rope), or none at all (NoPE)");
  v.field("ffn", c.ffn, "feed-forward, from the FFN registry (normlab keys lists them)");
  v.field("bias", c.bias, "biases in the attention projections (the FFN linears never have one)");
  v.field("tie_embeddings", c.tie_embeddings, "output head shares tok_emb.weight");
  v.field("qk_norm_axis", c.qk_norm_axis, "q/k/v norm over each head (head, size dh) or all heads (all, size d)");
  v.field("qk_norm_position", c.qk_norm_position, "q/k norm before or after RoPE");
  v.field("v_norm", c.v_norm, "normalise v like k (type qk_norm_type, axis qk_norm_axis)");
  v.field("attn_gate", c.attn_gate, "gated attention o_h * sigmoid(x_in Wg^T), per head or per channel");
  v.field("layerscale", c.layerscale, "learnable branch scales ls1/ls2 [d] initialised to this; 0 = off");
  v.field("value_residual", c.value_residual, "blocks >= 1 mix block 0's raw values into theirs (a mode of src/model/value_residual/, listed below: none, fixed, scalar, token)");
  v.section("residual", c.residual);
  for (const std::string& name : key_sections(OwnerKind::kLayout)) {  // model.deepnorm: {alpha, beta}, ...
    OwnedSection owned{name, &c.keys};
    v.section(name.c_str(), owned);
  }
}
template <class V> void describe(InitConfig& c, V& v) {
  v.field("scheme", c.scheme, "init scheme");
  v.field("std", c.std, "std of Linear weights (scheme normal)");
  v.field("embed_std", c.embed_std, "std of tok_emb and pos_emb");
  v.field("scaled_residual", c.scaled_residual, "out_proj, fc2 std / sqrt(2L) (scheme normal)");
  v.field("zero_query", c.zero_query, "every block's q_proj weight 0 after every other init rule (not with a normalised q)");
}
template <class V> void describe(LrMultConfig& c, V& v) {
  v.field("embedding", c.embedding, "multiplier of optim.lr for tok_emb / pos_emb (and a tied head)");
  v.field("head", c.head, "multiplier of optim.lr for an untied lm_head");
  v.field("gain", c.gain, "multiplier of optim.lr for norm parameters and scales");
  v.field("bias", c.bias, "multiplier of optim.lr for biases of linear maps");
  v.field("mixing", c.mixing, "multiplier of optim.lr for residual-stream and value-residual parameters");
}
template <class V> void describe(OptimConfig& c, V& v) {
  v.field("type", c.type, "optimizer, from the optimizer registry");
  v.field("lr", c.lr, "peak learning rate (AdamW; the schedule's reference for every group)");
  v.field("min_lr", c.min_lr, "learning rate at the last step (cosine, linear)");
  v.field("betas", c.betas, "AdamW betas [b1, b2]");
  v.field("eps", c.eps, "AdamW epsilon");
  v.field("weight_decay", c.weight_decay, "decoupled decay of roles matrix, embedding and head");
  v.field("warmup", c.warmup, "linear warmup steps");
  v.field("schedule", c.schedule, "LR after warmup, from the schedule registry");
  v.field("grad_clip", c.grad_clip, "global gradient-norm clip; 0 = off");
  v.field("z_loss", c.z_loss, "coefficient of mean(logsumexp(logits)^2)");
  v.field("qk_clip", c.qk_clip, "QK-Clip threshold tau on each head's max logit; 0 = off");
  v.section("lr_mult", c.lr_mult);
  for (const std::string& name : key_sections(OwnerKind::kOptim)) {  // optim.muon: {lr, ...}
    OwnedSection owned{name, &c.keys};
    v.section(name.c_str(), owned);
  }
  for (const std::string& name : key_sections(OwnerKind::kSchedule)) {  // optim.wsd: {decay_frac, ...}
    OwnedSection owned{name, &c.schedule_keys};
    v.section(name.c_str(), owned);
  }
}
template <class V> void describe(ParamConfig& c, V& v) {
  v.field("type", c.type, "parametrization (a registered name; normlab keys lists them): sp (standard), mup (width), completep (width and depth)");
  v.field("base_width", c.base_width, "d_model of the base shape; auto = the run's (mup, completep)");
  v.field("base_depth", c.base_depth, "n_layers of the base shape; auto = the run's (completep)");
  v.field("base_head_dim", c.base_head_dim, "head size of the base shape; auto = base_width / n_heads (mup, completep)");
  v.field("alpha", c.alpha, "branch multiplier m_L^-alpha, alpha in [0.5, 1] (completep)");
  v.field("output_mult", c.output_mult, "readout multiplier at base width: the head's input x output_mult / m_N (mup, completep)");
}
template <class V> void describe(TrainConfig& c, V& v) {
  v.field("steps", c.steps, "optimizer updates");
  v.field("batch_size", c.batch_size, "sequences per micro-batch");
  v.field("accum", c.accum, "micro-batches per update");
  v.field("log_every", c.log_every, "train record and progress line every N updates");
  v.field("checkpoint_every", c.checkpoint_every, "checkpoint every N updates (and at the end)");
  v.field("save_init", c.save_init, "save the initial weights as step_00000000");
  v.field("threads", c.threads, "LibTorch threads; 0 = all cores");
  v.field("device", c.device, "where the run executes");
  v.field("precision", c.precision, "forward under autocast, fp32 weights and optimizer; fp16 (cuda only) with dynamic loss scaling");
  v.field("dist_backend", c.dist_backend, "c10d backend when several processes train (RANK/WORLD_SIZE set, or --nproc)");
  v.field("dist_timeout", c.dist_timeout, "seconds a rank waits for the others before stopping with an error naming the lost rank");
}
template <class V> void describe(EvalConfig& c, V& v) {
  v.field("every", c.every, "validation every N updates, at step 0 and at the end; 0 = at step 0 and the end only");
  v.field("max_windows", c.max_windows, "at most this many ctx windows per evaluation");
  v.field("by_task", c.by_task, "eval records also carry the loss per task (each target byte's line: the toy corpus's w: c: r: b: k:, else other); byte-level corpora only");
}
template <class V> void describe(SpikeConfig& c, V& v) {
  v.field("window", c.window, "rolling baseline length");
  v.field("zscore", c.zscore, "spike threshold on the z-score");
  v.field("action", c.action, "what a spike does to its update");
}
template <class V> void describe(DiagConfig& c, V& v) {
  v.field("every", c.every, "full diagnostics (activations, attention, update ratios) every N updates");
  v.section("spike", c.spike);
  v.field("per_param", c.per_param, "per-tensor gradient norms in train records");
  v.field("nonfinite", c.nonfinite, "NaN/Inf loss or gradient: skip the update or stop (checkpoint kept)");
  v.field("csv", c.csv, "also write metrics.csv in long format step,kind,key,value");
}
template <class V> void describe(Config& c, V& v) {
  v.field("seed", c.seed, "seed of init and data order");
  v.field("out_dir", c.out_dir, "run directory");
  v.section("data", c.data);
  v.section("model", c.model);
  v.section("init", c.init);
  v.section("optim", c.optim);
  v.section("param", c.param);
  v.section("train", c.train);
  v.section("eval", c.eval);
  v.section("diag", c.diag);
}

}  // namespace normlab
