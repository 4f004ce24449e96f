// YAML file + `--set` overrides -> Config, with every problem collected and reported at once.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "config/config.h"

namespace YAML {
class Node;
}

namespace normlab {

// Where each dotted key came from, so that problems can name file and line.
struct ConfigSource {
  std::string file;                          // "configs/default.yaml", or "<string>"
  std::map<std::string, std::string> where_; // dotted key -> "file:line" of its last setting
  std::set<std::string> overridden;          // keys set by --set

  // "file:12", "file" when the key was left at its default, or "--set" for overrides.
  std::string where(const std::string& key) const;
};

// Collects problems as "WHERE: key: message" lines, for a config (WHERE from its source) or for
// any other input that names its locations itself (a sweep file: add_at).
class Problems {
 public:
  Problems() = default;  // locations given with add_at
  explicit Problems(const ConfigSource& src) : src_(&src) {}
  // At the key's place in the config source. A key that already has a problem (a value of the
  // wrong type kept its default) gets no second one: checks of its default value would only mislead.
  void add(const std::string& key, const std::string& message);
  // At an explicit location ("file:12", "--set"); every call adds a line.
  void add_at(const std::string& where, const std::string& key, const std::string& message);
  // Problems found earlier (LoadedConfig::problems), reported first.
  void add_earlier(const std::vector<std::string>& lines, const std::set<std::string>& keys);
  bool empty() const { return lines_.empty(); }
  const std::vector<std::string>& lines() const { return lines_; }
  const std::set<std::string>& keys() const { return keys_; }
  bool has(const std::string& key) const { return keys_.count(key) > 0; }
  [[noreturn]] void raise() const;  // throws ConfigError with all lines
  void raise_if_any() const {
    if (!empty()) raise();
  }

 private:
  const ConfigSource* src_ = nullptr;
  std::vector<std::string> lines_;
  std::set<std::string> keys_;
};

struct LoadedConfig {
  Config config;
  ConfigSource source;
  // Parse problems (wrong types, unknown keys) and their keys, when the parse was asked to
  // collect them rather than throw, so that value checks can report theirs in the same pass.
  std::vector<std::string> problems;
  std::set<std::string> problem_keys;
};

// A config file may start from another: `base: default.yaml` (path relative to the file) loads
// that file first and deep-merges this one over it; bases may chain.
//
// Parses a YAML file and applies overrides ("model.d_model=256", value parsed as YAML). Unknown
// keys, wrong types and malformed overrides throw ConfigError naming each problem. Value rules
// (ranges, registry names) are checked separately by validate_config and the model's checks.
//
// The YAML is read strictly: a duplicate key, a second document or an unterminated quoted string
// is an error naming file and line. With collect = true, type and unknown-key problems are left in
// LoadedConfig::problems instead of being thrown (syntax errors are always thrown).
LoadedConfig parse_config_file(const std::string& path, const std::vector<std::string>& overrides = {},
                               bool collect = false);
LoadedConfig parse_config_text(const std::string& yaml, const std::string& name = "<string>",
                               const std::vector<std::string>& overrides = {}, bool collect = false);

// One YAML document read strictly, as config files are (a sweep file too): printable UTF-8 text
// (YAML 1.2's character set; a control byte or invalid UTF-8 could not be written back to a run's
// config.yaml or sweep.yaml unchanged), a single document, no duplicate key, no unterminated
// quoted string. Throws ConfigError naming `name` and the line.
YAML::Node load_strict_yaml(const std::string& text, const std::string& name);

// Where `text` leaves printable UTF-8: the 1-based line and a description ("control character
// 0x0f", "invalid UTF-8 byte 0xff"); an empty description when it does not.
std::pair<int, std::string> find_unprintable(const std::string& text);

// Value rules that need no registry: ranges, enumerations, divisibility.
void validate_config(const Config& c, Problems& problems);

// The config as YAML, every key present, in field-list order. Reloads to the same Config.
std::string dump_config(const Config& c);

// Every key with its value as dumped, in field-list order: ("model.d_model", "128").
std::vector<std::pair<std::string, std::string>> flat_values(const Config& c);

// Keys that may differ between a run's checkpoint and `train --resume`: the schedule and its
// length, logging, evaluation, diagnostics and where the run executes. Every other key decides
// the weights' shapes, their init or the data order, and a resume must keep it.
bool may_change_on_resume(const std::string& key);
std::string keys_that_may_change_on_resume();  // "out_dir, data.val, optim.*, ..."

// One line per key: dotted name, default, help. Drives `normlab keys`.
std::string describe_keys();

}  // namespace normlab
