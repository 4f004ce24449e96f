// Logging: human messages go to stderr (stdout is reserved for command results) and, during a
// run, also to <out_dir>/train.log.
#pragma once

#include <string>

#include <spdlog/spdlog.h>

namespace normlab {
void setup_logging();                       // stderr sink, "[12:03:04] message"
void add_log_file(const std::string& path);  // appends to path as well
}  // namespace normlab
