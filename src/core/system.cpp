#include "core/system.h"

#include <sys/resource.h>

#include <filesystem>
#include <fstream>

namespace normlab {

std::string loaded_blas_library() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const auto pos = line.find('/');
    if (pos == std::string::npos) continue;
    const std::string path = line.substr(pos);
    if (path.find("blas") == std::string::npos) continue;
    std::error_code ec;
    auto real = std::filesystem::canonical(path, ec);
    return ec ? path : real.string();
  }
  return "";
}

bool reference_blas_loaded() {
  const std::string lib = loaded_blas_library();
  return lib.find("/blas/libblas") != std::string::npos;
}

double peak_rss_mib() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

}  // namespace normlab
