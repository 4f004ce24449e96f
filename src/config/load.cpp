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
  lines_.push_back(fmt::format("{}: {}: {}", src_.where(key), key, message));
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
bool convert(const YAML::Node& n, std::optional<int64_t>& out, std::string& expected) {
  if (is_auto(n)) {
    out.reset();
    return true;
  }
  int64_t v = 0;
  bool ok = convert(n, v, expected);
  expected = "an integer or auto";
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

// True when the quoted scalar opening at text[pos] is closed before the end of the text
// (yaml-cpp accepts a missing closing quote and takes the rest of the file as the string).
bool quote_is_closed(const std::string& text, size_t pos) {
  const char q = text[pos];
  for (size_t i = pos + 1; i < text.size(); ++i) {
    if (q == '"' && text[i] == '\\') {
      ++i;
    } else if (text[i] == q) {
      if (q == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;  // '' is an escaped quote
        continue;
      }
      return true;
    }
  }
  return false;
}

// What YAML allows but a config must not contain: duplicate keys (yaml-cpp keeps both and one
// silently wins) and unterminated quoted strings.
void check_strict(const YAML::Node& n, const std::string& text, const std::string& name,
                  const std::string& prefix, std::vector<std::string>& problems) {
  if (n.IsScalar()) {
    const auto pos = static_cast<size_t>(n.Mark().pos);
    if (n.Tag() == "!" && pos < text.size() && (text[pos] == '"' || text[pos] == '\'') &&
        !quote_is_closed(text, pos)) {
      problems.push_back(fmt::format("{}:{}: {}: unterminated quoted string (missing closing {})", name,
                                     n.Mark().line + 1, prefix.empty() ? "value" : prefix, text[pos]));
    }
  } else if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) check_strict(n[i], text, name, prefix, problems);
  } else if (n.IsMap()) {
    std::map<std::string, int> first_line;
    for (const auto& kv : n) {
      const std::string k = kv.first.Scalar();
      const std::string key = prefix.empty() ? k : prefix + "." + k;
      const int line = kv.first.Mark().line + 1;
      if (first_line.count(k)) {
        problems.push_back(fmt::format("{}:{}: {}: duplicate key (first set on line {})", name, line, key,
                                       first_line[k]));
      } else {
        first_line[k] = line;
      }
      check_strict(kv.first, text, name, key, problems);
      check_strict(kv.second, text, name, key, problems);
    }
  }
}

// Counts the nodes of one document and remembers where its first one starts.
class DocumentProbe : public YAML::EventHandler {
 public:
  int nodes = 0;
  int first_line = -1;
  bool only_null = true;
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& m, YAML::anchor_t) override { node(m, true); }
  void OnAlias(const YAML::Mark& m, YAML::anchor_t) override { node(m, false); }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t, const std::string&) override {
    node(m, false);
  }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    node(m, false);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    node(m, false);
  }
  void OnMapEnd() override {}

 private:
  void node(const YAML::Mark& m, bool null) {
    if (nodes++ == 0) first_line = m.line + 1;
    only_null = only_null && null;
  }
};

// A config is exactly one YAML document. yaml-cpp's LoadAll never returns on stray text after a
// document (a lone ',' makes it produce empty documents forever; YAML::Load silently ignores
// it), so the documents are counted with the event parser, at most two.
void check_single_document(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentProbe first, second;
  if (!parser.HandleNextDocument(first) || !parser.HandleNextDocument(second)) return;
  if (second.only_null) {
    throw ConfigError({fmt::format("{}:{}: unexpected text after the end of the YAML document", name,
                                   std::max(second.first_line, 1))});
  }
  // The line of the "---" that opens the second document.
  std::istringstream lines(text);
  std::string line;
  int n = 0, at = second.first_line;
  bool content = false;
  while (std::getline(lines, line)) {
    ++n;
    if (line.rfind("---", 0) == 0 && content) {
      at = n;
      break;
    }
    if (!line.empty() && line[0] != '#' && line.rfind("---", 0) != 0 && line.rfind("%", 0) != 0) content = true;
  }
  throw ConfigError({fmt::format("{}:{}: a second YAML document; a config is one document", name, at)});
}

