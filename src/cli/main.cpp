// normlab: the command line (src/cli/README.md). CLI11 wiring only: every command is a call
// into train/, with errors mapped to exit codes here (2 usage/config/input, 1 runtime failure).
#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <random>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "bench/attention_bench.h"
#include "bench/norm_bench.h"
#include "config/load.h"
#include "core/errors.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/log.h"
#include "core/system.h"
#include "core/torch_compat.h"
#include "data/corpus.h"
#include "data/tokenizer.h"
#include "parallel/comm.h"
#include "parallel/launch.h"
#include "metrics/compare.h"
#include "metrics/records.h"
#include "metrics/report.h"
#include "metrics/tensorboard.h"
#include "model/parametrizations/parametrization_type.h"
#include "model/residual/residual.h"
#include "optim/registry.h"
#include "model/transformer.h"
#include "sweep/runner.h"
#include "sweep/summary.h"
#include "train/bench.h"
#include "train/checkpoint.h"
#include "train/coordcheck.h"
#include "train/device.h"
#include "train/evaluate.h"
#include "train/inference.h"
#include "train/replay.h"
#include "train/run_config.h"
#include "train/run_data.h"
#include "train/schedules/schedule_type.h"
#include "train/trainer.h"

namespace normlab {
namespace {

std::atomic<bool> g_stop{false};

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

// A PNG beside a file a command wrote, by the one plotting script (scripts/plot.py FLAG FILE),
// found next to the build directory; its stdout goes to stderr so that ours stays the result.
// Without python3 or the script: a warning, and the command's own result stands.
void plot_beside(const std::string& flag, const std::string& file, const std::string& what) {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  const auto plot = exe.parent_path().parent_path() / "scripts" / "plot.py";
  if (!ec && std::filesystem::exists(plot)) {
    const std::string cmd = "python3 '" + plot.string() + "' " + flag + " '" + file + "' 1>&2";
    if (std::system(cmd.c_str()) != 0) spdlog::warn("warning: no {}: {} failed", what, cmd);
  } else {
    spdlog::warn("warning: no {}: scripts/plot.py not found beside {}", what, exe.string());
  }
}

// Each subcommand is a struct holding its flags, an `add` that declares them and a `run` that
// calls into the library; run_cli only registers them and dispatches.

struct TrainCommand {
  CLI::App* cmd = nullptr;
  CLI::Option* out_opt = nullptr;
  std::string config_path, out_dir;
  std::vector<std::string> overrides;
  bool resume = false;
  int nproc = 0;

  void add(CLI::App& app) {
    cmd = app.add_subcommand("train", "train a model from a YAML config");
    cmd->add_option("-c,--config", config_path, "YAML config file")->required();
    cmd->add_option("--set", overrides, "override a key: --set model.n_layers=6 (value is YAML)");
    out_opt = cmd->add_option("--out", out_dir, "run directory (overrides out_dir)");
    cmd->add_flag("--resume", resume, "continue the run in out_dir from its latest checkpoint");
    cmd->add_option("--nproc", nproc, "train data-parallel with this many local processes (c10d Gloo); "
                                      "train.batch_size is per process")
        ->check(CLI::Range(1, 1024));
  }

  int run(int argc, char** argv) {
    if (out_opt->count() > 0) {
      if (out_dir.empty()) throw UsageError("--out: must name a directory, got an empty string");
      overrides.push_back("out_dir=" + out_dir);
    }
    RunData data;  // loaded once: by the checks, then trained on
    Config cfg = load_run_config(config_path, overrides, &data);
    std::signal(SIGINT, on_sigint);
    std::signal(SIGTERM, on_sigterm);
    if (nproc > 1) return launch(cfg, argc, argv);
    TrainOptions opts;
    opts.data = &data;
    opts.resume = resume;
    opts.stop = &g_stop;
    return train(cfg, opts);
  }

