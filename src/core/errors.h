// Typed errors. Library code throws these; only main() catches them and picks the exit code
// (2 for invalid usage, config or input files, 1 for failures while running).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace normlab {

// Something the user must fix before anything runs: a bad flag, key, value or a missing file.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A config with one or more problems. Each problem is one line naming file, line, dotted key and
// what was expected; all of them are reported at once.
class ConfigError : public UsageError {
 public:
  explicit ConfigError(std::vector<std::string> problems);
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::vector<std::string> problems_;
};

// A failure while running (I/O error, corrupt checkpoint, diverged run that must stop, ...).
class RuntimeFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace normlab
