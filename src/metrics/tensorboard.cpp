#include "metrics/tensorboard.h"

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/json.h"
#include "core/system.h"
#include "metrics/records.h"
#include "metrics/tensorboard_event.h"

namespace normlab {

namespace {
namespace fs = std::filesystem;

std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int b = 0; b < 8; ++b) s[b] = static_cast<char>(v >> (8 * b));
  return s;
}

std::string le32(uint32_t v) {
  std::string s(4, '\0');
  for (int b = 0; b < 4; ++b) s[b] = static_cast<char>(v >> (8 * b));
  return s;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool number_of(const YAML::Node& n, double& out) {
  if (!n.IsScalar()) return false;
  const std::string& s = n.Scalar();
  if (s == "true" || s == "false") {
    out = s == "true" ? 1 : 0;
    return true;
  }
  try {
    out = n.as<double>();
    return std::isfinite(out);
  } catch (const YAML::Exception&) {
    return false;
  }
}

void add_scalars(const YAML::Node& n, const std::string& tag, std::vector<std::pair<std::string, double>>& out) {
  if (n.IsMap()) {
    for (const auto& kv : n) add_scalars(kv.second, tag + "/" + kv.first.Scalar(), out);
  } else if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) add_scalars(n[i], tag + "/" + std::to_string(i), out);
  } else if (double v = 0; number_of(n, v)) {
    out.emplace_back(tag, v);
  }
}
}  // namespace

uint32_t crc32c(std::string_view bytes) {
  static const std::array<uint32_t, 256> table = crc32c_table();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : bytes) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t c = crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  const std::string len = le64(data.size());
  std::string out = len + le32(masked_crc32c(len));
  out.append(data.data(), data.size());
  out += le32(masked_crc32c(data));
  return out;
}

std::vector<std::pair<std::string, double>> tensorboard_scalars(const YAML::Node& record, int64_t n_layers) {
  std::vector<std::pair<std::string, double>> out;
  if (!record.IsMap() || !record["kind"]) return out;
  const std::string kind = record["kind"].Scalar();
  for (const auto& kv : record) {
    const std::string key = kv.first.Scalar();
    if (key == "kind" || key == "step") continue;
    if (key == "layers" && kv.second.IsMap()) {
      for (const auto& series : kv.second) {
        const YAML::Node& v = series.second;
        if (!v.IsSequence()) continue;
        for (size_t i = 0; i < v.size(); ++i) {
          double x = 0;
          if (!number_of(v[i], x)) continue;
          const std::string layer = static_cast<int64_t>(i) == n_layers && static_cast<int64_t>(v.size()) == n_layers + 1
                                        ? "out" : fmt::format("blocks.{}", i);
          out.emplace_back(series.first.Scalar() + "/" + layer, x);
        }
      }
      continue;
    }
    if (kind == "spike") {  // a marker: the z-score of the spiking metric at its step
      if (key == "z" && record["metric"]) add_scalars(kv.second, "spike/" + record["metric"].Scalar(), out);
      continue;
    }
    add_scalars(kv.second, kind + "/" + key, out);
  }
  return out;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t n_layers) : n_layers_(n_layers) {
  fs::create_directories(dir);
  const double t = now_seconds();
  path_ = (fs::path(dir) / fmt::format("events.out.tfevents.{}.{}", static_cast<int64_t>(t), host_name())).string();
  for (int k = 1; file_exists(path_); ++k) {  // two writers within one second
    path_ = (fs::path(dir) / fmt::format("events.out.tfevents.{}.{}.{}", static_cast<int64_t>(t), host_name(), k)).string();
  }
  f_ = std::make_unique<AppendFile>(path_);
  append_event(tb_file_version_event(t));
}

void TensorBoardWriter::write(const YAML::Node& record) { write(record, now_seconds()); }

void TensorBoardWriter::write(const YAML::Node& record, double wall_time) {
  const auto scalars = tensorboard_scalars(record, n_layers_);
  if (scalars.empty()) return;
  append_event(tb_scalars_event(wall_time, record["step"] ? record["step"].as<int64_t>() : 0, scalars));
}

void TensorBoardWriter::append_event(const std::string& serialized) { f_->append(tfrecord(serialized)); }

std::string export_tensorboard(const std::string& run_dir) {
  const std::string metrics = (fs::path(run_dir) / "metrics.jsonl").string();
  if (!file_exists(metrics)) throw UsageError(run_dir + ": not a run directory (no metrics.jsonl)");
  const RunInfo info = read_run(run_dir).info;
  const fs::path dir = fs::path(run_dir) / "tensorboard";
  // Written beside, then swapped in: a reader sees the old files or the new one, never half of it.
  const fs::path tmp = fs::path(run_dir) / ".tensorboard.tmp";
  fs::remove_all(tmp);
  std::string written;
  {
    TensorBoardWriter w(tmp.string(), info.n_layers);
    struct stat st {};  // the records carry no time of their own: metrics.jsonl's last write
    const double t = ::stat(metrics.c_str(), &st) == 0 ? static_cast<double>(st.st_mtime) : now_seconds();
    for (const YAML::Node& r : read_json_lines(metrics)) w.write(r, t);
    written = (dir / fs::path(w.path()).filename()).string();
  }
  replace_directory(tmp.string(), dir.string());
  return written;
}

}  // namespace normlab
