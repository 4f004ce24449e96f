// Run-directory checkpoints (src/train/README.md): checkpoints/step_<8 digits>/ holding
// model.safetensors (weights and buffers, config in the metadata), trainer.safetensors (AdamW
// state) and state.json (step, RNG, data position). Each directory is written under a temporary
// name and renamed when complete; LATEST is then replaced atomically.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "model/transformer.h"
#include "optim/optimizer.h"
#include "train/safetensors.h"

namespace normlab {

struct TrainState {
  int64_t step = 0;           // updates done
  int64_t micro_batches = 0;  // data position: micro-batches consumed
  int64_t tokens = 0;         // training tokens seen
  double best_val = 0;        // best validation loss so far (NaN/0 when none)
  double elapsed_s = 0;       // training wall time so far
  std::string torch_rng;      // hex of torch's default CPU generator state
  int64_t skipped = 0;        // updates skipped (spike, non-finite or fp16 overflow)
  int64_t world_size = 1;     // processes that trained it (train.batch_size is per process)
  double loss_scale = 0;      // fp16 dynamic loss scale (0: none saved, fp32/bf16)
  int64_t loss_scale_good_steps = 0;  // consecutive finite steps since the scale last changed
  // Spike-detector baselines, so a resumed run makes the same skip decisions.
  std::vector<double> spike_loss, spike_grad_norm;
  std::vector<std::vector<double>> spike_layers;  // per block, then embed, head
};

std::string checkpoint_name(int64_t step);  // "step_00000500"

// Writes out_dir/checkpoints/step_<step>/ and points LATEST at it; `metadata` goes into
// model.safetensors' __metadata__ beside "format" and "config" (the tokenizer and its SHA-256).
void save_checkpoint(const std::string& out_dir, Transformer& model, const Optimizer* optimizer,
                     const TrainState& state, const std::string& config_yaml,
                     const std::map<std::string, std::string>& metadata = {});

// A checkpoint's model.safetensors __metadata__ (format, config, tokenizer, tokenizer_sha256, ...).
std::map<std::string, std::string> checkpoint_metadata(const std::string& ckpt_dir);

// The steps of a run's checkpoint directories (checkpoints/step_<8 digits>/), ascending.
std::vector<int64_t> checkpoint_steps(const std::string& run_dir);

// The checkpoint directory for `step`, or LATEST's when step is nullopt. Throws UsageError when
// the run or the step does not exist, listing the steps there are.
std::string find_checkpoint(const std::string& run_dir, std::optional<int64_t> step);

// Model weights + buffers from a checkpoint directory into a model of the same config; throws
// RuntimeFailure on any missing, extra or mis-shaped tensor.
void load_model_weights(const std::string& ckpt_dir, Transformer& model);

// The resolved config YAML stored in a checkpoint's model.safetensors metadata.
std::string checkpoint_config(const std::string& ckpt_dir);

// The world size a checkpoint was written with (state.json; 1 for checkpoints that predate it).
int64_t checkpoint_world_size(const std::string& ckpt_dir);

void load_trainer_state(const std::string& ckpt_dir, Optimizer& optimizer, TrainState& state);

// Model tensors in contract naming: parameters then buffers.
NamedTensors model_tensors(Transformer& model);

std::string torch_rng_state_hex();
void set_torch_rng_state_hex(const std::string& hex);

}  // namespace normlab
