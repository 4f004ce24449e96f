#include "train/run_config.h"

#include <filesystem>

#include <fmt/format.h>

#include "core/fs.h"
#include "core/system.h"
#include "data/corpus.h"
#include "model/transformer.h"
#include "train/device.h"

namespace normlab {

MemoryEstimate estimate_training_memory(const Config& c) {
  const auto& m = c.model;
  // Doubles throughout: absurd sizes must not overflow on the way to being rejected.
  const double V = m.vocab_size, T = m.ctx, d = m.d_model, L = m.n_layers, H = m.n_heads, f = m.d_ff;
  const double ffn_mats = m.ffn == FfnKind::kSwiglu ? 3 : 2;
  MemoryEstimate e;
  e.params = V * d + (m.pos == Position::kLearned ? T * d : 0) + L * (4 * d * d + ffn_mats * d * f) +
             (m.tie_embeddings ? 0 : d * V);
  e.state_bytes = 16 * e.params;
  const double tokens = static_cast<double>(c.train.batch_size) * T;
  e.activation_bytes = 4 * tokens * (L * (8 * d + ffn_mats * f + H * T) + 3 * V);
  return e;
}

Config check_and_resolve(LoadedConfig loaded, bool check_data_files) {
  Config& c = loaded.config;
  Problems problems(loaded.source);
  problems.add_earlier(loaded.problems, loaded.problem_keys);
  validate_config(c, problems);
  check_model_config(c.model, problems);
  if (c.train.device == DeviceKind::kCuda) {
    if (const std::string why = device_unavailable_reason("cuda"); !why.empty()) {
      problems.add("train.device", "cuda: " + why);
    }
  }
  if (check_data_files) {
    for (std::string* path : {&c.data.train, &c.data.val}) {
      if (!path->empty()) *path = std::filesystem::absolute(*path).lexically_normal().string();
    }
    for (const auto& [key, path] : {std::pair{"data.train", c.data.train}, std::pair{"data.val", c.data.val}}) {
      if (path.empty() || problems.has(key)) continue;
      if (!file_exists(path)) {
        problems.add(key, fmt::format("file '{}' not found", path));
        continue;
      }
      Corpus corpus = Corpus::load(path);
      if (corpus.size() < c.model.ctx + 2) {
        problems.add(key, fmt::format("'{}' has {} tokens; need at least ctx + 2 = {}", path,
                                      corpus.size(), c.model.ctx + 2));
      } else if (corpus.max_token() >= c.model.vocab_size) {
        problems.add(key, fmt::format("'{}' holds token {} >= model.vocab_size {}", path,
                                      corpus.max_token(), c.model.vocab_size));
      }
    }
  }
  if (check_data_files && problems.empty()) {
    const MemoryEstimate e = estimate_training_memory(c);
    const double have = physical_memory_bytes(), gib = 1024.0 * 1024 * 1024;
    if (e.total() > have) {
      problems.add("model", fmt::format(
          "training needs at least {:.3g} GiB ({:.3g} parameters: {:.3g} GiB with gradients and AdamW "
          "state; activations of one micro-batch: {:.3g} GiB) but this machine has {:.3g} GiB; "
          "reduce model sizes or train.batch_size", e.total() / gib, e.params, e.state_bytes / gib,
          e.activation_bytes / gib, have / gib));
    }
  }
  problems.raise_if_any();
  resolve_model_config(c.model);
  return c;
}

Config load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  return check_and_resolve(parse_config_file(path, overrides, /*collect=*/true), /*check_data_files=*/true);
}

}  // namespace normlab
