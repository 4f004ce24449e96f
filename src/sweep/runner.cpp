#include "sweep/runner.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "config/load.h"
#include "core/errors.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/system.h"
#include "metrics/records.h"
#include "sweep/summary.h"

extern char** environ;

namespace normlab {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;


// The environment with the thread counts set (OpenBLAS and OpenMP read them at start-up). The wait
// policy is the child's own start-up decision (src/cli/main.cpp), or the caller's if set.
std::vector<std::string> child_env(int threads) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string s = *e;
    const std::string name = s.substr(0, s.find('='));
    if (name == "OPENBLAS_NUM_THREADS" || name == "OMP_NUM_THREADS") continue;
    env.push_back(s);
  }
  env.push_back(fmt::format("OPENBLAS_NUM_THREADS={}", threads));
  env.push_back(fmt::format("OMP_NUM_THREADS={}", threads));
  return env;
}

// A config with what may differ between sessions of the same point blanked out.
std::string comparable(Config c) {
  // Where a run executes may differ between the machines that share a sweep (a search on a GPU,
  // its remaining points on a CPU), as `train --resume` allows: each run's config.yaml records its own.
  const TrainConfig defaults;
  c.train.threads = defaults.threads;
  c.train.device = defaults.device;
  c.train.dist_backend = defaults.dist_backend;
  c.train.dist_timeout = defaults.dist_timeout;
  c.out_dir.clear();
  // Runs written before data paths were stored absolute hold them relative to the directory the
  // sweep ran from.
  for (PathList* paths : {&c.data.train, &c.data.val}) {
    for (std::string& p : *paths) {
      if (!p.empty()) p = fs::absolute(p).lexically_normal().string();
    }
  }
  return dump_config(c);
}

std::string last_line(const std::string& path) {
  if (!file_exists(path)) return "";
  std::istringstream in(read_file(path));
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

std::string seconds(double s) { return std::isfinite(s) ? fmt::format("{:.1f} s", s) : "-"; }

enum class Plan { kSkip, kResume, kFresh };

struct Job {
  size_t point;
  pid_t pid;
  Clock::time_point start;
  double prior_wall_s;
};

}  // namespace

SweepShard parse_shard(const std::string& text) {
  const auto bad = [&] {
    return UsageError(fmt::format("--shard {}: expected i/n with 0 <= i < n, e.g. 0/4", text));
  };
  const auto slash = text.find('/');
  if (slash == std::string::npos) throw bad();
  const auto number = [&](size_t from, size_t to, int& out) {
    const char* end = text.data() + to;
    const auto r = std::from_chars(text.data() + from, end, out);
    return from < to && r.ec == std::errc() && r.ptr == end;
  };
  SweepShard shard;
  if (!number(0, slash, shard.index) || !number(slash + 1, text.size(), shard.count) ||
      shard.count < 1 || shard.index < 0 || shard.index >= shard.count) {
    throw bad();
  }
  return shard;
}

std::string list_points(const Sweep& sweep, const SweepShard& shard) {
  std::string out;
  const std::vector<SweepPoint> points = expand_sweep(sweep);
  for (size_t i = 0; i < points.size(); ++i) {
    if (shard.has(i)) out += points[i].name + "\n";
  }
  if (!sweep.tune) return out;
  // The confirm points are known once the search has finished in the sweep directory.
  const TuneSummary tune = summarise_tune(sweep, sweep.out_dir);
  if (!tune.search_complete) return out;
  const std::vector<SweepPoint> confirm = confirm_points(sweep, tune.selected());
  for (size_t i = 0; i < confirm.size(); ++i) {
    if (shard.has(i)) out += confirm[i].name + "\n";
  }
  // tune.fit_extend: the points the fits' walks need next, once the runs before them finished.
  const std::vector<SweepPoint> more = fit_extension_points(sweep, tune);
  for (size_t i = 0; i < more.size(); ++i) {
    if (shard.has(i)) out += more[i].name + "\n";
  }
  return out;
}

