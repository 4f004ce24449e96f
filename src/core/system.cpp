#include <atomic>
#include "core/system.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "core/errors.h"

namespace normlab {

std::string host_name() {
  char buf[256] = "";
  if (::gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "localhost";
  return buf;
}

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                         __builtin_cpu_supports("avx512bf16");
  return ok;
#else
  return false;
#endif
}

namespace {
std::string trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t");
  return begin == std::string::npos ? "" : s.substr(begin, s.find_last_not_of(" \t") - begin + 1);
}
}  // namespace

std::string cpu_description(std::istream& cpuinfo) {
  std::string line, name, family, model;
  while (std::getline(cpuinfo, line)) {
    if (line.find_first_not_of(" \t") == std::string::npos) {
      if (!name.empty()) break;  // the first processor's block is enough
      continue;
    }
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    // x86: "model name", "cpu family", "model"; some ARM kernels: "Model" or "Processor"
    if ((key == "model name" || key == "Model" || key == "Processor") && name.empty()) name = value;
    if (key == "cpu family" && family.empty()) family = value;
    if (key == "model" && model.empty()) model = value;
  }
  if (name.empty()) return "unknown";
  if (!family.empty() && !model.empty()) name += " (family " + family + ", model " + model + ")";
  return name;
}

std::string cpu_description() {
  std::ifstream in("/proc/cpuinfo");
  return cpu_description(in);
}

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

namespace {
std::atomic<int64_t> g_children{0};
}  // namespace

int64_t children_spawned() { return g_children.load(); }

pid_t spawn_child(const std::string& exe, const std::vector<std::string>& argv,
                  const std::vector<std::string>& env, const std::string& log_path, const std::string& what) {
  ++g_children;
  std::vector<char*> av, ev;
  for (const auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  for (const auto& e : env) ev.push_back(const_cast<char*>(e.c_str()));
  av.push_back(nullptr);
  ev.push_back(nullptr);
  const std::string exec_error = fmt::format("error: {}: cannot execute {}\n", what, exe);
  int log = -1, null_in = -1;
  if (!log_path.empty()) {
    log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log < 0) throw RuntimeFailure(fmt::format("cannot open {}: {}", log_path, std::strerror(errno)));
    null_in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGINT);
    if (::getppid() != parent) ::_exit(130);  // the parent died before the line above
    if (null_in >= 0) ::dup2(null_in, 0);
    if (log >= 0) {
      ::dup2(log, 1);
      ::dup2(log, 2);
    }
    ::execve(exe.c_str(), av.data(), ev.data());
    [[maybe_unused]] auto n = ::write(2, exec_error.data(), exec_error.size());
    ::_exit(127);
  }
  const int fork_errno = errno;
  if (log >= 0) ::close(log);
  if (null_in >= 0) ::close(null_in);
  if (pid < 0) throw RuntimeFailure(fmt::format("{}: cannot start a child process: {}", what, std::strerror(fork_errno)));
  return pid;
}

}  // namespace normlab