YAML::Node load_yaml(const std::string& text, const std::string& name) {
  YAML::Node root;
  if (const auto [line, what] = find_unprintable(text); !what.empty()) {
    throw ConfigError({fmt::format("{}:{}: {}; YAML text must be printable UTF-8", name, line, what)});
  }
  try {
    check_single_document(text, name);
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError({fmt::format("{}:{}: YAML syntax error: {}", name, e.mark.line + 1, e.msg)});
  }
  std::vector<std::string> problems;
  check_strict(root, text, name, "", problems);
  if (!problems.empty()) throw ConfigError(problems);
  return root;
}

// Resolves `base:` chains. dir: the directory relative paths are taken from.
YAML::Node load_with_bases(const std::string& text, const std::string& name, const std::string& dir,
                           ConfigSource& src, int depth) {
  YAML::Node root = load_yaml(text, name);
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

template <class T>
std::string repr(const T& v);
template <>
std::string repr(const int64_t& v) {
  return std::to_string(v);
}
template <>
std::string repr(const double& v) {
  return fmt::format("{}", v);
}
template <>
std::string repr(const bool& v) {
  return v ? "true" : "false";
}
template <>
std::string repr(const std::string& v) {
  return v;
}
template <>
std::string repr(const std::optional<double>& v) {
  return v ? repr(*v) : "auto";
}
template <>
std::string repr(const std::optional<int64_t>& v) {
  return v ? repr(*v) : "auto";
}
template <>
std::string repr(const std::optional<std::string>& v) {
  return v ? *v : "null";
}
template <>
std::string repr(const std::array<double, 2>& v) {
  return fmt::format("[{}, {}]", repr(v[0]), repr(v[1]));
}
template <>
std::string repr(const OwnedField& f) {
  return key_value_text(f.value);
}
// Choices print their name.
template <class E, std::enable_if_t<is_choice_v<E>, int> = 0>
std::string repr_of(const E& v) {
  return choice_name(v);
}
template <class T, std::enable_if_t<!is_choice_v<T>, int> = 0>
std::string repr_of(const T& v) {
  return repr(v);
}
// The help line of `normlab keys`: a choice lists its names.
template <class T>
std::string help_of(const T&, const char* help) {
  if constexpr (is_choice_v<T>) {
    return std::string(help) + ": " + choice_names<T>();
  } else {
    return help;
  }
}
inline std::string help_of(const OwnedField& f, const char* help) {
  if (f.spec.kind != KeyKind::kName) return help;
  std::string names;
  for (const auto& s : f.spec.names) names += (names.empty() ? "" : " | ") + s;
  return std::string(help) + ": " + names;
}

class Dumper {
 public:
  explicit Dumper(YAML::Emitter& out) : out_(out) {}
  template <class T>
  void field(const char* name, T& value, const char*) {
    out_ << YAML::Key << name << YAML::Value;
    emit(value);
  }
  template <class S>
  void section(const char* name, S& sub) {
    out_ << YAML::Key << name << YAML::Value << YAML::BeginMap;
    describe(sub, *this);
    out_ << YAML::EndMap;
  }

 private:
  void emit(const std::string& s) { out_ << YAML::DoubleQuoted << s; }
  void emit(const std::optional<std::string>& s) {
    if (s) {
      emit(*s);
    } else {
      out_ << YAML::Null;
    }
  }
  void emit(const std::array<double, 2>& v) {
    out_ << YAML::Flow << YAML::BeginSeq << repr(v[0]) << repr(v[1]) << YAML::EndSeq;
  }
  void emit(const OwnedField& f) {
    if (std::holds_alternative<std::string>(f.value)) {
      emit(std::get<std::string>(f.value));
    } else {
      out_ << key_value_text(f.value);
    }
  }
  template <class T>
  void emit(const T& v) {
    if constexpr (is_choice_v<T>) {
      out_ << YAML::DoubleQuoted << choice_name(v);
    } else {
      out_ << repr(v);
    }
  }
  YAML::Emitter& out_;
};

class FlatLister {
 public:
  template <class T>
  void field(const char* name, T& value, const char*) {
    out_.emplace_back(prefix_ + name, repr_of(value));
  }
  template <class S>
  void section(const char* name, S& sub) {
    const std::string saved = prefix_;
    prefix_ += std::string(name) + ".";
    describe(sub, *this);
    prefix_ = saved;
  }
  std::vector<std::pair<std::string, std::string>> out_;

 private:
  std::string prefix_;
};

// A key matches "optim.*" when it starts with "optim.".
constexpr const char* kResumeMayChange[] = {
    "out_dir",          "data.val",         "optim.*",       "train.steps",
    "train.log_every",  "train.checkpoint_every",            "train.save_init",
    "train.threads",    "train.device",     "train.precision",     "train.dist_backend", "train.dist_timeout", "eval.*",        "diag.every",
    "diag.spike.zscore", "diag.spike.action", "diag.per_param", "diag.nonfinite",
    "diag.csv"};

class KeyLister {
 public:
  template <class T>
  void field(const char* name, T& value, const char* help) {
    out_ += fmt::format("{:<32} {:<22} {}\n", prefix_ + name, repr_of(value), help_of(value, help));
  }
  template <class S>
  void section(const char* name, S& sub) {
    const std::string saved = prefix_;
    prefix_ += std::string(name) + ".";
    describe(sub, *this);
    prefix_ = saved;
  }
  std::string out_;

 private:
  std::string prefix_;
};

}  // namespace

