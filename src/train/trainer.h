// The training loop (src/train/README.md and src/metrics/README.md): AdamW with decay groups, warmup + decay schedule,
// global-norm clipping, gradient accumulation, periodic evaluation, atomic checkpoints, exact
// resume, and metrics.jsonl records. Ctrl-C (SIGINT) finishes the current update, writes a
// checkpoint and returns kInterrupted.
#pragma once

#include <atomic>

#include "config/config.h"

namespace normlab {

constexpr int kInterrupted = 130;

struct RunData;

struct TrainOptions {
  bool resume = false;
  // The data load_run_config loaded while checking (moved from; nullptr: the trainer loads it).
  RunData* data = nullptr;
  const std::atomic<bool>* stop = nullptr;  // set asynchronously (SIGINT) to stop after this update
};

// Trains cfg (checked and resolved by load_run_config). Returns 0 when all steps are done,
// kInterrupted after a requested stop. Throws UsageError / RuntimeFailure.
int train(const Config& cfg, const TrainOptions& options);

// Sets LibTorch's intra-op threads from train.threads (0 = all cores), and flushes subnormal floats
// to zero on them (FTZ + DAZ, where the CPU has them).
void configure_threads(int64_t threads);

}  // namespace normlab
