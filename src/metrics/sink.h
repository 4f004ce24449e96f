// metrics.jsonl: one JSON object per line, written through per record so a crash loses nothing
// that was logged, and checked: a write that fails (full disk) throws RuntimeFailure and leaves no
// torn line behind; optionally metrics.csv beside it in long format (step,kind,key,value; nested keys
// dotted, arrays indexed: layers.grad_norm.3). On resume, records from steps after the
// checkpoint are dropped first, so the files read as one uninterrupted run.
#pragma once

#include <yaml-cpp/yaml.h>

#include <memory>
#include <string>

#include "core/fs.h"
#include "core/json.h"
#include "metrics/tensorboard.h"

namespace normlab {

class MetricsSink {
 public:
  // keep_before >= 0 first drops train records with step >= keep_before and other records with
  // step > keep_before. csv_path empty = no CSV.
  // tensorboard_dir non-empty: every record also goes to a TensorBoard event file there
  // (tensorboard.h); the directory is written anew from the kept records first, so after a resume
  // it mirrors metrics.jsonl (no events of dropped steps).
  MetricsSink(const std::string& path, int64_t keep_before = -1, const std::string& csv_path = "",
              const std::string& tensorboard_dir = "", int64_t n_layers = 0);
  MetricsSink(const MetricsSink&) = delete;
  MetricsSink& operator=(const MetricsSink&) = delete;

  void write(const JsonObject& record) { write(record.str()); }
  void write(const std::string& json_record);  // one JSON object, without the newline

 private:
  std::unique_ptr<AppendFile> f_, csv_;
  std::unique_ptr<TensorBoardWriter> tb_;
};

// The CSV rows of one JSON record (no header).
std::string csv_rows(const std::string& json_record);
std::string csv_rows_of(const YAML::Node& record);

}  // namespace normlab
