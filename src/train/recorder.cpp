#include "train/recorder.h"

#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/load.h"
#include "core/errors.h"
#include "core/sha256.h"
#include "core/system.h"
#include "core/torch_compat.h"
#include "metrics/records.h"

namespace normlab {
namespace fs = std::filesystem;

Recorder::Recorder(const Config& cfg, bool resume) : cfg_(cfg) {
  const fs::path out(cfg_.out_dir);
  if (resume && !fs::is_directory(out)) {
    throw UsageError(fmt::format("{}: nothing to resume (no such directory)", cfg_.out_dir));
  }
  fs::create_directories(out);
  lock_ = std::make_unique<DirectoryLock>(
      (out / "run.lock").string(),
      fmt::format("{}: another normlab train is writing to this run directory (run.lock is held)", cfg_.out_dir));
  // Under the lock nobody else writes here: what an interrupted writer left half-done goes.
  const fs::path ckpts = out / "checkpoints";
  remove_stale_temporaries(out.string());
  remove_stale_temporaries(ckpts.string());
  remove_stale_temporaries((out / "spikes").string());
  if (fs::is_directory(ckpts)) {
    for (const auto& e : fs::directory_iterator(ckpts)) {
      const std::string n = e.path().filename().string();
      if (n.size() > 5 && n[0] == '.' && n.compare(n.size() - 4, 4, ".tmp") == 0) fs::remove_all(e.path());
    }
  }
  const bool has_checkpoint = file_exists((ckpts / "LATEST").string());
  const bool has_files = file_exists((out / "metrics.jsonl").string()) ||
                         file_exists((out / "config.yaml").string()) || fs::exists(ckpts);
  if (!resume && has_checkpoint) {
    throw UsageError(fmt::format("{}: already holds a run; pass --resume to continue it or --out "
                                 "DIR to start a new one", cfg_.out_dir));
  }
  if (resume && !has_checkpoint && !has_files) {
    throw UsageError(fmt::format("{}: nothing to resume (no checkpoints/LATEST)", cfg_.out_dir));
  }
  resuming_ = resume && has_checkpoint;
  starting_over_ = !resuming_ && has_files;
  if (resuming_) checkpoint_dir_ = find_checkpoint(cfg_.out_dir, std::nullopt);
}

Recorder::~Recorder() = default;

void Recorder::start(int64_t resume_step, const torch::Device& device) {
  const fs::path out(cfg_.out_dir);
  if (starting_over_) {
    // A start that died before its first checkpoint: nothing in it can be continued.
    for (const char* f : {"metrics.jsonl", "metrics.csv"}) fs::remove(out / f);
    fs::remove_all(out / "checkpoints");
    fs::remove_all(out / "spikes");
  }
  config_yaml_ = dump_config(cfg_);
  const std::string cfg_path = (out / "config.yaml").string();
  const bool config_changed = resuming_ && file_exists(cfg_path) && read_file(cfg_path) != config_yaml_;
  write_file_atomic(cfg_path, config_yaml_);
  // A start-over's or a fresh run's machine.json begins anew; a resume appends its start.
  std::vector<MachineRecord> machines = resuming_ ? read_machines(cfg_.out_dir) : std::vector<MachineRecord>{};
  machines.push_back(MachineRecord{resuming_ ? resume_step : 0, host_name(), cpu_description(),
                                   device_description(device), torch_build_description(), normlab_commit()});
  write_file_atomic((out / "machine.json").string(), machine_json(machines));
  log_file_ = std::make_unique<LogFile>((out / "train.log").string());
  if (starting_over_) {
    spdlog::warn("warning: {} holds a run that stopped before its first checkpoint; starting it over",
                 cfg_.out_dir);
  }
  if (config_changed) {
    spdlog::warn("warning: config differs from the one the run started with; {} is replaced", cfg_path);
  }
  sink_ = std::make_unique<MetricsSink>((out / "metrics.jsonl").string(), resuming_ ? resume_step : -1,
                                        cfg_.diag.csv ? (out / "metrics.csv").string() : "",
                                        (out / "tensorboard").string(), cfg_.model.n_layers);
}

void Recorder::record(const std::string& rec) {
  if (sink_) sink_->write(rec);
}

void Recorder::spike_forensics(int64_t step, const std::string& forensics) {
  const fs::path dir = fs::path(cfg_.out_dir) / "spikes";
  fs::create_directories(dir);
  write_file_atomic((dir / fmt::format("step_{:08d}.json", step)).string(), forensics + "\n");
}

void Recorder::checkpoint(Transformer& model, const Optimizer* optimizer, const TrainState& state) {
  // The tokenizer the tokens mean something under: its path and SHA-256 with the weights, so a later
  // `sample` or `eval` can tell when the model file changed (read once, at the first checkpoint).
  if (!cfg_.data.tokenizer.empty() && tokenizer_metadata_.empty()) {
    tokenizer_metadata_ = {{"tokenizer", cfg_.data.tokenizer}, {"tokenizer_sha256", sha256_file_hex(cfg_.data.tokenizer)}};
  }
  save_checkpoint(cfg_.out_dir, model, optimizer, state, config_yaml_, tokenizer_metadata_);
}

void Recorder::check_log() const {
  if (log_file_) log_file_->check();
}

}  // namespace normlab
