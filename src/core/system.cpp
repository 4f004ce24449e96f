#include "core/system.h"

#include <dlfcn.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace normlab {

double physical_memory_bytes() {
  return static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

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

std::string blas_threading() {
  // openblas_get_parallel(): 0 sequential, 1 pthreads, 2 OpenMP (OpenBLAS's own API, looked up in
  // the libraries already loaded so that NormLab does not link OpenBLAS itself).
  using Fn = int (*)();
  auto fn = reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
  if (!fn) return "";
  switch (fn()) {
    case 0: return "sequential";
    case 1: return "pthreads";
    case 2: return "openmp";
    default: return "";
  }
}

double peak_rss_mib() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

}  // namespace normlab
