// Resuming a run (src/train/README.md, "Resume"): which checkpoint a start continues, whether the
// config may continue it, and the restore of everything a checkpoint holds into a Trainable and
// its TrainStep. The trainer and `normlab replay` restore through here, one way.
#pragma once

#include <string>

#include "config/config.h"
#include "parallel/comm.h"
#include "train/checkpoint.h"
#include "train/step.h"

namespace normlab {

// "checkpoints/step_<N>" of a checkpoint directory, as messages name it.
std::string checkpoint_label(const std::string& ckpt_dir);

// A resume continues the checkpoint's run: throws ConfigError listing every key of cfg that would
// change the weights' shapes or the data order (train.batch_size may change with the process
// count `world_size` as long as the global batch stays), before anything is written.
void check_resume_config(const Config& cfg, const std::string& ckpt_dir, int64_t world_size);

// Weights, AdamW state, torch's RNG and the step's own state (loss scale, spike baselines) from
// ckpt_dir; returns the checkpoint's TrainState.
TrainState restore_checkpoint(const std::string& ckpt_dir, Trainable& t, TrainStep& step);

// How a process starts: a new run, or a resume from `checkpoint_dir`.
struct StartPoint {
  bool resuming = false;
  std::string checkpoint_dir;
};

// W > 1: rank 0 broadcasts whether it could open the directory and where it starts (`mine`, on
// rank 0); every other rank finds the same checkpoint itself (the directory must be shared) and
// refuses to go on when it sees another one. Returns this rank's start point. Throws on rank != 0
// when rank 0 failed (its error is on its own log).
StartPoint share_start(Comm& comm, const std::string& out_dir, bool resume_requested, bool rank0_failed,
                       const StartPoint& mine);

}  // namespace normlab
