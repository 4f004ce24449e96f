// `normlab sweep`: runs every point of a sweep as a child process (`normlab train` into
// <sweep>/runs/<name>), several at a time with the cores split between them. A re-run skips
// points recorded done or diverged, resumes points that have a checkpoint and restarts the rest;
// a point that fails is recorded and the sweep goes on. Ctrl-C is forwarded to the children
// (they checkpoint and exit 130). summary.csv / summary.json / summary.md are rewritten after
// every point. A tuned sweep runs in two phases: its search points, then, once every search point
// has finished (in the whole sweep directory, whichever process ran it), the selection and the
// confirm points it names.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "sweep/sweep_points.h"

namespace normlab {

// `--shard i/n`: the points whose index (expand_sweep's order) is i mod n. Several shards, on one
// machine or on machines sharing the sweep directory, may run at once: each point is claimed by
// one sweep process (<sweep>/claims/<name>.lock) for as long as it trains.
struct SweepShard {
  int index = 0;
  int count = 1;
  bool has(size_t point) const { return static_cast<int>(point % count) == index; }
  bool whole() const { return count == 1; }
};
// "i/n" with 0 <= i < n; UsageError naming --shard otherwise.
SweepShard parse_shard(const std::string& text);

// The names of the shard's points, in order, one per line (`normlab sweep --list`); a tuned
// sweep's search points, then its confirm points once its search has finished in out_dir.
std::string list_points(const Sweep& sweep, const SweepShard& shard);

struct SweepRunOptions {
  int jobs = 1;                             // child processes at a time
  SweepShard shard;
  std::string exe = "/proc/self/exe";       // the normlab binary the children run
  const std::atomic<bool>* stop = nullptr;  // set asynchronously (SIGINT): forward, then wind down
};

// A tuned sweep's exit status when this process's points are finished but search points of other
// shards or processes are not: the confirm phase cannot start yet (run the command again later);
// likewise when a tune.fit_extend walk waits for confirm runs another process has not finished.
constexpr int kSearchIncomplete = 3;

// Validates every point first (ConfigError, nothing written), refuses a sweep directory whose
// runs (of this shard) were made from different configs (UsageError), then runs the shard's points.
// Returns 0 when each of them is done, diverged or being run by another sweep process, 1 when any
// failed, 130 after Ctrl-C, kSearchIncomplete as above.
int run_sweep(const Sweep& sweep, const SweepRunOptions& options);

// Threads per child: the machine's cores split evenly, at least one.
int threads_per_job(int jobs);

// What `normlab sweep` warns of before it runs anything: runs already in the sweep directory
// (finished, or begun and to be resumed; `run_dirs`) that ran, wholly or in part, on another CPU
// than `here` (machine.json's cpu; core/system.h's cpu_description). What runs now would be
// compared with them across machines (the tuned summary's mixed_machines). "" when none did;
// runs without a machine.json (older ones) are not counted.
std::string other_machines_warning(const std::vector<std::string>& run_dirs, const std::string& here);

}  // namespace normlab
