// What the sweep file's parsers share (sweep_config.cpp: the file, its axes and quick: variant;
// sweep_points.cpp: its points; tune_config.cpp: the tune: block): where a node was written, how
// a node is described in an error line, and the parse of lists every section uses. Internal to
// src/sweep/.
#pragma once

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/load.h"
#include "sweep/sweep_config.h"

namespace normlab {
namespace sweep_yaml {

// Each point is a training run of minutes; a larger product is a mistake in the file (and would
// take expand_sweep and validate_points minutes and gigabytes before anything runs).
constexpr size_t kMaxPoints = 1000;

std::string at(const std::string& file, const YAML::Node& n);  // "file:line"
std::string describe_node(const YAML::Node& n);                // "'text'", "a list", ...
// A value as --set takes it: scalars as written, lists and mappings as flow YAML.
std::string value_text(const YAML::Node& n);
std::vector<int64_t> parse_seeds(const YAML::Node& n, const std::string& file, const std::string& section,
                                 Problems& problems);
// A problem line for every key of mapping n that `known` lacks.
void reject_unknown(const YAML::Node& n, const std::string& file, const std::string& prefix,
                    const std::vector<std::string>& known, Problems& problems);
YAML::Node load_sweep_yaml(const std::string& path);

template <class T>
std::string join(const std::vector<T>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + fmt::format("{}", v[i]);
  return out;
}

// The tune: block (tune_config.cpp): as written, the quick: variant's replacements, and its
// relations to the rest of the sweep (`what`: "" or "quick." for the lines).
std::optional<SweepTune> parse_tune(const YAML::Node& n, const std::string& file, Problems& problems);
void parse_quick_tune(const YAML::Node& n, const std::string& file, SweepTune& t, Problems& problems);
void check_tune(const Sweep& s, const std::string& what, Problems& problems);
void check_tune_key_is_numeric(const Sweep& s, Problems& problems);

}  // namespace sweep_yaml
}  // namespace normlab