std::pair<int, std::string> find_unprintable(const std::string& text) {
  int line = 1;
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') ++line;
    // A CR only as part of CRLF: yaml-cpp reads a lone CR as text inside a plain scalar, where
    // YAML reads a line break, and does not write it back the same way.
    if (c == '\r' && (i + 1 == text.size() || text[i + 1] != '\n')) {
      return {line, "carriage return not followed by a line feed"};
    }
    if (c == '\n' || c == '\t' || c == '\r' || (c >= 0x20 && c < 0x7f)) {
      ++i;
      continue;
    }
    if (c < 0x80) return {line, fmt::format("control character 0x{:02x}", c)};
    // A UTF-8 sequence: its length from the lead byte, continuation bytes 10xxxxxx, the shortest
    // form, no surrogate, and a printable code point (no C1 control but U+0085, no U+FFFE/FFFF).
    const int len = (c >= 0xc2 && c <= 0xdf) ? 2 : (c >= 0xe0 && c <= 0xef) ? 3 : (c >= 0xf0 && c <= 0xf4) ? 4 : 0;
    const auto invalid = [&] { return std::pair<int, std::string>{line, fmt::format("invalid UTF-8 byte 0x{:02x}", c)}; };
    if (len == 0 || i + len > text.size()) return invalid();
    uint32_t cp = c & (0x7f >> len);
    for (int k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(text[i + k]);
      if ((b & 0xc0) != 0x80) return invalid();
      cp = (cp << 6) | (b & 0x3f);
    }
    const uint32_t shortest = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (cp < shortest || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return invalid();
    if ((cp < 0xa0 && cp != 0x85) || cp == 0xfffe || cp == 0xffff) {
      return {line, fmt::format("control character U+{:04X}", cp)};
    }
    i += len;
  }
  return {line, ""};
}

YAML::Node load_strict_yaml(const std::string& text, const std::string& name) { return load_yaml(text, name); }

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