  // --nproc W: the same command line without --nproc, started W times as local ranks.
  int launch(const Config& cfg, int argc, char** argv) {
    if (dist_env_from_environment().distributed()) {
      throw UsageError("--nproc: WORLD_SIZE is already set (a launcher such as torchrun started this "
                       "process); use one or the other");
    }
    if (!have_gloo()) throw UsageError("--nproc: this normlab was built without c10d's Gloo (install libgloo-dev and rebuild)");
    LaunchOptions lo;
    lo.nproc = nproc;
    for (int i = 1; i < argc; ++i) {
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
};

struct EvalCommand {
  CLI::App* cmd = nullptr;
  std::string run_dir, data_file, device_name = "cpu";
  std::optional<int64_t> step;
  bool by_task = false;

  void add(CLI::App& app) {
    cmd = app.add_subcommand("eval", "validation loss of a checkpoint (one JSON line on stdout)");
    cmd->add_option("--run", run_dir, "run directory")->required();
    cmd->add_option("--step", step, "checkpoint step (default: LATEST)");
    cmd->add_option("--data", data_file, "data file (default: the run's data.val)");
    cmd->add_option("--device", device_name, "cpu, cuda or cuda:N")->capture_default_str();
    cmd->add_flag("--by-task", by_task,
                  "also the loss per task: byte-level corpora whose lines start with a task letter and ':' (the toy corpus)");
  }

  int run() {
    const auto r = evaluate_run(run_dir, step, data_file, resolve_device(device_name, "--device"), by_task);
    JsonObject o;
    o.add("loss", r.loss).add("windows", r.windows).add("tokens", r.tokens);
    if (r.bytes) o.add("bytes", *r.bytes);
    if (r.bpb) o.add("bpb", *r.bpb);
    if (by_task) add_task_losses(o, r.by_task);
    std::cout << o.str() << std::endl;
    return 0;
  }
};

struct SampleCommand {
  CLI::App* cmd = nullptr;
  std::string run_dir, prompt, device_name = "cpu";
  std::optional<int64_t> step;
  SampleOptions opts;

  void add(CLI::App& app) {
    cmd = app.add_subcommand("sample", "generate text from a checkpoint (stdout: the generated text only)");
    cmd->add_option("--run", run_dir, "run directory")->required();
    cmd->add_option("--step", step, "checkpoint step (default: LATEST)");
    cmd->add_option("--prompt", prompt, "prompt text")->required();
    cmd->add_option("--max-new", opts.max_new, "tokens to generate")->check(CLI::NonNegativeNumber);
    cmd->add_option("--temperature", opts.temperature, "0 = greedy argmax");
    cmd->add_option("--top-k", opts.top_k, "sample from the k most likely tokens; 0 = all");
    cmd->add_option("--seed", opts.seed, "sampling seed");
    cmd->add_option("--device", device_name, "cpu, cuda or cuda:N")->capture_default_str();
  }

  // Each token is written as soon as it exists: a long generation shows progress, and Ctrl-C
  // stops after the current token with everything generated so far on stdout.
  int run() {
    check_sample_options(opts);
    const torch::Device device = resolve_device(device_name, "--device");
    auto lm = load_run_model(run_dir, step, device);
    const int64_t V = lm.config.model.vocab_size;
    std::vector<int64_t> prompt_ids = prompt_tokens(lm, prompt);
    std::signal(SIGINT, on_sigint);
    // With a tokenizer the generated ids are decoded as a whole and only the new text is written,
    // held back while it ends in an incomplete UTF-8 character (decoded as U+FFFD).
    std::vector<int64_t> generated;
    std::string shown;  // the decoded text written so far
    auto write = [](std::string_view text) {
      std::cout << text << std::flush;
      if (!std::cout) throw RuntimeFailure("cannot write the generated text to stdout");
    };
    auto flush_text = [&](bool last) {
      const std::string text = lm.tokenizer->decode(generated);
      const bool pending = text.size() >= 3 && text.compare(text.size() - 3, 3, "\xef\xbf\xbd") == 0;
      if ((last || !pending) && text.size() > shown.size() && text.compare(0, shown.size(), shown) == 0) {
        write(std::string_view(text).substr(shown.size()));
        shown = text;
      }
    };
    const bool complete = sample_tokens(lm, std::move(prompt_ids), opts, device, [&](int64_t next) {
      if (lm.tokenizer) {
        generated.push_back(next);
        flush_text(false);
      } else if (V <= 256) {
        write(std::string(1, static_cast<char>(next)));
      } else {
        write(fmt::format("<{}>", next));
      }
    }, &g_stop);
    if (lm.tokenizer && !generated.empty()) flush_text(true);
    std::cout << std::flush;
    return complete ? 0 : kInterrupted;
  }
};

// compare: runs side by side (src/metrics/README.md, "Comparing runs").
struct CompareCommand {
  CLI::App* cmd = nullptr;
  std::vector<std::string> runs;
  std::string by;
  bool json = false;

  void add(CLI::App& app) {
    cmd = app.add_subcommand("compare", "where runs first differ and by how much; grouped by a config key, whether "
                                        "their best validation losses differ significantly");
    cmd->add_option("runs", runs, "run or sweep directories (a sweep counts as its runs; a tuned sweep alone: "
                                  "its verdict table)")->required();
    cmd->add_option("--by", by, "group runs by this config key (e.g. model.layout), seeds as samples: mean, 95% "
                                "interval and Welch's t-test of the best validation loss");
    cmd->add_flag("--json", json, "one JSON object on stdout instead of text");
  }

  int run() {
    // A tuned sweep on its own: its verdict table (the comparison it was run for), from its summary.
    if (runs.size() == 1 && by.empty() && is_tuned_sweep_dir(runs[0])) {
      const SweepSummary summary = load_sweep_summary(runs[0]);
      std::cout << (json ? tune_json(*summary.tune) + "\n" : tune_markdown(*summary.tune)) << std::flush;
      return 0;
    }
    const Comparison c = compare_runs(runs, by);
    std::cout << (json ? comparison_json(c) : comparison_text(c)) << std::endl;
    return 0;
  }
};

// replay: re-run a logged step from the checkpoint before it (src/train/README.md, "Replaying a step").
struct ReplayCommand {
  CLI::App* cmd = nullptr;
  std::string run_dir;
  int64_t step = -1;
  bool json = false;

  void add(CLI::App& app) {
    cmd = app.add_subcommand("replay", "re-run update N from the checkpoint before it: reproducible bit for bit or "
                                       "not, and the step's autopsy (spikes/step_<N>.autopsy.json)");
    cmd->add_option("--run", run_dir, "run directory")->required();
    cmd->add_option("--step", step, "a logged step (a spike, a skipped step or any other)")->required();
    cmd->add_flag("--json", json, "the autopsy as one JSON object on stdout instead of text");
  }

  int run() {
    const ReplayResult r = replay_step(run_dir, step);
    plot_beside("--autopsy", r.autopsy_path, "autopsy PNG");
    std::cout << (json ? replay_json(r) : replay_text(r)) << std::endl;
    return 0;
  }
};

// export-tb: TensorBoard event files for runs recorded before (or to rewrite them).
struct ExportTbCommand {
  CLI::App* cmd = nullptr;
  std::vector<std::string> dirs;

  void add(CLI::App& app) {
    cmd = app.add_subcommand("export-tb", "write <run>/tensorboard/ anew from metrics.jsonl, for each run (a sweep "
                                          "counts as its runs); stdout: the event files written");
    cmd->add_option("dirs", dirs, "run or sweep directories")->required();
  }

  int run() {
    for (const auto& d : dirs) {
      for (const auto& run : run_dirs(d)) std::cout << export_tensorboard(run) << "\n";
    }
    std::cout << std::flush;
    return 0;
  }
};

// tokenize: SentencePiece models and llm.c shards (data/README.md, "Real corpora").
struct TokenizeCommand {
  CLI::App* cmd = nullptr;
  CLI::App* train_cmd = nullptr;
  CLI::App* encode_cmd = nullptr;
  TokenizerTraining training;
  std::string model, input, out;

  void add(CLI::App& app) {
    cmd = app.add_subcommand("tokenize", "SentencePiece: train a BPE model, or encode text into an llm.c shard");
    cmd->require_subcommand(1);
    train_cmd = cmd->add_subcommand("train", "train a BPE model with byte fallback on a text file");
    train_cmd->add_option("--input", training.input, "text file (one sentence or line per line)")->required();
    train_cmd->add_option("--vocab", training.vocab, "vocabulary size, 256 byte tokens and <unk> included")->required();
    train_cmd->add_option("--out", training.out, "model file to write (a .vocab listing goes beside it)")->required();
    train_cmd->add_option("--max-lines", training.max_lines, "at most this many lines sampled for training")
        ->capture_default_str();
    encode_cmd = cmd->add_subcommand("encode", "encode a text file into one llm.c shard (uint16 or uint32 tokens)");
    encode_cmd->add_option("--model", model, "SentencePiece model file")->required();
    encode_cmd->add_option("--input", input, "text file")->required();
    encode_cmd->add_option("--out", out, "shard to write")->required();
  }

  int run() {
    if (*train_cmd) {
      train_tokenizer(training);
      const Tokenizer t = Tokenizer::load(training.out);
      std::cout << JsonObject().add("model", training.out).add("vocab", t.vocab_size()).add("sha256", t.sha256()).str()
                << std::endl;
      return 0;
    }
    const Tokenizer t = Tokenizer::load(model);
    const int64_t n = encode_text_file(t, input, out);
    const int64_t bytes = static_cast<int64_t>(std::filesystem::file_size(input));
    std::cout << JsonObject().add("shard", out).add("tokens", n).add("bytes", bytes)
                     .add("bytes_per_token", static_cast<double>(bytes) / static_cast<double>(n))
                     .add("token_width", t.vocab_size() <= 65536 ? 2 : 4).str() << std::endl;
    return 0;
  }
};

struct BenchCommand {
  CLI::App* cmd = nullptr;
  CLI::App* norms_cmd = nullptr;
  CLI::App* attention_cmd = nullptr;
  std::string config_path, profile;
  std::vector<std::string> overrides;
  int64_t steps = 20, warmup = 5, threads = -1;
  bool as_json = false, diag = false;
  NormBenchOptions norms;
  AttentionBenchOptions attention;

  void add(CLI::App& app) {
    cmd = app.add_subcommand(
        "bench",
        "time the training step of a config (speed, MFU, memory); `bench norms` / `bench attention` for the kernels");
    cmd->add_option("-c,--config", config_path, "YAML config file");
    cmd->add_option("--set", overrides, "override a key, as for train");
    cmd->add_option("--steps", steps, "timed steps")->check(CLI::PositiveNumber);
    cmd->add_option("--warmup", warmup, "untimed warm-up steps")->check(CLI::NonNegativeNumber);
    cmd->add_option("--threads", threads, "LibTorch threads (default: train.threads)");
    cmd->add_flag("--json", as_json, "one JSON line instead of the table");
    cmd->add_flag("--diag", diag, "make every step a full-diagnostics step (as diag.every: 1); default: none is");
    cmd->add_option("--profile", profile,
                    "write a LibTorch profiler trace (chrome://tracing) of the timed steps to this file");
    norms_cmd = cmd->add_subcommand("norms", "forward+backward of every norm, as a ratio to LibTorch's native layer_norm");
    norms_cmd->add_option("--rows", norms.rows, "row counts (B*T), comma-separated")->delimiter(',')->capture_default_str();
    norms_cmd->add_option("--widths", norms.widths, "normalised widths, comma-separated")->delimiter(',')->capture_default_str();
    norms_cmd->add_option("--warmup", norms.warmup, "untimed rounds")->capture_default_str();
    norms_cmd->add_option("--repeats", norms.repeats, "timed rounds (median reported)")->capture_default_str();
    norms_cmd->add_option("--threads", norms.threads, "intra-op threads; 0 = all cores")->capture_default_str();
    norms_cmd->add_option("--device", norms.device, "cpu, cuda or cuda:N")->capture_default_str();
    norms_cmd->add_option("--dtype", norms.dtype, "input dtype: fp32 or bf16 (parameters stay fp32)")->capture_default_str();
    attention_cmd = cmd->add_subcommand(
        "attention", "causal attention forward+backward on the CPU: the fp32 kernel, and for bf16 every path");
    attention_cmd->add_option("--shapes", attention.shapes, "BxTxHxdh, comma-separated")->delimiter(',')->capture_default_str();
    attention_cmd->add_option("--warmup", attention.warmup, "untimed rounds")->capture_default_str();
    attention_cmd->add_option("--repeats", attention.repeats, "timed rounds (median reported)")->capture_default_str();
    attention_cmd->add_option("--threads", attention.threads, "intra-op threads; 0 = all cores")->capture_default_str();
  }

  int run() {
    if (*norms_cmd) {
      std::cout << format_norm_bench(run_norm_bench(norms)) << std::flush;
      return 0;
    }
    if (*attention_cmd) {
      std::cout << format_attention_bench(run_attention_bench(attention)) << std::flush;
      return 0;
    }
    if (config_path.empty())
      throw UsageError("bench: -c CONFIG is required (or use `normlab bench norms` / `normlab bench attention`)");
    if (threads >= 0) overrides.push_back("train.threads=" + std::to_string(threads));
    Config cfg = load_run_config(config_path, overrides);
    auto r = bench_training(cfg, config_path, warmup, steps, profile, diag);
    std::cout << (as_json ? bench_json(r) : bench_text(r)) << std::flush;
    return 0;
  }
};

struct SweepCommand {
  CLI::App* cmd = nullptr;
  std::string config_path, shard_text;
  SweepOptions opts;
  SweepRunOptions run_opts;
  bool list_only = false;

  void add(CLI::App& app) {
    cmd = app.add_subcommand(
        "sweep", "run a sweep file's points (axes x seeds) as parallel training runs, then summarise them");
    cmd->add_option("-c,--config", config_path, "sweep YAML file (configs/sweeps/*.yaml)")->required();
    cmd->add_option("--jobs", run_opts.jobs, "training processes at a time (cores split between them)")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_flag("--quick", opts.quick, "apply the sweep file's quick: section (minutes)");
    cmd->add_option("--set", opts.sets, "override a key in every point: --set train.steps=100");
    cmd->add_option("--out", opts.out_dir, "sweep directory (overrides out_dir)");
    cmd->add_option("--shard", shard_text,
                    "i/n: run only the points whose index is i mod n (Slurm array, several machines)");
    cmd->add_flag("--list", list_only, "print the points' names (of --shard's points), one per line");
  }

  int run() {
    const Sweep sweep = parse_sweep_file(config_path, opts);
    if (cmd->count("--shard") > 0) run_opts.shard = parse_shard(shard_text);
    if (list_only) {
      std::cout << list_points(sweep, run_opts.shard) << std::flush;
      return 0;
    }
    std::signal(SIGINT, on_sigint);
    run_opts.stop = &g_stop;
    return run_sweep(sweep, run_opts);
  }
};

struct ReportCommand {
  CLI::App* cmd = nullptr;
  std::string run_dir;
  bool as_json = false;

  void add(CLI::App& app) {
    cmd = app.add_subcommand(
        "report", "summary of a run (losses, spikes, per-layer gradient profile) or of a sweep directory (its table)");
    cmd->add_option("run", run_dir, "run or sweep directory")->required();
    cmd->add_flag("--json", as_json, "the same as one JSON object");
  }

  int run() {
    if (is_sweep_dir(run_dir)) {
      const SweepSummary summary = load_sweep_summary(run_dir);
      std::cout << (as_json ? summary_json(summary) : summary_markdown(summary)) << std::flush;
    } else {
      std::cout << (as_json ? report_json(run_dir) : report_text(run_dir)) << std::flush;
    }
    return 0;
  }
};

// coordcheck: the coordinate check (src/train/README.md, "Coordinate check").
struct CoordCheckCommand {
  CLI::App* cmd = nullptr;
  CoordCheckOptions opts;
  std::string out_dir = "runs/coordcheck";
  std::vector<std::string> from;

  void add(CLI::App& app) {
    cmd = app.add_subcommand("coordcheck", "coordinate check: mean |x| of each module over widths and/or depths after "
                                           "each of a few updates on one batch, and its slope against size");
    cmd->add_option("-c,--config", opts.config_path, "YAML config file (its optimizer, lr and param.type)");
    cmd->add_option("--widths", opts.widths, "d_model values (d_ff scaled with them): 64,128,256,512")->delimiter(',');
    cmd->add_option("--depths", opts.depths, "n_layers values: 2,4,8,16")->delimiter(',');
    cmd->add_option("--steps", opts.steps, "updates on the fixed batch (t = 1..steps)")->capture_default_str();
    cmd->add_option("--seeds", opts.seeds, "seeds per size (seed, seed + 1, ...)")->capture_default_str();
    cmd->add_option("--set", opts.overrides, "override a key: --set optim.lr=0.01 (value is YAML)");
    cmd->add_option("--head-dim", opts.head_dim,
                    "over width, hold the head size: n_heads = width / N at every width (default: n_heads as configured)");
    cmd->add_option("--out", out_dir, "directory for coord.json and coord_check.png")->capture_default_str();
    cmd->add_flag("--compare", opts.compare, "also run it under param.type sp, drawn beside the config's mode");
    cmd->add_option("--lrs", opts.lrs,
                    "run the check at each of these rates (increasing), e.g. 0.008,0.016,0.032,0.064,0.128; three or "
                    "more split the first update by order in the rate")
        ->delimiter(',');
    cmd->add_option("--from", from,
                    "coord.json files: fit their values anew and write the files (no training); several: their checks "
                    "together (a rate split across files)");
  }

  int run() {
    if (out_dir.empty()) throw UsageError("--out: must name a directory, got an empty string");
    if (from.empty() == opts.config_path.empty())
      throw UsageError("coordcheck: give -c CONFIG (run a check) or --from coord.json (fit one again), one of them");
    if (!from.empty() && !opts.lrs.empty()) throw UsageError("coordcheck: --lrs runs checks; --from reads them, not both");
    std::vector<CoordCheck> checks;
    std::filesystem::create_directories(out_dir);
    const std::string json_path = (std::filesystem::path(out_dir) / "coord.json").string();
    // Every finished size is on disk at once: a check stopped part-way keeps what it measured.
    const auto keep = [&](const std::vector<CoordCheck>& so_far) {
      if (so_far.empty()) {  // every size checked, none run: an earlier check's coord.json here is not this one's
        std::filesystem::remove(json_path);
        return;
      }
      write_file_atomic(json_path, coord_json(so_far));
      spdlog::info("coordcheck: {} holds {} check{} so far", json_path, so_far.size(), so_far.size() == 1 ? "" : "s");
    };
    if (from.empty()) checks = run_coordcheck(opts, keep);
    for (const auto& f : from) {
      for (auto& c : read_coord_json(f)) checks.push_back(std::move(c));
    }
    write_file_atomic(json_path, coord_json(checks));
    plot_beside("--coord", json_path, "coord_check.png");
    for (const auto& c : checks) std::cout << coord_table(c) << "\n";
    for (const auto& sp : split_first_update(checks)) std::cout << rate_split_table(sp) << "\n";
    std::cout << "wrote " << json_path << std::endl;
    return 0;
  }
};

struct KeysCommand {
  CLI::App* cmd = nullptr;

  void add(CLI::App& app) { cmd = app.add_subcommand("keys", "list every config key with its default and meaning"); }

  int run() {
    std::cout << describe_keys();
    std::cout << "\nmodel.norm.type:";
    for (const auto& n : norm_registry()) std::cout << fmt::format("\n  {:<12} {}", n.name, n.formula);
    std::cout << "\nmodel.layout:";
    for (const auto& l : layout_registry()) std::cout << fmt::format("\n  {:<12} {}", l.name, l.equation);
    std::cout << "\nmodel.residual.type (additive layouts; G is the term a sublayer adds):";
    for (const auto& r : residual_registry()) std::cout << fmt::format("\n  {:<12} {}", r.name, r.equation);
    std::cout << "\nmodel.value_residual (V_0: block 0's raw values; v: a later block's):";
    for (const auto& v : value_residual_registry()) std::cout << fmt::format("\n  {:<12} {}", v.name, v.equation);
    std::cout << "\nmodel.ffn:";
    for (const auto& f : ffn_registry()) std::cout << fmt::format("\n  {:<12} {}", f.name, f.formula);
    std::cout << "\noptim.type:";
    for (const auto& o : optimizer_registry()) std::cout << fmt::format("\n  {:<12} {}", o.name, o.summary);
    std::cout << "\noptim.schedule (after the warm-up; p: the progress through the remaining steps):";
    for (const auto& t : schedule_registry()) std::cout << fmt::format("\n  {:<12} {}", t.name, t.formula);
    std::cout << "\nparam.type:";
    for (const auto& t : parametrization_registry()) std::cout << fmt::format("\n  {:<12} {}", t.name, t.summary);
    std::cout << std::endl;
    return 0;
  }
};

int run_cli(int argc, char** argv) {
  CLI::App app{"NormLab: train small GPT-style models and study their normalization layers"};
  app.require_subcommand(1);
  TrainCommand train_cmd;
  EvalCommand eval_cmd;
  SampleCommand sample_cmd;
  KeysCommand keys_cmd;
  BenchCommand bench_cmd;
  SweepCommand sweep_cmd;
  ReportCommand report_cmd;
  TokenizeCommand tokenize_cmd;
  CompareCommand compare_cmd;
  ExportTbCommand export_tb_cmd;
  ReplayCommand replay_cmd;
  CoordCheckCommand coordcheck_cmd;
  train_cmd.add(app);
  eval_cmd.add(app);
  sample_cmd.add(app);
  keys_cmd.add(app);
  bench_cmd.add(app);
  sweep_cmd.add(app);
  report_cmd.add(app);
  tokenize_cmd.add(app);
  compare_cmd.add(app);
  export_tb_cmd.add(app);
  replay_cmd.add(app);
  coordcheck_cmd.add(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help on stdout, errors on stderr
    return code == 0 ? 0 : 2;
  }
  if (*train_cmd.cmd) return train_cmd.run(argc, argv);
  if (*eval_cmd.cmd) return eval_cmd.run();
  if (*sample_cmd.cmd) return sample_cmd.run();
  if (*bench_cmd.cmd) return bench_cmd.run();
  if (*sweep_cmd.cmd) return sweep_cmd.run();
  if (*report_cmd.cmd) return report_cmd.run();
  if (*keys_cmd.cmd) return keys_cmd.run();
  if (*tokenize_cmd.cmd) return tokenize_cmd.run();
  if (*compare_cmd.cmd) return compare_cmd.run();
  if (*export_tb_cmd.cmd) return export_tb_cmd.run();
  if (*replay_cmd.cmd) return replay_cmd.run();
  if (*coordcheck_cmd.cmd) return coordcheck_cmd.run();
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
  // NORMLAB_NO_ONEDNN=1: LibTorch without its oneDNN (mkldnn) kernels, the path it takes on a CPU
  // without AVX-512, where a bf16 matmul falls back to slow native loops. The test of train's bf16
  // start-up check forces that path on any CPU (src/train/README.md, Precision).
  if (std::getenv("NORMLAB_NO_ONEDNN")) at::globalContext().setUserEnabledMkldnn(false);
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