std::string other_machines_warning(const std::vector<std::string>& run_dirs, const std::string& here) {
  std::map<std::string, size_t> runs_on;  // another CPU -> the runs that ran on it
  size_t n = 0;
  for (const std::string& dir : run_dirs) {
    std::set<std::string> cpus;
    for (const MachineRecord& m : read_machines(dir)) {
      if (m.cpu != here) cpus.insert(m.cpu);
    }
    for (const std::string& cpu : cpus) ++runs_on[cpu];
    n += !cpus.empty();
  }
  if (n == 0) return "";
  std::string parts;
  for (const auto& [cpu, count] : runs_on) parts += fmt::format("{}{}: {}", parts.empty() ? "" : ", ", cpu, count);
  return fmt::format(
      "warning: {} of the {} runs already in this sweep directory name another CPU in their machine.json "
      "than this machine's ({}; here: {}): comparisons of them with the runs made here mix machines (the tuned summary's "
      "mixed_machines); --out DIR keeps a new sweep apart",
      n, run_dirs.size(), parts, here);
}

int threads_per_job(int jobs) {
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(1, jobs));
}

namespace {

// One sweep process's work on its shard, in four moves: plan (decide every point from its run
// directory, before anything is written), open (take the directory, print the plan), poll (one
// round: forward Ctrl-C, start points while job slots are free, finish a child that ended) and
// report (the closing line and exit code).
class SweepScheduler {
 public:
  // Validates every point (a tuned sweep's confirm points at every value they could take too)
  // before anything is written; the first phase is the sweep's points (a tuned sweep's search).
  SweepScheduler(const Sweep& sweep, const SweepRunOptions& options)
      : sweep_(sweep), options_(options), dir_(sweep.out_dir),
        shard_name_(options.shard.whole() ? "" : fmt::format("shard {}/{}", options.shard.index, options.shard.count)) {
    std::vector<SweepPoint> points = expand_sweep(sweep);
    std::vector<Config> configs = validate_points(sweep, points);
    if (sweep.tune) {
      std::vector<SweepPoint> candidates;
      for (size_t v = 0; v < sweep.tune->values.size(); ++v) {
        const auto c = confirm_points(sweep, std::vector<int>(tune_arms(sweep).size(), static_cast<int>(v)));
        candidates.insert(candidates.end(), c.begin(), c.end());
      }
      validate_points(sweep, candidates);
    }
    begin_phase(std::move(points), std::move(configs));
  }

  // The next phase's points (a tuned sweep's confirm points); the shard's share is by index
  // within the phase, or every point with every_shard (the claims keep two processes off one
  // point). Call plan() and start_phase() next.
  void begin_phase(std::vector<SweepPoint> points, std::vector<Config> configs, bool every_shard = false) {
    points_ = std::move(points);
    configs_ = std::move(configs);
    plans_.assign(points_.size(), Plan::kFresh);
    mine_.clear();
    todo_.clear();
    next_ = finished_ = 0;
    for (size_t i = 0; i < points_.size(); ++i) {
      if (every_shard || options_.shard.has(i)) mine_.push_back(i);
    }
    for (size_t i : mine_) all_mine_.push_back(point_run_dir(dir_, points_[i]));
  }

  bool interrupted() const { return forwarded_; }

  // Decides every point of the shard; runs of another config are never mixed in (UsageError).
  void plan() {
    std::vector<std::string> stale;
    for (size_t i : mine_) {
      const fs::path run = point_run_dir(dir_, points_[i]);
      if (file_exists((run / "config.yaml").string())) {
        bool same = false;
        try {
          same = comparable(parse_config_file((run / "config.yaml").string()).config) == comparable(configs_[i]);
        } catch (const UsageError&) {
        }
        if (!same) stale.push_back(run.string());
      }
      plans_[i] = plan_of(i);
    }
    if (stale.empty()) return;
    throw UsageError(fmt::format(
        "{}: {} run director{} hold a run of another config than this sweep gives {} (first: {}); "
        "use --out DIR for a new sweep directory, or delete them to run them again",
        dir_, stale.size(), stale.size() == 1 ? "y" : "ies", stale.size() == 1 ? "it" : "them", stale[0]));
  }

  // Takes the directory: one sweep process per directory and shard at a time (released by the
  // kernel if it dies); different shards, or a shard beside the whole sweep, share it point by point.
  void open() {
    fs::create_directories(fs::path(dir_) / "runs");
    fs::create_directories(fs::path(dir_) / "claims");
    const SweepShard& shard = options_.shard;
    lock_ = std::make_unique<DirectoryLock>(
        (fs::path(dir_) / (shard.whole() ? std::string("sweep.lock")
                                         : fmt::format("sweep.shard-{}-of-{}.lock", shard.index, shard.count))).string(),
        shard.whole() ? dir_ + ": another normlab sweep is running on this directory"
                      : fmt::format("{}: another normlab sweep is running {} on this directory", dir_, shard_name_));
    add_log_file((fs::path(dir_) / "sweep.log").string());
    write_file_atomic((fs::path(dir_) / "sweep.yaml").string(), dump_sweep(sweep_));
    threads_ = threads_per_job(options_.jobs);
    env_ = child_env(threads_);
    start_phase(sweep_.tune ? "search phase: " : "");
  }

