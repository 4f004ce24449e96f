#include "train/run_config.h"

#include <fmt/format.h>

#include "core/fs.h"
#include "data/corpus.h"
#include "model/transformer.h"
#include "train/device.h"

namespace normlab {

Config check_and_resolve(LoadedConfig loaded, bool check_data_files) {
  Config& c = loaded.config;
  Problems problems(loaded.source);
  validate_config(c, problems);
  check_model_config(c.model, problems);
  // (a name other than cpu or cuda is already reported by validate_config)
  if (c.train.device == "cuda") {
    if (const std::string why = device_unavailable_reason(c.train.device); !why.empty()) {
      problems.add("train.device", "cuda: " + why);
    }
  }
  if (check_data_files) {
    for (const auto& [key, path] : {std::pair{"data.train", c.data.train}, std::pair{"data.val", c.data.val}}) {
      if (path.empty()) continue;
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
  problems.raise_if_any();
  resolve_model_config(c.model);
  return c;
}

Config load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  return check_and_resolve(parse_config_file(path, overrides), /*check_data_files=*/true);
}

}  // namespace normlab
