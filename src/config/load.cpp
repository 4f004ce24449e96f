#include "config/load.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/fs.h"

namespace normlab {

std::string ConfigSource::where(const std::string& key) const {
  for (const auto& o : overridden) {
    if (key == o || key.rfind(o + ".", 0) == 0) return "--set";
  }
  auto it = where_.find(key);
  if (it != where_.end()) return it->second;
  return file;
}

void Problems::add(const std::string& key, const std::string& message) {
  if (!keys_.insert(key).second) return;
  lines_.push_back(fmt::format("{}: {}: {}", src_ ? src_->where(key) : std::string("(config)"), key, message));
}

void Problems::add_at(const std::string& where, const std::string& key, const std::string& message) {
  keys_.insert(key);
  lines_.push_back(fmt::format("{}: {}: {}", where, key, message));
}

void Problems::add_earlier(const std::vector<std::string>& lines, const std::set<std::string>& keys) {
  lines_.insert(lines_.begin(), lines.begin(), lines.end());
  keys_.insert(keys.begin(), keys.end());
}

void Problems::raise() const { throw ConfigError(lines_); }

namespace {

std::string scalar_text(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "null";
}

bool is_auto(const YAML::Node& n) { return n.IsNull() || (n.IsScalar() && n.Scalar() == "auto"); }

// Converters: return false (and leave the value alone) when the node does not fit.
bool convert(const YAML::Node& n, int64_t& out, std::string& expected) {
  expected = "an integer";
  if (!n.IsScalar()) return false;
  try {
    out = n.as<int64_t>();
    return true;
  } catch (const YAML::Exception&) {
    return false;
  }
}
bool convert(const YAML::Node& n, double& out, std::string& expected) {
  expected = "a finite number";
  if (!n.IsScalar()) return false;
  try {
    const double v = n.as<double>();
    if (!std::isfinite(v)) return false;  // .inf / .nan reach no use a config has
    out = v;
    return true;
  } catch (const YAML::Exception&) {
    return false;
  }
}
bool convert(const YAML::Node& n, bool& out, std::string& expected) {
  expected = "true or false";
  if (!n.IsScalar()) return false;
  try {
    out = n.as<bool>();
    return true;
  } catch (const YAML::Exception&) {
    return false;
  }
}
bool convert(const YAML::Node& n, std::string& out, std::string& expected) {
  expected = "a string";
  if (!n.IsScalar()) return false;
  out = n.Scalar();
  return true;
}
bool convert(const YAML::Node& n, std::optional<double>& out, std::string& expected) {
  if (is_auto(n)) {
    out.reset();
    return true;
  }
  double v = 0;
  bool ok = convert(n, v, expected);
  expected = "a finite number or auto";
  if (ok) out = v;
  return ok;
}
bool convert(const YAML::Node& n, std::optional<std::string>& out, std::string& expected) {
  if (n.IsNull()) {
    out.reset();
    return true;
  }
  std::string v;
  bool ok = convert(n, v, expected);
  expected = "a name or null";
  if (ok) out = v;
  return ok;
}
// data.train / data.val: one file name, or a non-empty list of them.
bool convert(const YAML::Node& n, PathList& out, std::string& expected) {
  expected = "a file name, a glob or a non-empty list of them";
  if (n.IsScalar()) {
    out = {n.Scalar()};
    return true;
  }
  if (!n.IsSequence() || n.size() == 0) return false;
  PathList v;
  for (const auto& item : n) {
    if (!item.IsScalar()) return false;
    v.push_back(item.Scalar());
  }
  out = std::move(v);
  return true;
}
bool convert(const YAML::Node& n, std::array<double, 2>& out, std::string& expected) {
  expected = "a list of two finite numbers";
  if (!n.IsSequence() || n.size() != 2) return false;
  std::array<double, 2> v{};
  std::string unused;
  for (size_t i = 0; i < 2; ++i) {
    if (!convert(n[i], v[i], unused)) return false;
  }
  out = v;
  return true;
}

// A choice: one of the names of its table.
template <class E, std::enable_if_t<is_choice_v<E>, int> = 0>
bool convert(const YAML::Node& n, E& out, std::string& expected) {
  expected = "one of: " + choice_names<E>(", ");
  if (!n.IsScalar()) return false;
  const auto v = parse_choice<E>(n.Scalar());
  if (v) out = *v;
  return v.has_value();
}
// An owned key: its kind decides the conversion; numbers and integers may be auto.
bool convert(const YAML::Node& n, OwnedField& f, std::string& expected) {
  const bool may_be_auto = std::holds_alternative<std::monostate>(f.spec.default_value);
  if (may_be_auto && is_auto(n)) {
    f.value = std::monostate{};
    return true;
  }
  bool ok = false;
  switch (f.spec.kind) {
    case KeyKind::kNumber: {
      double v = 0;
      ok = convert(n, v, expected);
      if (ok) f.value = v;
      break;
    }
    case KeyKind::kInteger: {
      int64_t v = 0;
      ok = convert(n, v, expected);
      if (ok) f.value = v;
      break;
    }
    case KeyKind::kBoolean: {
      bool v = false;
      ok = convert(n, v, expected);
      if (ok) f.value = v;
      break;
    }
    case KeyKind::kName: {
      std::string v;
      ok = convert(n, v, expected);
      std::string names;
      for (const auto& s : f.spec.names) names += (names.empty() ? "" : ", ") + s;
      expected = "one of: " + names;
      ok = ok && std::find(f.spec.names.begin(), f.spec.names.end(), v) != f.spec.names.end();
      if (ok) f.value = v;
      break;
    }
  }
  if (may_be_auto) expected += " or auto";
  return ok;
}

class Parser {
 public:
  Parser(YAML::Node node, std::string prefix, Problems& problems, ConfigSource& src)
      : node_(std::move(node)), prefix_(std::move(prefix)), problems_(problems), src_(src) {}

