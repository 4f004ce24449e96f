// Strict YAML reading for config and sweep files: printable UTF-8, one document, no duplicate
// key, no unterminated quoted string; each problem names the file and line.
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <map>

#include <fmt/format.h>

#include "config/load.h"
#include "core/errors.h"

namespace normlab {
namespace {

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

}  // namespace

YAML::Node load_strict_yaml(const std::string& text, const std::string& name) {
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

}  // namespace normlab
