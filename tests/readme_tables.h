// The names in the first column of a Markdown table under a heading, read the same way by the docs
// test (which holds src/model/README.md's tables to the registries) and by the sweep fuzzer's
// stand-in for check_and_resolve (which runs without LibTorch and so takes the registries' names
// from those tables instead of a copy). Header-only, no LibTorch.
#pragma once

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace normlab::testing {

// The names in the first column (`name` in backticks) of the tables under the heading `heading`
// (up to the next heading of the same level, "## ").
inline std::set<std::string> table_names(const std::string& doc, const std::string& heading) {
  std::set<std::string> out;
  const auto at = doc.find("\n" + heading + "\n");
  if (at == std::string::npos) return out;
  const auto end = doc.find("\n## ", at + 1);
  std::istringstream lines(doc.substr(at, end == std::string::npos ? std::string::npos : end - at));
  std::string line;
  const std::regex row("^\\| `([a-z0-9_]+)` \\|");
  std::smatch m;
  while (std::getline(lines, line)) {
    if (std::regex_search(line, m, row)) out.insert(m[1]);
  }
  return out;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace normlab::testing
