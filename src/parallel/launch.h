// `normlab train --nproc W`: W local ranks of this binary, started and watched the way torchrun
// would (src/parallel/README.md), so one command trains data-parallel on one machine.
#pragma once

#include <atomic>
#include <string>
#include <vector>

namespace normlab {

struct LaunchOptions {
  int nproc = 2;
  std::vector<std::string> args;  // the rank's command line after the program name (no --nproc)
  int64_t threads = 0;            // train.threads: 0 = this machine's cores split between the ranks
  double dist_timeout_s = 300;    // train.dist_timeout: how long ranks may outlive a failed one
  const std::atomic<bool>* stop = nullptr;  // Ctrl-C: forwarded once to every rank
  std::string exe = "/proc/self/exe";
};

// Starts the ranks with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a
// free MASTER_PORT, each in its own process group, and waits for all of them. Returns 0 when every
// rank succeeded, 130 when the run was interrupted, else the first failing rank's status (after
// one line naming it); ranks still running dist_timeout_s after a failure are killed.
int launch_local_ranks(const LaunchOptions& options);

// A TCP port on 127.0.0.1 that nothing listens on right now.
int free_local_port();

}  // namespace normlab
