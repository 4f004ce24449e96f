// YAML file + `--set` overrides -> Config, with every problem collected and reported at once.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "config/config.h"

namespace normlab {

// Where each dotted key came from, so that problems can name file and line.
struct ConfigSource {
  std::string file;                          // "configs/default.yaml", or "<string>"
  std::map<std::string, std::string> where_; // dotted key -> "file:line" of its last setting
  std::set<std::string> overridden;          // keys set by --set

  // "file:12", "file" when the key was left at its default, or "--set" for overrides.
  std::string where(const std::string& key) const;
};

// Collects problems as "WHERE: key: message" lines.
class Problems {
 public:
  explicit Problems(const ConfigSource& src) : src_(src) {}
  void add(const std::string& key, const std::string& message);
  bool empty() const { return lines_.empty(); }
  const std::vector<std::string>& lines() const { return lines_; }
  [[noreturn]] void raise() const;  // throws ConfigError with all lines
  void raise_if_any() const {
    if (!empty()) raise();
  }

 private:
  const ConfigSource& src_;
  std::vector<std::string> lines_;
};

struct LoadedConfig {
  Config config;
  ConfigSource source;
};

// A config file may start from another: `base: default.yaml` (path relative to the file) loads
// that file first and deep-merges this one over it; bases may chain.
//
// Parses a YAML file and applies overrides ("model.d_model=256", value parsed as YAML). Unknown
// keys, wrong types and malformed overrides throw ConfigError naming each problem. Value rules
// (ranges, registry names) are checked separately by validate_config and the model's checks.
LoadedConfig parse_config_file(const std::string& path, const std::vector<std::string>& overrides = {});
LoadedConfig parse_config_text(const std::string& yaml, const std::string& name = "<string>",
                               const std::vector<std::string>& overrides = {});

// Value rules that need no registry: ranges, enumerations, divisibility.
void validate_config(const Config& c, Problems& problems);

// The config as YAML, every key present, in field-list order. Reloads to the same Config.
std::string dump_config(const Config& c);

// One line per key: dotted name, default, help. Drives `normlab keys`.
std::string describe_keys();

}  // namespace normlab