  // Prints the phase's plan and queues its points.
  void start_phase(const std::string& label) {
    const SweepShard& shard = options_.shard;
    size_t n_skip = 0, n_resume = 0;
    for (size_t i : mine_) {
      n_skip += plans_[i] == Plan::kSkip;
      n_resume += plans_[i] == Plan::kResume;
      if (plans_[i] != Plan::kSkip) todo_.push_back(i);
    }
    finished_ = n_skip;
    std::vector<std::string> earlier;  // runs this phase keeps or resumes
    for (size_t i : mine_) {
      if (plans_[i] != Plan::kFresh) earlier.push_back(point_run_dir(dir_, points_[i]));
    }
    const std::string other = other_machines_warning(earlier, cpu_description());
    if (!other.empty()) spdlog::warn("{}", other);
    spdlog::info("normlab sweep: {}{}{} points ({} finished earlier, {} to resume, {} new) | {} job{} x {} thread{} | {}",
                 label, shard.whole() ? "" : fmt::format("{}: {} of ", shard_name_, mine_.size()), points_.size(), n_skip,
                 n_resume, mine_.size() - n_skip - n_resume, options_.jobs, options_.jobs == 1 ? "" : "s", threads_,
                 threads_ == 1 ? "" : "s", dir_);
    write_summary();
  }

  // One round. Returns false when every point of the plan has finished or, after Ctrl-C, every
  // running child has stopped.
  bool poll() {
    if (next_ >= todo_.size() && running_.empty()) return false;
    const bool stopping = options_.stop && options_.stop->load();
    if (stopping && !forwarded_) {
      forwarded_ = true;
      spdlog::info("interrupted: asking {} running point{} to checkpoint and stop ({} not started)", running_.size(),
                   running_.size() == 1 ? "" : "s", todo_.size() - next_);
      for (const auto& j : running_) ::kill(j.pid, SIGINT);
    }
    while (!stopping && running_.size() < static_cast<size_t>(options_.jobs) && next_ < todo_.size()) {
      start(todo_[next_++]);
    }
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, WNOHANG);
    if (pid > 0) {
      auto it = std::find_if(running_.begin(), running_.end(), [&](const Job& j) { return j.pid == pid; });
      if (it != running_.end()) {
        const Job job = *it;
        running_.erase(it);
        finish(job, st);
      }
      return true;
    }
    if (stopping && running_.empty()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return true;
  }

  // The closing line: 0 when every point is done, diverged or run elsewhere, 1 when any failed,
  // 130 after Ctrl-C.
  int report() {
    write_summary();
    std::map<PointStatus, size_t> n;
    for (const std::string& run : all_mine_) {
      if (const auto rec = read_point_record(run)) ++n[rec->status];
    }
    const size_t done = n[PointStatus::kDone], diverged = n[PointStatus::kDiverged], failed = n[PointStatus::kFailed];
    spdlog::info("sweep {}{}: {} done, {} diverged, {} failed, {} not finished of {}{}; summary in {}/summary.md",
                 shard_name_.empty() ? "" : shard_name_ + " ", forwarded_ ? "interrupted" : "finished", done, diverged,
                 failed, all_mine_.size() - done - diverged - failed, all_mine_.size(),
                 elsewhere_ ? fmt::format(" ({} run by another sweep process)", elsewhere_) : "", dir_);
    if (forwarded_) return 130;
    return failed ? 1 : 0;
  }

 private:
  // What a point needs, from its run directory: decided for the plan printed at the start, and
  // again once the point is claimed (another sweep process may have run it meanwhile).
  Plan plan_of(size_t i) const {
    const fs::path run = point_run_dir(dir_, points_[i]);
    const auto rec = read_point_record(run.string());
    if (rec && is_finished(rec->status)) return Plan::kSkip;
    if (file_exists((run / "checkpoints" / "LATEST").string())) return Plan::kResume;
    return Plan::kFresh;
  }

  // Every sweep process sharing the directory rewrites the summary: under the lock, the last
  // write sees every point record written before it.
  void write_summary() const {
    const DirectoryLock summary_lock((fs::path(dir_) / "summary.lock").string());
    write_summary_files(summarise_sweep_dir(sweep_, dir_));
  }

