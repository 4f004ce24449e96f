// `normlab sweep`: runs every point of a sweep as a child process (`normlab train` into
// <sweep>/runs/<name>), several at a time with the cores split between them. A re-run skips
// points recorded done or diverged, resumes points that have a checkpoint and restarts the rest;
// a point that fails is recorded and the sweep goes on. Ctrl-C is forwarded to the children
// (they checkpoint and exit 130). summary.csv / summary.md are rewritten after every point.
#pragma once

#include <atomic>
#include <string>

#include "sweep/sweep_config.h"

namespace normlab {

struct SweepRunOptions {
  int jobs = 1;                             // child processes at a time
  std::string exe = "/proc/self/exe";       // the normlab binary the children run
  const std::atomic<bool>* stop = nullptr;  // set asynchronously (SIGINT): forward, then wind down
};

// Validates every point first (ConfigError, nothing written), refuses a sweep directory whose
// runs were made from different configs (UsageError), then runs. Returns 0 when every point is
// done or diverged, 1 when any failed, 130 after Ctrl-C.
int run_sweep(const Sweep& sweep, const SweepRunOptions& options);

// Threads per child: the machine's cores split evenly, at least one.
int threads_per_job(int jobs);

}  // namespace normlab
