#include "metrics/sink.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/fs.h"

namespace normlab {
namespace {

constexpr const char* kCsvHeader = "step,kind,key,value\n";

// Keeps the lines whose (kind, step) survive a resume at keep_before.
template <class StepKind>
void prune(const std::string& path, int64_t keep_before, StepKind step_kind, const char* header) {
  std::istringstream in(read_file(path));
  std::string line, kept = header;
  while (std::getline(in, line)) {
    if (line.empty() || line + "\n" == header) continue;
    int64_t step;
    std::string kind;
    if (!step_kind(line, step, kind)) continue;  // a torn last line of an interrupted write
    if (kind == "train" ? step >= keep_before : step > keep_before) continue;
    kept += line + "\n";
  }
  write_file_atomic(path, kept);
}

void flatten(const YAML::Node& n, const std::string& key, const std::string& prefix, std::string& out) {
  if (n.IsMap()) {
    for (const auto& kv : n) flatten(kv.second, key.empty() ? kv.first.Scalar() : key + "." + kv.first.Scalar(), prefix, out);
  } else if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) flatten(n[i], key + "." + std::to_string(i), prefix, out);
  } else if (key != "step" && key != "kind") {
    out += prefix + key + "," + (n.IsNull() ? "" : n.Scalar()) + "\n";
  }
}

}  // namespace

std::string csv_rows(const std::string& json_record) { return csv_rows_of(YAML::Load(json_record)); }

std::string csv_rows_of(const YAML::Node& r) {
  const std::string prefix = fmt::format("{},{},", r["step"].as<int64_t>(), r["kind"].as<std::string>());
  std::string out;
  flatten(r, "", prefix, out);
  return out;
}

MetricsSink::MetricsSink(const std::string& path, int64_t keep_before, const std::string& csv_path,
                         const std::string& tensorboard_dir, int64_t n_layers) {
  if (keep_before >= 0 && file_exists(path)) {
    prune(path, keep_before, [](const std::string& line, int64_t& step, std::string& kind) {
      try {
        YAML::Node r = YAML::Load(line);
        step = r["step"].as<int64_t>();
        kind = r["kind"].as<std::string>();
        return true;
      } catch (const YAML::Exception&) {
        return false;
      }
    }, "");
  }
  f_ = std::make_unique<AppendFile>(path);
  if (!tensorboard_dir.empty()) {
    std::filesystem::remove_all(tensorboard_dir);
    tb_ = std::make_unique<TensorBoardWriter>(tensorboard_dir, n_layers);
    for (const YAML::Node& r : read_json_lines(path)) tb_->write(r);
  }
  if (!csv_path.empty()) {
    const bool fresh = !file_exists(csv_path);
    if (!fresh && keep_before >= 0) {
      prune(csv_path, keep_before, [](const std::string& line, int64_t& step, std::string& kind) {
        const auto c1 = line.find(','), c2 = line.find(',', c1 + 1);
        if (c1 == std::string::npos || c2 == std::string::npos) return false;
        try {
          step = std::stoll(line.substr(0, c1));
        } catch (const std::exception&) {
          return false;
        }
        kind = line.substr(c1 + 1, c2 - c1 - 1);
        return true;
      }, kCsvHeader);
    }
    csv_ = std::make_unique<AppendFile>(csv_path);
    if (fresh) csv_->append(kCsvHeader);
  }
}

void MetricsSink::write(const std::string& record) {
  f_->append(record + "\n");
  if (!csv_ && !tb_) return;
  const YAML::Node parsed = YAML::Load(record);  // once, for both
  if (csv_) csv_->append(csv_rows_of(parsed));
  if (tb_) tb_->write(parsed);
}

}  // namespace normlab
