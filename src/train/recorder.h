// The one writer of a run directory (src/train/README.md, run directory): config.yaml, train.log,
// metrics.jsonl (and metrics.csv), checkpoints and spike forensics. A run has one, on the process
// that records (rank 0 of W); the other ranks have none and write nothing.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "config/config.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/log.h"
#include "metrics/sink.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"

namespace normlab {

class Recorder {
 public:
  // Takes cfg.out_dir for this object's life (run.lock), removes what an interrupted writer left
  // half-done and decides, writing nothing the run reads, whether this is a fresh start, a
  // start-over (a run that died before its first checkpoint) or, with `resume`, a resume.
  // Throws UsageError when the directory holds a run and resume is false, or holds nothing to resume.
  Recorder(const Config& cfg, bool resume);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  bool resuming() const { return resuming_; }
  const std::string& checkpoint_dir() const { return checkpoint_dir_; }  // the one a resume loads

  // Once everything is checked: clears a start-over's files, writes config.yaml, adds this start to
  // machine.json (where the run ran: host, CPU, `device`, LibTorch, commit), starts train.log and
  // the metrics files (a resume keeps the records of the steps before `resume_step`).
  void start(int64_t resume_step, const torch::Device& device);
  void record(const std::string& json_record);  // one line of metrics.jsonl (metrics/records.h's to_json)
  // spikes/step_<N>.json, written atomically.
  void spike_forensics(int64_t step, const std::string& json);
  // checkpoints/step_<N> with the config written at start(), atomically; LATEST names it.
  void checkpoint(Transformer& model, const Optimizer* optimizer, const TrainState& state);
  // Throws RuntimeFailure when a write to train.log failed.
  void check_log() const;

 private:
  Config cfg_;
  std::unique_ptr<DirectoryLock> lock_;  // declared before every writer, so released after them
  bool resuming_ = false, starting_over_ = false;
  std::string checkpoint_dir_;
  std::string config_yaml_;
  std::map<std::string, std::string> tokenizer_metadata_;  // tokenizer, tokenizer_sha256
  std::unique_ptr<LogFile> log_file_;
  std::unique_ptr<MetricsSink> sink_;
};

}  // namespace normlab
