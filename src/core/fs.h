// File helpers with the guarantees the run directory relies on: a file or directory either
// appears complete under its final name or not at all.
#pragma once

#include <string>
#include <string_view>

namespace normlab {

// Writes `bytes` to `path` through a temporary file in the same directory, fsync and rename.
void write_file_atomic(const std::string& path, std::string_view bytes);

// Reads a whole file; throws UsageError naming the path when it cannot be opened.
std::string read_file(const std::string& path);

bool file_exists(const std::string& path);

}  // namespace normlab
