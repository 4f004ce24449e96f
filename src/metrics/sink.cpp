#include "metrics/sink.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "core/errors.h"
#include "core/fs.h"

namespace normlab {

MetricsSink::MetricsSink(const std::string& path, int64_t keep_before) {
  if (keep_before >= 0 && file_exists(path)) {
    std::istringstream in(read_file(path));
    std::string line, kept;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      try {
        YAML::Node r = YAML::Load(line);
        const int64_t step = r["step"].as<int64_t>();
        const bool train = r["kind"].as<std::string>() == "train";
        if (train ? step >= keep_before : step > keep_before) continue;
      } catch (const YAML::Exception&) {
        continue;  // a torn last line of an interrupted write
      }
      kept += line + "\n";
    }
    write_file_atomic(path, kept);
  }
  f_ = std::fopen(path.c_str(), "a");
  if (!f_) throw RuntimeFailure("cannot open " + path + ": " + std::strerror(errno));
}

MetricsSink::~MetricsSink() {
  if (f_) std::fclose(f_);
}

void MetricsSink::write(const JsonObject& record) {
  const std::string line = record.str() + "\n";
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fflush(f_);
}

}  // namespace normlab
