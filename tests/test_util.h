// Shared test helpers: temporary directories, a tiny fast config, running the CLI binary.
#pragma once

#include <atomic>
#include <unistd.h>

#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <fstream>
#include <filesystem>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/load.h"
#include "core/errors.h"
#include "core/torch.h"
#include "model/transformer.h"
#include "train/checkpoint.h"
#include "train/run_config.h"

namespace normlab::testing {

inline std::string source_dir() { return NORMLAB_SOURCE_DIR; }

// A config checked and resolved as `normlab train` does it (its data files checked too).
inline Config resolved(Config c) { return check_and_resolve(LoadedConfig{c, {}}, /*check_data_files=*/true); }

// Every problem the config checks find in a YAML text with overrides, one line each (none: empty).
inline std::vector<std::string> config_problems(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    check_and_resolve(parse_config_text(yaml, "cfg.yaml", overrides, /*collect=*/true), /*check_data_files=*/false);
  } catch (const ConfigError& e) {
    return e.problems();
  }
  return {};
}

// Creates the directories above a file's path (none for a bare file name).
inline void make_parent_dirs(const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
}

// Writes a text file (its directory created first).
inline void write_text(const std::string& path, const std::string& text) {
  make_parent_dirs(path);
  std::ofstream(path) << text;
}

// Writes one line per string (its directory created first).
inline void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  make_parent_dirs(path);
  std::ofstream f(path);
  for (const auto& l : lines) f << l << "\n";
}

// The weights of a run's last checkpoint.
inline NamedTensors final_weights(const std::string& run, const Config& c) {
  Transformer m(c.model);
  load_model_weights(find_checkpoint(run, std::nullopt), m);
  return model_tensors(m);
}

// Largest absolute difference relative to the reference's largest magnitude: elementwise relative
// error is meaningless for outputs and gradients that cross zero.
inline double max_rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  auto ad = a.detach().to(torch::kDouble), bd = b.detach().to(torch::kDouble);
  const double scale = std::max(bd.abs().max().item<double>(), 1e-30);
  return (ad - bd).abs().max().item<double>() / scale;
}

// A fresh, empty directory under /tmp, removed when the object dies.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "normlab_test_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Small enough to train a few dozen steps in seconds on one thread.
inline Config tiny_config(const std::string& out_dir) {
  Config c;
  c.out_dir = out_dir;
  c.data.train = {source_dir() + "/data/toy/train.txt"};
  c.data.val = {source_dir() + "/data/toy/val.txt"};
  c.model.ctx = 32;
  c.model.d_model = 32;
  c.model.n_layers = 2;
  c.model.n_heads = 2;
  c.model.d_ff = 64;
  c.optim.warmup = 5;
  c.optim.lr = 3e-3;
  c.train.steps = 20;
  c.train.batch_size = 4;
  c.train.log_every = 1;
  c.train.checkpoint_every = 10;
  c.train.threads = 1;
  c.eval.every = 10;
  c.eval.max_windows = 8;
  return c;
}

// c under parametrization `type`, off its base shape so that every multiplier is live: base width
// d/2 (m_N = 2) where the entry reads base_width, base depth L/2 (m_L = 2) where it reads
// base_depth (mup: the first, completep: both, sp: neither).
inline void off_base_shape(Config& c, const std::string& type) {
  c.param.type = type;
  const ParametrizationType* t = find_parametrization(type);
  if (t && t->reads_key("base_width")) c.param.base_width = c.model.d_model / 2.0;
  if (t && t->reads_key("base_depth")) c.param.base_depth = c.model.n_layers / 2.0;
}

// The registered parametrizations other than the default (sp): the ones a registry-wide test
// trains off their base shape.
inline std::vector<std::string> non_default_parametrizations() {
  std::vector<std::string> out;
  for (const auto& t : parametrization_registry()) {
    if (t.name != ParamConfig{}.type) out.push_back(t.name);
  }
  return out;
}

struct CommandResult {
  int status = -1;
  std::string out;  // stdout only
};

// Runs a shell command line; stdout captured, stderr to the given file (or discarded).
// Child processes this test process started through run_command (the unit tier's guard reads it).
inline std::atomic<int64_t>& commands_run() {
  static std::atomic<int64_t> n{0};
  return n;
}

inline CommandResult run_command(const std::string& cmd, const std::string& stderr_file = "/dev/null") {
  ++commands_run();
  CommandResult r;
  std::FILE* p = ::popen((cmd + " 2>" + stderr_file).c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline std::string normlab_binary() { return NORMLAB_BINARY; }

// The records of one kind ("train", "eval", "spike") from a run's metrics.jsonl, in order.
inline std::vector<YAML::Node> records(const std::string& run, const std::string& kind) {
  std::vector<YAML::Node> out;
  std::ifstream in(run + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    YAML::Node r = YAML::Load(line);
    if (r["kind"].as<std::string>() == kind) out.push_back(r);
  }
  return out;
}

}  // namespace normlab::testing
