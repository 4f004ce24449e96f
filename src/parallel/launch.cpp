#include "parallel/launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/errors.h"
#include "core/system.h"
#include "parallel/comm.h"

extern char** environ;

namespace normlab {
namespace {

using Clock = std::chrono::steady_clock;

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "stopped";
}

bool succeeded(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
bool interrupted(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 130; }

}  // namespace

int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw RuntimeFailure(fmt::format("--nproc: cannot open a socket: {}", std::strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const int e = errno;
    ::close(fd);
    throw RuntimeFailure(fmt::format("--nproc: cannot find a free port on 127.0.0.1: {}", std::strerror(e)));
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

int launch_local_ranks(const LaunchOptions& o) {
  const int W = o.nproc;
  // The launcher serves the rendezvous store, as torchrun's agent does: its port is bound before
  // any rank starts (no race for a free port) and it outlives every rank, so a survivor can tell
  // which rank stopped, rank 0 included.
  const auto store = host_rendezvous_store(o.dist_timeout_s);
  const int port = store->port();
  std::signal(SIGCHLD, SIG_DFL);  // an inherited SIG_IGN would reap the ranks before waitpid sees them
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t threads = o.threads > 0 ? o.threads : std::max<int64_t>(1, cores / W);
  static const char* kOwn[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                               "MASTER_PORT", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                               "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT"};
  std::vector<std::string> base;
  for (char** e = environ; *e; ++e) {
    const std::string s = *e, name = s.substr(0, s.find('='));
    if (std::none_of(std::begin(kOwn), std::end(kOwn), [&](const char* k) { return name == k; })) base.push_back(s);
  }
  spdlog::info("normlab train --nproc {}: {} ranks on 127.0.0.1:{}, {} thread(s) each", W, W, port, threads);

  std::vector<pid_t> pids(W, -1);
  std::vector<std::optional<int>> status(W);
  for (int r = 0; r < W; ++r) {
    std::vector<std::string> env = base;
    for (const auto& [k, v] : {std::pair<std::string, std::string>{"RANK", std::to_string(r)},
                               {"WORLD_SIZE", std::to_string(W)}, {"LOCAL_RANK", std::to_string(r)},
                               {"LOCAL_WORLD_SIZE", std::to_string(W)}, {"MASTER_ADDR", "127.0.0.1"},
                               {"MASTER_PORT", std::to_string(port)}, {"OMP_NUM_THREADS", std::to_string(threads)},
                               {"OPENBLAS_NUM_THREADS", std::to_string(threads)},
                               {"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"TORCHELASTIC_RESTART_COUNT", "0"}}) {
      env.push_back(k + "=" + v);
    }
    std::vector<std::string> argv{o.exe};
    argv.insert(argv.end(), o.args.begin(), o.args.end());
    // The terminal's Ctrl-C reaches the launcher, which forwards it once to every rank, so all of
    // them stop at the same step; if the launcher dies, the ranks stop too.
    pid_t pid = -1;
    try {
      pid = spawn_child(o.exe, argv, env, "", "normlab train --nproc");
    } catch (const RuntimeFailure& e) {
      for (int k = 0; k < r; ++k) ::kill(pids[k], SIGKILL);
      throw RuntimeFailure(fmt::format("--nproc: cannot start rank {}: {}", r, e.what()));
    }
    pids[r] = pid;
  }

  bool forwarded = false;
  int first_failed = -1;
  Clock::time_point failed_at = Clock::now();
  bool killed = false;
  int running = W;
  while (running > 0) {
    if (o.stop && o.stop->load() && !forwarded) {
      for (int r = 0; r < W; ++r) {
        if (!status[r]) ::kill(pids[r], SIGINT);
      }
      forwarded = true;
    }
    if (first_failed >= 0 && !killed &&
        Clock::now() - failed_at > std::chrono::duration<double>(o.dist_timeout_s)) {
      for (int r = 0; r < W; ++r) {
        if (!status[r]) {
          spdlog::error("error: normlab train --nproc: rank {} still runs {} s after rank {} failed; killing it",
                        r, o.dist_timeout_s, first_failed);
          ::kill(pids[r], SIGKILL);
        }
      }
      killed = true;
    }
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, WNOHANG);
    if (pid < 0 && errno != EINTR) break;
    if (pid <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    const auto it = std::find(pids.begin(), pids.end(), pid);
    if (it == pids.end()) continue;
    const int r = static_cast<int>(it - pids.begin());
    status[r] = st;
    --running;
    if (!succeeded(st) && !(interrupted(st) && forwarded) && first_failed < 0) {
      first_failed = r;
      failed_at = Clock::now();
    }
  }

  if (first_failed >= 0) {
    const int st = *status[first_failed];
    spdlog::error("error: normlab train --nproc {}: rank {} failed first ({}); the ranks' own messages are above",
                  W, first_failed, describe_status(st));
    return WIFEXITED(st) && WEXITSTATUS(st) != 0 ? WEXITSTATUS(st) : 1;
  }
  for (int r = 0; r < W; ++r) {
    if (!status[r]) {
      spdlog::error("error: normlab train --nproc {}: lost track of rank {} (no exit status)", W, r);
      return 1;
    }
  }
  for (int r = 0; r < W; ++r) {
    if (interrupted(*status[r])) return 130;
  }
  return 0;
}

}  // namespace normlab