  template <class T>
  void field(const char* name, T& value, const char* /*help*/) {
    known_.push_back(name);
    const YAML::Node n = child(name);
    if (!n) return;
    const std::string key = prefix_ + name;
    std::string expected;
    if (!convert(n, value, expected)) {
      problems_.add(key, fmt::format("expected {}, got {}", expected, scalar_text(n)));
    }
  }

  template <class S>
  void section(const char* name, S& sub) {
    known_.push_back(name);
    const YAML::Node n = child(name);
    if (!n) return;
    const std::string key = prefix_ + name;
    if (n.IsNull()) return;  // "model:" with nothing under it keeps the defaults
    if (!n.IsMap()) {
      problems_.add(key, fmt::format("expected a mapping of keys, got {}", scalar_text(n)));
      return;
    }
    Parser p(n, key + ".", problems_, src_);
    describe(sub, p);
    p.reject_unknown();
  }

  void reject_unknown() {
    if (!node_ || !node_.IsMap()) return;
    for (const auto& kv : node_) {
      const std::string k = kv.first.Scalar();
      if (std::find(known_.begin(), known_.end(), k) != known_.end()) continue;
      const std::string key = prefix_ + k;
      std::string expected;
      for (const auto& name : known_) expected += (expected.empty() ? "" : ", ") + name;
      problems_.add(key, fmt::format("unknown key; expected one of: {}", expected));
    }
  }

