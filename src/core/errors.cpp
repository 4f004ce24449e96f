#include "core/errors.h"

namespace normlab {
namespace {
std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) {
    if (!out.empty()) out += '\n';
    out += l;
  }
  return out;
}
}  // namespace

ConfigError::ConfigError(std::vector<std::string> problems)
    : UsageError(join_lines(problems)), problems_(std::move(problems)) {}

}  // namespace normlab