  void start(size_t i) {
    const SweepPoint& p = points_[i];
    const std::string run = point_run_dir(dir_, p);
    std::unique_ptr<DirectoryLock> claim;
    try {
      claim = std::make_unique<DirectoryLock>((fs::path(dir_) / "claims" / (p.name + ".lock")).string(), "");
    } catch (const UsageError&) {
      ++finished_;
      ++elsewhere_;
      spdlog::info("[{}/{}] skip     {}: another normlab sweep process is running it", finished_, mine_.size(), p.name);
      return;
    }
    plans_[i] = plan_of(i);
    if (plans_[i] == Plan::kSkip) {
      ++finished_;
      spdlog::info("[{}/{}] skip     {}: finished by another normlab sweep process", finished_, mine_.size(), p.name);
      return;
    }
    const bool resume = plans_[i] == Plan::kResume;
    double prior = 0;
    if (resume) {
      if (const auto rec = read_point_record(run); rec && std::isfinite(rec->wall_s)) prior = rec->wall_s;
    } else {
      fs::remove_all(run);  // a start that never reached its first checkpoint
    }
    fs::create_directories(run);
    PointRecord rec;
    rec.status = PointStatus::kRunning;
    write_point_record(run, p, rec);
    std::vector<std::string> argv = {"normlab", "train", "-c", sweep_.base};
    for (const auto& o : point_overrides(sweep_, p)) argv.insert(argv.end(), {"--set", o});
    argv.insert(argv.end(), {"--set", fmt::format("train.threads={}", threads_), "--out", run});
    if (resume) argv.push_back("--resume");
    const pid_t pid = spawn_child(options_.exe, argv, env_, (fs::path(run) / "stderr.log").string(), "normlab sweep");
    running_.push_back({i, pid, Clock::now(), prior});
    claims_[i] = std::move(claim);
    spdlog::info("start   {}{}", p.name, resume ? " (resuming from its checkpoint)" : "");
  }

  void finish(const Job& job, int wait_status) {
    const SweepPoint& p = points_[job.point];
    const std::string run = point_run_dir(dir_, p);
    const int code = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
    const SummaryValues m = run_metrics((fs::path(run) / "metrics.jsonl").string());
    const bool diverged = m[kDiverged] == 1;
    PointRecord rec;
    rec.exit_code = code;
    rec.wall_s = job.prior_wall_s + std::chrono::duration<double>(Clock::now() - job.start).count();
    if (code == 0) {
      rec.status = diverged ? PointStatus::kDiverged : PointStatus::kDone;
    } else if (code == 130 || (forwarded_ && WIFSIGNALED(wait_status))) {
      rec.status = PointStatus::kRunning;  // interrupted: resumable, not done
    } else {
      rec.status = diverged ? PointStatus::kDiverged : PointStatus::kFailed;
    }
    write_point_record(run, p, rec);
    claims_.erase(job.point);
    ++finished_;
    std::string what;
    if (rec.status == PointStatus::kFailed) {
      what = fmt::format("exit {}: {} (log: {}/stderr.log)", code, last_line(run + "/stderr.log"), run);
    } else if (rec.status == PointStatus::kRunning) {
      what = "interrupted; a re-run resumes it";
    } else {
      what = std::isfinite(m[kFinalTrainLoss]) ? fmt::format("loss {:.4f}", m[kFinalTrainLoss]) : "loss not finite";
      if (code != 0) what += fmt::format(" (exit {}: {})", code, last_line(run + "/stderr.log"));
    }
    spdlog::info("[{}/{}] {:<8} {}: {}, {}", finished_, mine_.size(), status_name(rec.status), p.name, what,
                 seconds(rec.wall_s));
    write_summary();
  }