 private:
  YAML::Node child(const char* name) {
    if (!node_ || !node_.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    const YAML::Node& cn = node_;
    YAML::Node n = cn[name];
    if (!n.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
    return n;
  }

  YAML::Node node_;
  std::string prefix_;
  Problems& problems_;
  ConfigSource& src_;
  std::vector<std::string> known_;
};

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream ss(key);
  std::string part;
  while (std::getline(ss, part, '.')) parts.push_back(part);
  return parts;
}

// Sets root[a][b][c] = value, creating mappings on the way.
void set_path(YAML::Node node, const std::vector<std::string>& parts, size_t i,
              const YAML::Node& value) {
  if (i + 1 == parts.size()) {
    node[parts[i]] = value;
    return;
  }
  YAML::Node next = node[parts[i]];
  if (!next.IsMap()) {
    node[parts[i]] = YAML::Node(YAML::NodeType::Map);
    next = node[parts[i]];
  }
  set_path(next, parts, i + 1, value);
}

// Records "file:line" for every key of a parsed file (later files overwrite earlier ones).
void collect_locations(const YAML::Node& node, const std::string& prefix, const std::string& file,
                       std::map<std::string, std::string>& out) {
  if (!node.IsMap()) return;
  for (const auto& kv : node) {
    const std::string key = prefix + kv.first.Scalar();
    out[key] = fmt::format("{}:{}", file, kv.first.Mark().line + 1);
    collect_locations(kv.second, key + ".", file, out);
  }
}

// overlay's keys replace base's; mappings merge key by key.
YAML::Node merge_nodes(const YAML::Node& base, const YAML::Node& overlay) {
  if (!base.IsMap() || !overlay.IsMap()) return YAML::Clone(overlay);
  YAML::Node out = YAML::Clone(base);
  for (const auto& kv : overlay) {
    const std::string k = kv.first.Scalar();
    const YAML::Node& cb = base;
    out[k] = cb[k] ? merge_nodes(cb[k], kv.second) : YAML::Clone(kv.second);
  }
  return out;
}

// Resolves `base:` chains. dir: the directory relative paths are taken from.
YAML::Node load_with_bases(const std::string& text, const std::string& name, const std::string& dir,
                           ConfigSource& src, int depth) {
  YAML::Node root = load_strict_yaml(text, name);
  const YAML::Node& croot = root;
  if (!root.IsMap() || !croot["base"]) {
    collect_locations(root, "", name, src.where_);
    return root;
  }
  const YAML::Node b = croot["base"];
  const std::string where = fmt::format("{}:{}", name, b.Mark().line + 1);
  if (!b.IsScalar()) throw ConfigError({where + ": base: expected a path to another config file"});
  if (depth > 8) throw ConfigError({where + ": base: chain of more than 8 files (a cycle?)"});
  const std::filesystem::path base_path = std::filesystem::path(dir) / b.Scalar();
  if (!file_exists(base_path.string())) {
    throw ConfigError({fmt::format("{}: base: file '{}' not found", where, base_path.string())});
  }
  YAML::Node base = load_with_bases(read_file(base_path.string()), base_path.string(),
                                    base_path.parent_path().string(), src, depth + 1);
  root.remove("base");
  collect_locations(root, "", name, src.where_);
  return merge_nodes(base, root);
}

LoadedConfig parse_node(YAML::Node root, ConfigSource src, const std::vector<std::string>& overrides,
                        bool collect) {
  LoadedConfig out;
  Problems problems(src);
  if (root.IsNull() || !root.IsDefined()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) {
    problems.add("(top level)", "expected a mapping of keys such as model:, train:");
    problems.raise();
  }
  for (const auto& o : overrides) {
    const auto eq = o.find('=');
    const std::string key = o.substr(0, eq);
    if (eq == std::string::npos || key.empty()) {
      throw UsageError(fmt::format("--set {}: expected key.path=value", o));
    }
    if (const auto [line, what] = find_unprintable(o); !what.empty()) {
      throw UsageError(fmt::format("--set {}: {}; expected printable UTF-8 text", key, what));
    }
    YAML::Node value;
    try {
      value = YAML::Load(o.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      throw UsageError(fmt::format("--set {}: value is not valid YAML ({})", o, e.msg));
    }
    const auto parts = split_key(key);
    for (const auto& p : parts) {
      if (p.empty()) throw UsageError(fmt::format("--set {}: empty part in key path", o));
    }
    set_path(root, parts, 0, value);
    src.overridden.insert(key);
  }
  Parser parser(root, "", problems, src);
  describe(out.config, parser);
  parser.reject_unknown();
  out.source = src;
  if (!problems.empty() && !collect) problems.raise();
  out.problems = problems.lines();
  out.problem_keys = problems.keys();
  return out;
}

}  // namespace

LoadedConfig parse_config_text(const std::string& yaml, const std::string& name,
                               const std::vector<std::string>& overrides, bool collect) {
  ConfigSource src;
  src.file = name;
  const std::string dir = std::filesystem::path(name).parent_path().string();
  YAML::Node root = load_with_bases(yaml, name, dir.empty() ? "." : dir, src, 0);
  return parse_node(root, src, overrides, collect);
}

LoadedConfig parse_config_file(const std::string& path, const std::vector<std::string>& overrides,
                               bool collect) {
  if (!file_exists(path)) throw UsageError(path + ": config file not found");
  return parse_config_text(read_file(path), path, overrides, collect);
}

}  // namespace normlab
