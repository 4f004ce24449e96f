// normlab: the command line (MODEL.md section 10). CLI11 wiring only: every command is a call
// into train/, with errors mapped to exit codes here (2 usage/config/input, 1 runtime failure).
#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <random>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/norm_bench.h"
#include "config/load.h"
#include "core/errors.h"
#include "core/json.h"
#include "core/log.h"
#include "core/system.h"
#include "core/torch_compat.h"
#include "data/corpus.h"
#include "dist/comm.h"
#include "dist/launch.h"
#include "metrics/report.h"
#include "model/transformer.h"
#include "sweep/runner.h"
#include "sweep/summary.h"
#include "train/bench.h"
#include "train/checkpoint.h"
#include "train/device.h"
#include "train/evaluate.h"
#include "train/run_config.h"
#include "train/trainer.h"

namespace normlab {
namespace {

std::atomic<bool> g_stop{false};

constexpr int64_t kMaxNewTokens = 1000000;  // sample --max-new: hours on a CPU, far beyond any use

extern "C" void on_sigint(int) {
  g_stop.store(true);
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C kills at once
}

// train: SIGTERM (Slurm's time limit, scancel, torchrun stopping its workers) stops as Ctrl-C does,
// with a checkpoint; a second one kills.
extern "C" void on_sigterm(int) {
  g_stop.store(true);
  std::signal(SIGTERM, SIG_DFL);
}

// A model from a run directory's checkpoint, in eval mode, with its config.
struct LoadedModel {
  Config config;
  Transformer model{nullptr};
  std::string checkpoint;
};

// Checkpoints hold CPU float32 tensors; the model is moved to `device` after loading, so a
// checkpoint written on a GPU evaluates on a CPU and the other way round.
LoadedModel load_run_model(const std::string& run, std::optional<int64_t> step, const torch::Device& device) {
  LoadedModel lm;
  lm.checkpoint = find_checkpoint(run, step);
  lm.config = check_and_resolve(parse_config_text(checkpoint_config(lm.checkpoint),
                                                  lm.checkpoint + "/model.safetensors"),
                                /*check_data_files=*/false);
  lm.model = Transformer(lm.config.model);
  load_model_weights(lm.checkpoint, lm.model);
  lm.model->to(device);
  lm.model->eval();
  return lm;
}

int cmd_eval(const std::string& run, std::optional<int64_t> step, std::string data, const std::string& device_name) {
  const torch::Device device = resolve_device(device_name, "--device");
  auto lm = load_run_model(run, step, device);
  if (data.empty()) data = lm.config.data.val;
  Corpus corpus = Corpus::load(data);
  if (corpus.max_token() >= lm.config.model.vocab_size) {
    throw UsageError(fmt::format("{}: holds token {} >= the model's vocab_size {}", data,
                                 corpus.max_token(), lm.config.model.vocab_size));
  }
  auto r = evaluate(lm.model, corpus, lm.config.eval.max_windows, device);
  std::cout << JsonObject().add("loss", r.loss).add("windows", r.windows).add("tokens", r.tokens).str()
            << std::endl;
  return 0;
}

int cmd_sample(const std::string& run, std::optional<int64_t> step, const std::string& prompt,
               int64_t max_new, double temperature, int64_t top_k, uint64_t seed, const std::string& device_name) {
  if (!std::isfinite(temperature) || temperature < 0) {
    throw UsageError(fmt::format("--temperature: expected a finite number >= 0, got {}", temperature));
  }
  if (top_k < 0) throw UsageError("--top-k must be >= 0");
  if (max_new > kMaxNewTokens) {
    throw UsageError(fmt::format("--max-new: at most {} tokens, got {}", kMaxNewTokens, max_new));
  }
  const torch::Device device = resolve_device(device_name, "--device");
  auto lm = load_run_model(run, step, device);
  const int64_t V = lm.config.model.vocab_size, ctx = lm.config.model.ctx;
  std::vector<int64_t> tokens;
  for (unsigned char c : prompt) {
    if (c >= V) throw UsageError(fmt::format("--prompt: byte {} is outside the model's vocabulary of {}", c, V));
    tokens.push_back(c);
  }
  if (tokens.empty()) throw UsageError("--prompt must not be empty");
  std::mt19937_64 rng(seed);
  torch::NoGradGuard ng;
  std::signal(SIGINT, on_sigint);
  // Each token is written as soon as it exists: a long generation shows progress, and Ctrl-C
  // stops after the current token with everything generated so far on stdout.
  for (int64_t i = 0; i < max_new; ++i) {
    if (g_stop.load()) {
      std::cout << std::flush;
      return kInterrupted;
    }
    const int64_t start = std::max<int64_t>(0, static_cast<int64_t>(tokens.size()) - ctx);
    auto input = torch::tensor(std::vector<int64_t>(tokens.begin() + start, tokens.end())).unsqueeze(0).to(device);
    // the last position's logits, read back once per token (sampling happens on the host)
    auto logits = lm.model->forward(input).select(1, input.size(1) - 1).squeeze(0).to(torch::kCPU, torch::kDouble);
    int64_t next;
    if (temperature == 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      auto l = logits / temperature;
      if (top_k > 0 && top_k < V) {
        auto kth = std::get<0>(l.topk(top_k)).min();
        l = l.masked_fill(l < kth, -std::numeric_limits<double>::infinity());
      }
      auto p = torch::softmax(l, 0).contiguous();
      const double* pp = p.data_ptr<double>();
      std::uniform_real_distribution<double> u(0.0, 1.0);
      double r = u(rng), acc = 0;
      next = V - 1;
      for (int64_t v = 0; v < V; ++v) {
        acc += pp[v];
        if (r < acc) {
          next = v;
          break;
        }
      }
    }
    tokens.push_back(next);
    if (V <= 256) {
      std::cout << static_cast<char>(next) << std::flush;
    } else {
      std::cout << fmt::format("<{}>", next) << std::flush;
    }
    if (!std::cout) throw RuntimeFailure("cannot write the generated bytes to stdout");
  }
  return 0;
}

int run_cli(int argc, char** argv) {
  CLI::App app{"NormLab: train small GPT-style models and study their normalization layers"};
  app.require_subcommand(1);

  std::string config_path, out_dir;
  std::vector<std::string> overrides;
  bool resume = false;
  auto* train_cmd = app.add_subcommand("train", "train a model from a YAML config");
  train_cmd->add_option("-c,--config", config_path, "YAML config file")->required();
  train_cmd->add_option("--set", overrides, "override a key: --set model.n_layers=6 (value is YAML)");
  auto* out_opt = train_cmd->add_option("--out", out_dir, "run directory (overrides out_dir)");
  train_cmd->add_flag("--resume", resume, "continue the run in out_dir from its latest checkpoint");
  int nproc = 0;
  train_cmd->add_option("--nproc", nproc, "train data-parallel with this many local processes (c10d Gloo); "
                                          "train.batch_size is per process")
      ->check(CLI::Range(1, 1024));

  std::string run_dir, data_file, prompt, device_name = "cpu";
  std::optional<int64_t> step;
  auto* eval_cmd = app.add_subcommand("eval", "validation loss of a checkpoint (one JSON line on stdout)");
  eval_cmd->add_option("--run", run_dir, "run directory")->required();
  eval_cmd->add_option("--step", step, "checkpoint step (default: LATEST)");
  eval_cmd->add_option("--data", data_file, "data file (default: the run's data.val)");
  eval_cmd->add_option("--device", device_name, "cpu, cuda or cuda:N")->capture_default_str();

  int64_t max_new = 256, top_k = 0;
  double temperature = 1.0;
  uint64_t seed = 0;
  auto* sample_cmd = app.add_subcommand("sample", "generate bytes from a checkpoint (stdout: the generated bytes only)");
  sample_cmd->add_option("--run", run_dir, "run directory")->required();
  sample_cmd->add_option("--step", step, "checkpoint step (default: LATEST)");
  sample_cmd->add_option("--prompt", prompt, "prompt text")->required();
  sample_cmd->add_option("--max-new", max_new, "tokens to generate")->check(CLI::NonNegativeNumber);
  sample_cmd->add_option("--temperature", temperature, "0 = greedy argmax");
  sample_cmd->add_option("--top-k", top_k, "sample from the k most likely tokens; 0 = all");
  sample_cmd->add_option("--seed", seed, "sampling seed");
  sample_cmd->add_option("--device", device_name, "cpu, cuda or cuda:N")->capture_default_str();

  auto* keys_cmd = app.add_subcommand("keys", "list every config key with its default and meaning");

  bool as_json = false;
  int64_t bench_steps = 20, bench_warmup = 5, bench_threads = -1;
  auto* bench_cmd = app.add_subcommand(
      "bench", "time the training step of a config (speed, MFU, memory); `bench norms` for the norm kernels");
  bench_cmd->add_option("-c,--config", config_path, "YAML config file");
  bench_cmd->add_option("--set", overrides, "override a key, as for train");
  bench_cmd->add_option("--steps", bench_steps, "timed steps")->check(CLI::PositiveNumber);
  bench_cmd->add_option("--warmup", bench_warmup, "untimed warm-up steps")->check(CLI::NonNegativeNumber);
  bench_cmd->add_option("--threads", bench_threads, "LibTorch threads (default: train.threads)");
  bench_cmd->add_flag("--json", as_json, "one JSON line instead of the table");
  std::string bench_profile;
  bool bench_diag = false;
  bench_cmd->add_flag("--diag", bench_diag,
                      "make every step a full-diagnostics step (as diag.every: 1); default: none is");
  bench_cmd->add_option("--profile", bench_profile,
                        "write a LibTorch profiler trace (chrome://tracing) of the timed steps to this file");
  NormBenchOptions bench_norms_opts;
  auto* bench_norms_cmd = bench_cmd->add_subcommand(
      "norms", "forward+backward of every norm, as a ratio to LibTorch's native layer_norm");
  bench_norms_cmd->add_option("--rows", bench_norms_opts.rows, "row counts (B*T), comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  bench_norms_cmd
      ->add_option("--widths", bench_norms_opts.widths, "normalised widths, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  bench_norms_cmd->add_option("--warmup", bench_norms_opts.warmup, "untimed rounds")
      ->capture_default_str();
  bench_norms_cmd
      ->add_option("--repeats", bench_norms_opts.repeats, "timed rounds (median reported)")
      ->capture_default_str();
  bench_norms_cmd
      ->add_option("--threads", bench_norms_opts.threads, "intra-op threads; 0 = all cores")
      ->capture_default_str();
  bench_norms_cmd->add_option("--device", bench_norms_opts.device, "cpu, cuda or cuda:N")
      ->capture_default_str();
  bench_norms_cmd->add_option("--dtype", bench_norms_opts.dtype, "input dtype: fp32 or bf16 (parameters stay fp32)")
      ->capture_default_str();
  SweepOptions sweep_opts;
  SweepRunOptions sweep_run;
  auto* sweep_cmd = app.add_subcommand(
      "sweep", "run a sweep file's points (axes x seeds) as parallel training runs, then summarise them");
  sweep_cmd->add_option("-c,--config", config_path, "sweep YAML file (configs/sweeps/*.yaml)")->required();
  sweep_cmd->add_option("--jobs", sweep_run.jobs, "training processes at a time (cores split between them)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sweep_cmd->add_flag("--quick", sweep_opts.quick, "apply the sweep file's quick: section (minutes)");
  sweep_cmd->add_option("--set", sweep_opts.sets, "override a key in every point: --set train.steps=100");
  sweep_cmd->add_option("--out", sweep_opts.out_dir, "sweep directory (overrides out_dir)");
  std::string shard_text;
  bool list_only = false;
  sweep_cmd->add_option("--shard", shard_text,
                        "i/n: run only the points whose index is i mod n (Slurm array, several machines)");
  sweep_cmd->add_flag("--list", list_only, "print the points' names (of --shard's points), one per line");

  auto* report_cmd = app.add_subcommand(
      "report", "summary of a run (losses, spikes, per-layer gradient profile) or of a sweep directory (its table)");
  report_cmd->add_option("run", run_dir, "run or sweep directory")->required();
  report_cmd->add_flag("--json", as_json, "the same as one JSON object");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help on stdout, errors on stderr
    return code == 0 ? 0 : 2;
  }

  if (*train_cmd) {
    if (out_opt->count() > 0) {
      if (out_dir.empty()) throw UsageError("--out: must name a directory, got an empty string");
      overrides.push_back("out_dir=" + out_dir);
    }
    Config cfg = load_run_config(config_path, overrides);
    std::signal(SIGINT, on_sigint);
    std::signal(SIGTERM, on_sigterm);
    if (nproc > 1) {
      if (dist_env_from_environment().distributed()) {
        throw UsageError("--nproc: WORLD_SIZE is already set (a launcher such as torchrun started this "
                         "process); use one or the other");
      }
      if (!have_gloo()) throw UsageError("--nproc: this normlab was built without c10d's Gloo (install libgloo-dev and rebuild)");
      LaunchOptions lo;
      lo.nproc = nproc;
      for (int i = 1; i < argc; ++i) {  // the same command line without --nproc
        const std::string a = argv[i];
        if (a == "--nproc") {
          ++i;
        } else if (a.rfind("--nproc=", 0) != 0) {
          lo.args.push_back(a);
        }
      }
      lo.threads = cfg.train.threads;
      lo.dist_timeout_s = cfg.train.dist_timeout;
      lo.stop = &g_stop;
      return launch_local_ranks(lo);
    }
    TrainOptions opts;
    opts.resume = resume;
    opts.stop = &g_stop;
    return train(cfg, opts);
  }
  if (*eval_cmd) return cmd_eval(run_dir, step, data_file, device_name);
  if (*sample_cmd) return cmd_sample(run_dir, step, prompt, max_new, temperature, top_k, seed, device_name);
  if (*bench_norms_cmd) {
    std::cout << format_norm_bench(run_norm_bench(bench_norms_opts)) << std::flush;
    return 0;
  }
  if (*bench_cmd) {
    if (config_path.empty()) throw UsageError("bench: -c CONFIG is required (or use `normlab bench norms`)");
    if (bench_threads >= 0) overrides.push_back("train.threads=" + std::to_string(bench_threads));
    Config cfg = load_run_config(config_path, overrides);
    auto r = bench_training(cfg, config_path, bench_warmup, bench_steps, bench_profile, bench_diag);
    std::cout << (as_json ? bench_json(r) : bench_text(r)) << std::flush;
    return 0;
  }
  if (*sweep_cmd) {
    const Sweep sweep = parse_sweep_file(config_path, sweep_opts);
    if (sweep_cmd->count("--shard") > 0) sweep_run.shard = parse_shard(shard_text);
    if (list_only) {
      std::cout << list_points(sweep, sweep_run.shard) << std::flush;
      return 0;
    }
    std::signal(SIGINT, on_sigint);
    sweep_run.stop = &g_stop;
    return run_sweep(sweep, sweep_run);
  }
  if (*report_cmd && is_sweep_dir(run_dir)) {
    const SweepSummary summary = load_sweep_summary(run_dir);
    std::cout << (as_json ? summary_json(summary) : summary_markdown(summary)) << std::flush;
    return 0;
  }
  if (*report_cmd) {
    std::cout << (as_json ? report_json(run_dir) : report_text(run_dir)) << std::flush;
    return 0;
  }
  if (*keys_cmd) {
    std::cout << describe_keys();
    std::cout << "\nmodel.norm.type:";
    for (const auto& n : norm_registry()) std::cout << fmt::format("\n  {:<12} {}", n.name, n.formula);
    std::cout << "\nmodel.layout:";
    for (const auto& l : layout_registry()) std::cout << fmt::format("\n  {:<12} {}", l.name, l.equation);
    std::cout << std::endl;
    return 0;
  }
  return 2;
}

// The thread policy measured on 2-core machines: nobody may spin while another pool needs the
// core. With the OpenMP build of OpenBLAS (linked first, third_party/dependencies.cmake) there is
// one pool: GEMMs, LibTorch's ops and NormLab's kernels all run on libgomp's workers, whose default
// wait (spin briefly, then sleep) is the fastest setting measured, so nothing is changed. The same
// holds for a pip LibTorch, whose MKL runs on libgomp as well.
// With OpenBLAS's pthread build there are two pools on the same cores: LibTorch's OpenMP workers
// must sleep between parallel regions (OMP_WAIT_POLICY=passive), and OpenBLAS's GEMM workers go to
// sleep right after each GEMM instead of spinning on sched_yield for ~2^28 cycles
// (OPENBLAS_THREAD_TIMEOUT=4, its minimum): the spinning workers took half of each core from every
// elementwise op and kernel between the GEMMs (tiny benchmark: 27k instead of 20k tokens/s). Both
// variables are read when the libraries load, before main, so they are set and the process
// re-executes itself once. A value the caller set is kept; NORMLAB_NO_REEXEC=1 disables all this.
void ensure_thread_policy(char** argv) {
  // Only OpenBLAS's pthread build keeps a second pool (MKL, in a pip LibTorch, runs on libgomp too).
  if (std::getenv("NORMLAB_NO_REEXEC") || blas_threading() != "pthreads") return;
  bool changed = false;
  for (const auto& [name, value] : {std::pair{"OMP_WAIT_POLICY", "passive"}, std::pair{"OPENBLAS_THREAD_TIMEOUT", "4"}}) {
    if (std::getenv(name)) continue;
    ::setenv(name, value, 1);
    changed = true;
  }
  if (changed) ::execv("/proc/self/exe", argv);  // returns only on failure; then carry on as is
}

}  // namespace
}  // namespace normlab

int main(int argc, char** argv) {
  normlab::ensure_thread_policy(argv);
  // Keep freed activation memory in the process instead of returning it to the OS every step:
  // buffers up to 32 MiB (glibc's maximum mmap threshold on 64-bit; a larger value is rejected)
  // come from the heap, and the heap is not trimmed below 1 GiB of free space.
  // Under AddressSanitizer (scripts/test.sh --sanitize) its own allocator replaces glibc's and
  // mallopt has nothing to tune.
#if !defined(__SANITIZE_ADDRESS__)
  if (mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1 || mallopt(M_TRIM_THRESHOLD, 1 << 30) != 1) {
    std::cerr << "warning: mallopt failed; freed memory may go back to the OS every step\n";
  }
#endif
  normlab::setup_logging();
  try {
    return normlab::run_cli(argc, argv);
  } catch (const normlab::ConfigError& e) {
    for (const auto& p : e.problems()) std::cerr << "error: " << p << "\n";
    return 2;
  } catch (const normlab::UsageError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const normlab::RuntimeFailure& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {  // LibTorch's errors among them: one line, no stack frames
    std::cerr << "error: " << normlab::error_message(e) << "\n";
    return 1;
  }
}