  const Sweep& sweep_;
  const SweepRunOptions& options_;
  const std::string dir_;
  const std::string shard_name_;
  std::vector<SweepPoint> points_;  // the phase's points
  std::vector<Config> configs_;
  std::vector<Plan> plans_;
  std::vector<size_t> mine_;  // this shard's points of the phase
  std::vector<std::string> all_mine_;  // the run directories of this shard's points, every phase
  std::unique_ptr<DirectoryLock> lock_;
  int threads_ = 1;
  std::vector<std::string> env_;
  std::vector<size_t> todo_;  // the planned points to start, in order
  size_t next_ = 0, finished_ = 0, elsewhere_ = 0;
  std::vector<Job> running_;
  std::map<size_t, std::unique_ptr<DirectoryLock>> claims_;  // held while the point trains
  bool forwarded_ = false;  // Ctrl-C was forwarded to the children
};

// tune.fit_extend, after the confirm phase: where a cell's lowest confirm mean sits at an end of its
// bracket, the confirm seeds run at the next grid value beyond it, one value per round, until every
// walk has ended. Every shard takes every point of a round (rounds are small and sequential; the
// claims keep two processes off one point). A point starts once per process. True when some walk
// still waits for runs another process or shard has not finished (said in the log).
bool run_fit_extension(const Sweep& sweep, SweepScheduler& scheduler) {
  if (sweep.tune->fit_extend == 0) return false;
  std::set<std::string> tried;
  while (!scheduler.interrupted()) {
    std::vector<SweepPoint> more = fit_extension_points(sweep, summarise_tune(sweep, sweep.out_dir));
    more.erase(std::remove_if(more.begin(), more.end(), [&](const SweepPoint& p) { return tried.count(p.name) > 0; }),
               more.end());
    if (more.empty()) break;
    for (const SweepPoint& p : more) tried.insert(p.name);
    std::vector<Config> configs = validate_points(sweep, more);
    scheduler.begin_phase(std::move(more), std::move(configs), /*every_shard=*/true);
    scheduler.plan();
    scheduler.start_phase("fit extension: ");
    while (scheduler.poll()) {
    }
  }
  if (scheduler.interrupted()) return false;
  const TuneSummary t = summarise_tune(sweep, sweep.out_dir);
  std::vector<std::string> waiting;
  const int n = static_cast<int>(t.tune.values.size());
  for (const TuneArmResult& a : t.arms) {
    if (a.selected > 0 && a.selected + 1 < n && a.fit_centre < 0) waiting.push_back(a.name.empty() ? "(all)" : a.name);
  }
  if (waiting.empty()) return false;
  spdlog::info("tune: fit extension: {} cell{} wait for confirm runs not finished (first: {}), run by another sweep "
               "process or shard; run this command again once they have finished",
               waiting.size(), waiting.size() == 1 ? "" : "s", waiting[0]);
  return true;
}

}  // namespace

int run_sweep(const Sweep& sweep, const SweepRunOptions& options) {
  if (options.jobs < 1) throw UsageError("--jobs must be at least 1");
  SweepScheduler scheduler(sweep, options);
  scheduler.plan();
  scheduler.open();
  while (scheduler.poll()) {
  }
  if (!sweep.tune || scheduler.interrupted()) return scheduler.report();

  // A tuned sweep's confirm phase: once every search run (of every shard) has finished, the
  // selection is final and names the confirm points.
  const TuneSummary tune = summarise_tune(sweep, sweep.out_dir);
  if (!tune.search_complete) {
    std::vector<std::string> open;
    for (const SweepPoint& p : expand_sweep(sweep)) {
      const auto rec = read_point_record(point_run_dir(sweep.out_dir, p));
      if (!rec || !(is_finished(rec->status) || rec->status == PointStatus::kFailed)) open.push_back(p.name);
    }
    spdlog::info("tune: {} search point{} not finished (first: {}), run by another sweep process or shard or not "
                 "started; the confirm phase starts once every search point has finished: run this command again then",
                 open.size(), open.size() == 1 ? "" : "s", open.empty() ? "-" : open[0]);
    const int code = scheduler.report();
    return code == 0 ? kSearchIncomplete : code;
  }
  std::string chosen;
  for (const TuneArmResult& a : tune.arms) {
    chosen += fmt::format("{}{} {}{}", chosen.empty() ? "" : ", ", a.name.empty() ? sweep.tune->key : a.name,
                          a.selected >= 0 ? sweep.tune->values[a.selected] : "none", a.at_edge ? " (at the edge)" : "");
  }
  spdlog::info("tune: search complete; selected {}: {}", sweep.tune->key, chosen);
  std::vector<SweepPoint> confirm = confirm_points(sweep, tune.selected());
  std::vector<Config> configs = validate_points(sweep, confirm);
  scheduler.begin_phase(std::move(confirm), std::move(configs));
  scheduler.plan();
  scheduler.start_phase("confirm phase: ");
  while (scheduler.poll()) {
  }
  const bool waiting = run_fit_extension(sweep, scheduler);
  const int code = scheduler.report();
  return code == 0 && waiting ? kSearchIncomplete : code;
}

}  // namespace normlab
