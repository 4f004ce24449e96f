// File helpers with the guarantees the run directory relies on: a file or directory either
// appears complete under its final name or not at all; appends either land whole or fail loudly;
// one writer per directory at a time.
#pragma once

#include <string>
#include <string_view>

namespace normlab {

// Writes `bytes` to `path` through a temporary file in the same directory, fsync and rename.
void write_file_atomic(const std::string& path, std::string_view bytes);

// Replaces directory `to` by the complete directory `from` in one step: no moment exists at
// which `to` is missing or partial (renameat2 RENAME_EXCHANGE, then the old copy is removed).
// Where `to` does not exist this is a plain rename.
void replace_directory(const std::string& from, const std::string& to);

// Removes what an interrupted write_file_atomic leaves behind in `dir` (files named
// "<name>.tmp.<pid>"). Only safe while holding the directory's lock.
void remove_stale_temporaries(const std::string& dir);

// Reads a whole file; throws UsageError naming the path when it cannot be opened.
std::string read_file(const std::string& path);

bool file_exists(const std::string& path);

// A file that is only ever appended to, whole records at a time. Every write is checked: on a
// failure (full disk, file size limit) the file is cut back to its last complete record, so no
// torn line is left for readers, and RuntimeFailure names the file and the reason.
class AppendFile {
 public:
  explicit AppendFile(const std::string& path);  // creates the file if needed
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  void append(std::string_view bytes);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  long long size_ = 0;  // bytes of complete records
};

// An exclusive advisory lock (flock) on `path`, created if needed, held for the object's life and
// released by the kernel if the process dies. Throws UsageError with `busy_message` when another
// process (or another object in this one) holds it; the one-argument form waits for it instead.
class DirectoryLock {
 public:
  DirectoryLock(const std::string& path, const std::string& busy_message);
  // Waits until the lock is free instead (short sections shared by several processes).
  explicit DirectoryLock(const std::string& path);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_;
};

}  // namespace normlab