void validate_config(const Config& c, Problems& p) {
  auto positive = [&](const std::string& key, int64_t v) {
    if (v <= 0) p.add(key, fmt::format("{} must be a positive integer", v));
  };
  auto non_negative = [&](const std::string& key, double v) {
    if (!(v >= 0)) p.add(key, fmt::format("{} must be >= 0", v));
  };
  const auto& m = c.model;
  if (m.vocab_size < 2 || m.vocab_size > 65536) {
    p.add("model.vocab_size", fmt::format("{} must be in [2, 65536] (tokens are uint16)", m.vocab_size));
  }
  positive("model.ctx", m.ctx);
  positive("model.d_model", m.d_model);
  positive("model.n_layers", m.n_layers);
  positive("model.n_heads", m.n_heads);
  positive("model.d_ff", m.d_ff);
  if (m.n_heads > 0 && m.d_model > 0 && m.d_model % m.n_heads != 0) {
    p.add("model.n_heads", fmt::format("{} does not divide d_model {}", m.n_heads, m.d_model));
  } else if (m.pos == Position::kRope && m.n_heads > 0 && (m.d_model / m.n_heads) % 2 != 0) {
    p.add("model.pos", fmt::format("rope needs an even head size, d_model/n_heads = {}",
                                   m.d_model / m.n_heads));
  }
  if (m.norm.eps && !(*m.norm.eps > 0)) p.add("model.norm.eps", fmt::format("{} must be > 0", *m.norm.eps));
  non_negative("model.attn_softcap", m.attn_softcap);
  non_negative("model.logit_softcap", m.logit_softcap);
  if (!(m.layerscale >= 0) || !std::isfinite(m.layerscale))
    p.add("model.layerscale", fmt::format("{} must be a finite number >= 0 (0 = off)", m.layerscale));
  if (m.qk_norm_position == QkNormPosition::kAfterRope && m.pos != Position::kRope)
    p.add("model.qk_norm_position", "'after_rope' needs model.pos: rope (there is no RoPE to come after)");

  if (!(c.init.std > 0)) p.add("init.std", fmt::format("{} must be > 0", c.init.std));
  if (!(c.init.embed_std > 0)) p.add("init.embed_std", fmt::format("{} must be > 0", c.init.embed_std));

  const auto& o = c.optim;
  if (!(o.lr > 0)) p.add("optim.lr", fmt::format("{} must be > 0", o.lr));
  non_negative("optim.min_lr", o.min_lr);
  for (double b : o.betas) {
    if (!(b >= 0 && b < 1)) {
      p.add("optim.betas", fmt::format("[{}, {}] must both be in [0, 1)", o.betas[0], o.betas[1]));
      break;
    }
  }
  if (!(o.eps > 0)) p.add("optim.eps", fmt::format("{} must be > 0", o.eps));
  non_negative("optim.weight_decay", o.weight_decay);
  if (o.warmup < 0) p.add("optim.warmup", fmt::format("{} must be >= 0", o.warmup));
  non_negative("optim.grad_clip", o.grad_clip);
  non_negative("optim.z_loss", o.z_loss);
  if (!(o.qk_clip >= 0) || !std::isfinite(o.qk_clip))
    p.add("optim.qk_clip", fmt::format("{} must be a finite threshold > 0, or 0 = off", o.qk_clip));

  const auto& t = c.train;
  positive("train.steps", t.steps);
  positive("train.batch_size", t.batch_size);
  positive("train.accum", t.accum);
  positive("train.log_every", t.log_every);
  positive("train.checkpoint_every", t.checkpoint_every);
  if (t.threads < 0) p.add("train.threads", fmt::format("{} must be >= 0 (0 = all cores)", t.threads));
  if (t.precision == Precision::kFp16 && t.device != DeviceKind::kCuda) {
    p.add("train.precision", "fp16 needs train.device: cuda (fp16 autocast and loss scaling are a GPU "
                             "recipe); bf16 also runs on the CPU");
  }
  if (!(t.dist_timeout > 0) || !std::isfinite(t.dist_timeout))
    p.add("train.dist_timeout", fmt::format("{} must be a positive number of seconds", t.dist_timeout));
  if (c.eval.every < 0) p.add("eval.every", fmt::format("{} must be >= 0", c.eval.every));
  positive("eval.max_windows", c.eval.max_windows);
  positive("diag.every", c.diag.every);
  positive("diag.spike.window", c.diag.spike.window);
  if (!(c.diag.spike.zscore > 0))
    p.add("diag.spike.zscore", fmt::format("{} must be > 0", c.diag.spike.zscore));
  if (c.out_dir.empty()) p.add("out_dir", "must not be empty");
  if (c.data.train.empty()) p.add("data.train", "must name a file");
  if (c.data.val.empty()) p.add("data.val", "must name a file");
}

std::string dump_config(const Config& c) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  Dumper d(out);
  describe(const_cast<Config&>(c), d);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::vector<std::pair<std::string, std::string>> flat_values(const Config& c) {
  FlatLister f;
  describe(const_cast<Config&>(c), f);
  return f.out_;
}

bool may_change_on_resume(const std::string& key) {
  for (const std::string pattern : kResumeMayChange) {
    if (pattern.back() == '*' ? key.rfind(pattern.substr(0, pattern.size() - 1), 0) == 0 : key == pattern) {
      return true;
    }
  }
  return false;
}

std::string keys_that_may_change_on_resume() {
  std::string out;
  for (const char* k : kResumeMayChange) out += (out.empty() ? "" : ", ") + std::string(k);
  return out;
}

std::string describe_keys() {
  Config defaults;
  KeyLister k;
  describe(defaults, k);
  return k.out_;
}

}  // namespace normlab
