// TensorBoard event files of a run's records (src/metrics/README.md, "TensorBoard"): every scalar
// of every record in metrics.jsonl becomes a scalar event at the record's step, written as the
// record is, so TensorBoard reads a run while it trains. The events are TensorBoard's Event
// protobuf (tensorboard.proto, Debian's protobuf), framed as TFRecords: little-endian uint64
// length, masked CRC-32C of the length, data, masked CRC-32C of the data.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/fs.h"

namespace normlab {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) and TFRecord's mask of it.
uint32_t crc32c(std::string_view bytes);
uint32_t masked_crc32c(std::string_view bytes);
// One TFRecord: length, masked CRC of the length, data, masked CRC of the data.
std::string tfrecord(std::string_view data);

// The scalars TensorBoard gets from one record, as (tag, value): `train/loss`, `eval/val_loss`,
// `spike/loss` (its z-score), per-layer series as `<series>/blocks.<i>` and `<series>/out` for
// the stream after the last block (an [L+1] series), nested objects as `<kind>/<key>/<subkey>`,
// booleans as 0 or 1. `kind` and `step` are not values; null (non-finite) values are skipped.
std::vector<std::pair<std::string, double>> tensorboard_scalars(const YAML::Node& record, int64_t n_layers);

class TensorBoardWriter {
 public:
  // Creates dir and a new event file in it, events.out.tfevents.<secs>.<host>, starting with the
  // file-version event.
  TensorBoardWriter(const std::string& dir, int64_t n_layers);
  // One event holding every scalar of the record, at its step; flushed, so readers see it at once.
  void write(const YAML::Node& record, double wall_time);
  void write(const YAML::Node& record);  // at the current time
  const std::string& path() const { return path_; }

 private:
  void append_event(const std::string& serialized);
  std::unique_ptr<AppendFile> f_;
  std::string path_;
  int64_t n_layers_;
};

// `normlab export-tb`: writes <run>/tensorboard/ anew from <run>/metrics.jsonl (earlier event
// files there are replaced). Returns the event file written.
std::string export_tensorboard(const std::string& run_dir);

}  // namespace normlab
