#include "train/resume.h"

#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "config/load.h"
#include "core/errors.h"
#include "core/fs.h"
#include "train/run_config.h"

namespace normlab {
namespace fs = std::filesystem;

std::string checkpoint_label(const std::string& ckpt_dir) {
  return "checkpoints/" + fs::path(ckpt_dir).filename().string();
}

void check_resume_config(const Config& cfg, const std::string& ckpt_dir, int64_t world_size) {
  const std::string where = ckpt_dir + "/model.safetensors";
  Config saved = check_and_resolve(parse_config_text(checkpoint_config(ckpt_dir), where), /*check_data_files=*/false);
  std::error_code ec;
  if (saved.data.train.size() == cfg.data.train.size()) {
    bool same = true;  // the same files, some reached by another path
    for (size_t i = 0; i < saved.data.train.size() && same; ++i) {
      same = saved.data.train[i] == cfg.data.train[i] || fs::equivalent(saved.data.train[i], cfg.data.train[i], ec);
    }
    if (same) saved.data.train = cfg.data.train;
  }
  const auto was = flat_values(saved), now = flat_values(cfg);
  const std::string label = checkpoint_label(ckpt_dir);
  std::vector<std::string> problems;
  // train.batch_size is per process: any world size that keeps the global batch may resume.
  const int64_t saved_world = checkpoint_world_size(ckpt_dir);
  const int64_t saved_global = saved.train.batch_size * saved_world, global = cfg.train.batch_size * world_size;
  for (size_t i = 0; i < now.size(); ++i) {
    if (now[i].first == "train.batch_size") {
      if (global == saved_global) continue;
      problems.push_back(fmt::format(
          "{}: --resume: train.batch_size: is {} but the run has {} ({}): the global batch (batch_size x "
          "processes) would be {} x {} = {} instead of {} x {} = {}; batch_size and the process count "
          "may change only together", cfg.out_dir, cfg.train.batch_size, saved.train.batch_size, label,
          cfg.train.batch_size, world_size, global, saved.train.batch_size, saved_world, saved_global));
      continue;
    }
    if (now[i].second == was[i].second || may_change_on_resume(now[i].first)) continue;
    problems.push_back(fmt::format("{}: --resume: {}: is {} but the run has {} ({}); only these keys may change on "
                                   "resume: {}", cfg.out_dir, now[i].first, now[i].second, was[i].second, label,
                                   keys_that_may_change_on_resume()));
  }
  if (!problems.empty()) throw ConfigError(problems);
}

TrainState restore_checkpoint(const std::string& ckpt_dir, Trainable& t, TrainStep& step) {
  TrainState state;
  load_model_weights(ckpt_dir, t.model);
  load_trainer_state(ckpt_dir, *t.optimizer, state);
  set_torch_rng_state_hex(state.torch_rng);
  step.restore(state);
  return state;
}

StartPoint share_start(Comm& comm, const std::string& out_dir, bool resume_requested, bool rank0_failed,
                       const StartPoint& mine) {
  auto ckpt_step = [](const std::string& dir) -> int64_t {
    return dir.empty() ? -1 : std::stoll(fs::path(dir).filename().string().substr(5));
  };
  std::vector<torch::Tensor> v{torch::tensor({int64_t{rank0_failed}, int64_t{mine.resuming}, ckpt_step(mine.checkpoint_dir)})};
  comm.broadcast(v, 0);
  if (comm.rank() == 0) return mine;
  if (v[0][0].item<int64_t>() != 0) {
    throw UsageError(fmt::format("rank {}: rank 0 could not start the run (its error is above)", comm.rank()));
  }
  StartPoint here;
  here.resuming = resume_requested && file_exists((fs::path(out_dir) / "checkpoints" / "LATEST").string());
  if (here.resuming) here.checkpoint_dir = find_checkpoint(out_dir, std::nullopt);
  if (v[0][1].item<int64_t>() != int64_t{here.resuming} || v[0][2].item<int64_t>() != ckpt_step(here.checkpoint_dir)) {
    throw RuntimeFailure(fmt::format(
        "rank {}: {} shows this rank {} but rank 0 {}; every rank must see the same run directory "
        "(a filesystem all of them share)", comm.rank(), out_dir,
        here.resuming ? "checkpoint " + checkpoint_label(here.checkpoint_dir) : std::string("no checkpoint"),
        v[0][1].item<int64_t>() ? fmt::format("resumes from step {}", v[0][2].item<int64_t>())
                                : std::string("starts a new run")));
  }
  return here;
}

}  // namespace normlab
