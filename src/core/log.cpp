#include "core/log.h"

#include <algorithm>
#include <mutex>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include "core/errors.h"
#include "core/fs.h"

namespace normlab {

class CheckedFileSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit CheckedFileSink(const std::string& path) : file_(path) {}

  std::string error() {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (!error_.empty()) return;  // the first failure is the one reported
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    try {
      file_.append(std::string_view(line.data(), line.size()));
    } catch (const RuntimeFailure& e) {
      error_ = e.what();
    }
  }
  void flush_() override {}  // every line is written through at once

 private:
  AppendFile file_;
  std::string error_;
};

void setup_logging() {
  auto logger = std::make_shared<spdlog::logger>("normlab", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_pattern("[%H:%M:%S] %^%v%$");
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

void add_log_file(const std::string& path) {
  auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
  sink->set_pattern("[%Y-%m-%d %H:%M:%S] %v");
  spdlog::default_logger()->sinks().push_back(sink);
}

LogFile::LogFile(const std::string& path) : sink_(std::make_shared<CheckedFileSink>(path)) {
  sink_->set_pattern("[%Y-%m-%d %H:%M:%S] %v");
  spdlog::default_logger()->sinks().push_back(sink_);
}

LogFile::~LogFile() {
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
}

void LogFile::check() const {
  const std::string e = sink_->error();
  if (!e.empty()) throw RuntimeFailure(e);
}

}  // namespace normlab
