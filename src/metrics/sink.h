// metrics.jsonl: one JSON object per line, flushed per record so a crash loses nothing that was
// logged. On resume, records from steps after the checkpoint are dropped first, so the file
// reads as one uninterrupted run.
#pragma once

#include <cstdio>
#include <string>

#include "core/json.h"

namespace normlab {

class MetricsSink {
 public:
  // Opens path for appending; with keep_before >= 0, first drops train records with step >=
  // keep_before and eval/other records with step > keep_before.
  MetricsSink(const std::string& path, int64_t keep_before = -1);
  ~MetricsSink();
  MetricsSink(const MetricsSink&) = delete;
  MetricsSink& operator=(const MetricsSink&) = delete;

  void write(const JsonObject& record);

 private:
  std::FILE* f_ = nullptr;
};

}  // namespace normlab
