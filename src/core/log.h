// Logging: human messages go to stderr (stdout is reserved for command results) and, during a
// run, also to <out_dir>/train.log.
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace normlab {

void setup_logging();                       // stderr sink, "[12:03:04] message"
void add_log_file(const std::string& path);  // appends to path as well, for the process's life

class CheckedFileSink;

// Appends every message to `path` as well while the object lives. A line that cannot be written
// (full disk) is not left torn, and check() reports it: spdlog swallows errors inside sinks, so
// the writer asks after each step.
class LogFile {
 public:
  explicit LogFile(const std::string& path);
  ~LogFile();
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;

  // Throws RuntimeFailure naming the file and the reason when a write failed.
  void check() const;

 private:
  std::shared_ptr<CheckedFileSink> sink_;
};

}  // namespace normlab
