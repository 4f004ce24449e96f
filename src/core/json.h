// Minimal JSON writing for metrics records and checkpoint headers (one object per line).
// Reading JSON is done with yaml-cpp (JSON is a subset of YAML), so there is no second parser.
// Non-finite numbers are written as null: JSON has no NaN, and a NaN loss must not make the
// whole metrics file unreadable.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace normlab {

std::string json_quote(std::string_view s);
std::string json_number(double v);

// Builds one JSON object in insertion order: JsonObject().add("kind", "train").add("step", 3).str()
class JsonObject {
 public:
  JsonObject& add(std::string_view key, double v);
  JsonObject& add(std::string_view key, int64_t v);
  JsonObject& add(std::string_view key, int v) { return add(key, static_cast<int64_t>(v)); }
  JsonObject& add(std::string_view key, bool v);
  JsonObject& add(std::string_view key, std::string_view v);
  JsonObject& add(std::string_view key, const char* v) { return add(key, std::string_view(v)); }
  JsonObject& add(std::string_view key, const std::vector<double>& v);
  JsonObject& add(std::string_view key, const std::vector<int64_t>& v);
  JsonObject& add(std::string_view key, const std::vector<std::string>& v);
  JsonObject& add(std::string_view key, const std::vector<std::vector<double>>& v);  // rows of numbers
  JsonObject& add(std::string_view key, const JsonObject& v);
  JsonObject& add(std::string_view key, const std::vector<JsonObject>& v);  // an array of objects
  JsonObject& add_null(std::string_view key);
  JsonObject& add_raw(std::string_view key, std::string_view json);
  bool empty() const { return body_.empty(); }
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(std::string_view k);
  std::string body_;
};

// The JSON objects of a one-object-per-line file (metrics.jsonl), in order. Lines that do not
// parse as an object are skipped with a warning on the log: the torn last line of a run that is
// still writing or was killed must not make the rest unreadable. A missing file gives no records.
std::vector<YAML::Node> read_json_lines(const std::string& path);

// A JSON number read back: NaN where the value is null (a non-finite number written), absent or
// not a number.
double json_number_or_nan(const YAML::Node& n);

}  // namespace normlab
