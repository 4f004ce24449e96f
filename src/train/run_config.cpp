#include "train/run_config.h"

#include "model/parametrization.h"
#include "model/residual/residual.h"
#include "train/run_data.h"

#include <glob.h>

#include <filesystem>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/fs.h"
#include "core/system.h"
#include "data/corpus.h"
#include "data/tokenizer.h"
#include "model/residual/residual.h"
#include "model/transformer.h"
#include "train/device.h"

namespace normlab {

MemoryEstimate estimate_training_memory(const Config& c) {
  const auto& m = c.model;
  // Doubles throughout: absurd sizes must not overflow on the way to being rejected.
  const double V = m.vocab_size, T = m.ctx, d = m.d_model, L = m.n_layers, H = m.n_heads, f = m.d_ff;
  const ResolvedModel entries = ResolvedModel::of(m);
  const bool gated = entries.ffn && entries.ffn->gated;
  const double ffn_mats = gated ? 3 : 2;  // fc1, fc2 (and gate)
  const double ffn_acts = gated ? 4 : 2;  // per token, d_ff wide: fc1 out, activation (and gate out, product)
  MemoryEstimate e;
  // The residual type's own parameters and carried streams (hc, mhc: n streams; attnres: sources).
  ResidualCost stream;
  if (const ResidualType* r = entries.residual; r && r->cost) stream = r->cost(m);
  e.params = V * d + (m.pos == Position::kLearned ? T * d : 0) + L * (4 * d * d + ffn_mats * d * f) +
             (m.tie_embeddings ? 0 : d * V) + stream.params;
  e.state_bytes = 16 * e.params;
  const double tokens = static_cast<double>(c.train.batch_size) * T;
  e.activation_bytes = 4 * tokens * (L * (8 * d + ffn_acts * f + H * T + 2 * stream.vectors_per_sublayer * d) + 3 * V);
  return e;
}

std::string resolve_data_paths(PathList& paths) {
  PathList out;
  for (const std::string& p : paths) {
    if (p.find_first_of("*?[") == std::string::npos) {
      if (!file_exists(p)) return fmt::format("file '{}' not found", std::filesystem::absolute(p).string());
      out.push_back(std::filesystem::absolute(p).lexically_normal().string());
      continue;
    }
    glob_t g{};
    const int rc = ::glob(p.c_str(), GLOB_ERR, nullptr, &g);  // sorted, as glob(3) does by default
    std::vector<std::string> matches(g.gl_pathv, g.gl_pathv + g.gl_pathc);
    globfree(&g);
    if (rc != 0 || matches.empty()) return fmt::format("the pattern '{}' matches no file", p);
    for (const std::string& m : matches) out.push_back(std::filesystem::absolute(m).lexically_normal().string());
  }
  paths = std::move(out);
  return "";
}

Config check_and_resolve(LoadedConfig loaded, bool check_data_files, RunData* data) {
  Config& c = loaded.config;
  Problems problems(loaded.source);
  problems.add_earlier(loaded.problems, loaded.problem_keys);
  validate_config(c, problems);
  const ResolvedModel entries = ResolvedModel::of(c.model);  // the registry entries, looked up once
  check_model_config(c.model, entries, problems);
  check_layout_scope(c, entries, problems);
  check_init_config(c, entries, problems);
  check_param_config(c, entries, problems);
  if (c.train.device == DeviceKind::kCuda) {
    if (const std::string why = device_unavailable_reason("cuda"); !why.empty()) {
      problems.add("train.device", "cuda: " + why);
    }
  }
  if (check_data_files) {
    std::string read_as_bytes;  // a data file read as bytes (a tokenizer's ids cannot be bytes)
    for (const auto& [key, paths] : {std::pair{"data.train", &c.data.train}, std::pair{"data.val", &c.data.val}}) {
      if (problems.has(key)) continue;
      if (const std::string why = resolve_data_paths(*paths); !why.empty()) {
        problems.add(key, why);
        continue;
      }
      try {
        Corpus corpus = Corpus::load(*paths, c.data.format);
        for (const TokenFile& f : corpus.files()) {
          if (f.format == TokenFormat::kBytes && read_as_bytes.empty()) read_as_bytes = f.path;
        }
        if (corpus.size() < c.model.ctx + 2) {
          problems.add(key, fmt::format("'{}' has {} tokens; need at least ctx + 2 = {}", corpus.name(),
                                        corpus.size(), c.model.ctx + 2));
        } else if (const auto bad = corpus.first_token_at_or_above(c.model.vocab_size)) {
          problems.add(key, fmt::format("'{}' holds token {} at position {} (the first one) >= model.vocab_size {}",
                                        bad->path, bad->token, bad->position, c.model.vocab_size));
        }
        if (c.eval.by_task && std::string(key) == "data.val" && !corpus.tokens_are_bytes()) {
          problems.add("eval.by_task", fmt::format("'{}' is read as tokens, not bytes; the loss per task needs a "
                                                   "byte-level corpus (its lines' first bytes name the task)",
                                                   corpus.name()));
        }
        if (data) (std::string(key) == "data.train" ? data->train : data->val) = std::move(corpus);
      } catch (const UsageError& e) {
        problems.add(key, e.what());
      }
    }
    if (!c.data.tokenizer.empty()) {
      c.data.tokenizer = std::filesystem::absolute(c.data.tokenizer).lexically_normal().string();
      if (!file_exists(c.data.tokenizer)) {
        problems.add("data.tokenizer", fmt::format("file '{}' not found", c.data.tokenizer));
      } else {
        try {
          Tokenizer tok = Tokenizer::load(c.data.tokenizer);
          if (tok.vocab_size() > c.model.vocab_size) {
            problems.add("data.tokenizer", fmt::format("'{}' has {} pieces but model.vocab_size is {}",
                                                       c.data.tokenizer, tok.vocab_size(), c.model.vocab_size));
          }
          if (data) data->tokenizer = std::move(tok);
        } catch (const UsageError& e) {
          problems.add("data.tokenizer", e.what());
        }
        // Text read as bytes is not what a tokenizer's ids index: encode it first.
        if (!read_as_bytes.empty()) {
          problems.add("data.tokenizer", fmt::format(
              "{} is read as bytes (a text file), not as the tokenizer's ids; encode it with `normlab "
              "tokenize encode` and train on the shard", read_as_bytes));
        }
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
          "reduce model sizes, model.residual.streams or train.batch_size", e.total() / gib, e.params, e.state_bytes / gib,
          e.activation_bytes / gib, have / gib));
    }
  }
  problems.raise_if_any();
  resolve_model_config(c.model);
  resolve_param_config(c.param, c.model);
  return c;
}

Config load_run_config(const std::string& path, const std::vector<std::string>& overrides, RunData* data) {
  return check_and_resolve(parse_config_file(path, overrides, /*collect=*/true), /*check_data_files=*/true, data);
}

}  // namespace normlab
