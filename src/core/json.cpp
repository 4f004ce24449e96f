#include "core/json.h"

#include <cmath>
#include <cstdio>
#include <fstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace normlab {

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  // Shortest representation that reads back to the same double.
  return fmt::format("{}", v);
}

void JsonObject::key(std::string_view k) {
  if (!body_.empty()) body_ += ',';
  body_ += json_quote(k);
  body_ += ':';
}

JsonObject& JsonObject::add(std::string_view k, double v) {
  key(k);
  body_ += json_number(v);
  return *this;
}
JsonObject& JsonObject::add(std::string_view k, int64_t v) {
  key(k);
  body_ += std::to_string(v);
  return *this;
}
JsonObject& JsonObject::add(std::string_view k, bool v) {
  key(k);
  body_ += v ? "true" : "false";
  return *this;
}
JsonObject& JsonObject::add(std::string_view k, std::string_view v) {
  key(k);
  body_ += json_quote(v);
  return *this;
}
JsonObject& JsonObject::add(std::string_view k, const std::vector<double>& v) {
  key(k);
  body_ += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) body_ += ',';
    body_ += json_number(v[i]);
  }
  body_ += ']';
  return *this;
}
JsonObject& JsonObject::add(std::string_view k, const std::vector<std::string>& v) {
  key(k);
  body_ += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) body_ += ',';
    body_ += json_quote(v[i]);
  }
  body_ += ']';
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, const std::vector<int64_t>& v) {
  key(k);
  body_ += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) body_ += ',';
    body_ += std::to_string(v[i]);
  }
  body_ += ']';
  return *this;
}
JsonObject& JsonObject::add(std::string_view k, const std::vector<std::vector<double>>& v) {
  key(k);
  body_ += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    body_ += i ? ",[" : "[";
    for (size_t j = 0; j < v[i].size(); ++j) body_ += (j ? "," : "") + json_number(v[i][j]);
    body_ += ']';
  }
  body_ += ']';
  return *this;
}
JsonObject& JsonObject::add(std::string_view k, const JsonObject& v) { return add_raw(k, v.str()); }
JsonObject& JsonObject::add(std::string_view k, const std::vector<JsonObject>& v) {
  std::string a = "[";
  for (size_t i = 0; i < v.size(); ++i) a += (i ? "," : "") + v[i].str();
  return add_raw(k, a + "]");
}
JsonObject& JsonObject::add_null(std::string_view k) {
  key(k);
  body_ += "null";
  return *this;
}
JsonObject& JsonObject::add_raw(std::string_view k, std::string_view json) {
  key(k);
  body_ += json;
  return *this;
}

std::vector<YAML::Node> read_json_lines(const std::string& path) {
  std::vector<YAML::Node> records;
  std::ifstream in(path);
  std::string line;
  int64_t skipped = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      YAML::Node r = YAML::Load(line);
      if (r.IsMap()) {
        records.push_back(r);
        continue;
      }
    } catch (const YAML::Exception&) {
    }
    ++skipped;  // a torn line of an interrupted write
  }
  if (skipped > 0) {
    spdlog::warn("warning: {}: skipped {} line{} that {} not a JSON object", path, skipped,
                 skipped == 1 ? "" : "s", skipped == 1 ? "is" : "are");
  }
  return records;
}

double json_number_or_nan(const YAML::Node& n) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (!n || !n.IsScalar()) return nan;
  try {
    return n.as<double>();
  } catch (const YAML::Exception&) {
    return nan;
  }
}

}  // namespace normlab
