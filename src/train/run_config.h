// The one entry point from a config file to a checked, resolved Config: parse, value rules,
// registry names, data files, memory. Every problem is reported at once (ConfigError, exit 2)
// before anything runs or is written.
#pragma once

#include <string>
#include <vector>

#include "config/load.h"

namespace normlab {

struct RunData;  // train/run_data.h: the corpora and tokenizer the checks load

// `data`: when given, receives the corpora and tokenizer the checks loaded.
Config load_run_config(const std::string& path, const std::vector<std::string>& overrides,
                       RunData* data = nullptr);

// Same checks for a config already in memory (e.g. from a checkpoint), named `name` in errors;
// problems already in loaded.problems are reported first. With check_data_files the data files
// are checked and their relative paths made absolute (against the current directory, where
// they were always looked up), so the stored config works from any directory; the training
// memory is checked against this machine's too.
Config check_and_resolve(LoadedConfig loaded, bool check_data_files, RunData* data = nullptr);

// data.train / data.val as files: each glob pattern (a name holding * ? or [) replaced by its
// matches in sorted order, every name made absolute. Returns the problem ("" when none): a file
// that does not exist or a pattern that matches nothing.
std::string resolve_data_paths(PathList& paths);

// A lower bound on what training a config holds in memory, in bytes: float32 weights, gradients
// and both AdamW moments (16 bytes a parameter), and the activations one micro-batch keeps for
// its backward pass (per block a few d_model- and d_ff-wide rows and the attention
// probabilities per token, and the logits).
struct MemoryEstimate {
  double params = 0;  // parameter count
  double state_bytes = 0, activation_bytes = 0;
  double total() const { return state_bytes + activation_bytes; }
};
MemoryEstimate estimate_training_memory(const Config& c);

}  // namespace normlab
