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
#include <sstream>
#include <thread>

#include "config/load.h"
#include "core/errors.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/system.h"
#include "sweep/summary.h"

extern char** environ;

namespace normlab {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Everything the child needs, prepared before fork (the child only calls async-signal-safe code).
struct ChildCommand {
  std::vector<std::string> argv, env;
  std::string log_path;
};

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
  c.train.threads = 0;
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
  return out;
}

int threads_per_job(int jobs) {
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(1, jobs));
}

int run_sweep(const Sweep& sweep, const SweepRunOptions& options) {
  if (options.jobs < 1) throw UsageError("--jobs must be at least 1");
  const SweepShard& shard = options.shard;
  const std::vector<SweepPoint> points = expand_sweep(sweep);
  const std::vector<Config> configs = validate_points(sweep, points);
  const std::string& dir = sweep.out_dir;
  std::vector<size_t> mine;  // this shard's points
  for (size_t i = 0; i < points.size(); ++i) {
    if (shard.has(i)) mine.push_back(i);
  }

  // What a point needs, from its run directory: decided for the plan printed at the start, and
  // again once the point is claimed (another sweep process may have run it meanwhile).
  auto plan_of = [&](size_t i) {
    const fs::path run = point_run_dir(dir, points[i]);
    const auto rec = read_point_record(run.string());
    if (rec && (rec->status == "done" || rec->status == "diverged")) return Plan::kSkip;
    if (file_exists((run / "checkpoints" / "LATEST").string())) return Plan::kResume;
    return Plan::kFresh;
  };
  // Decide every point before touching anything; runs of another config are never mixed in.
  std::vector<Plan> plans(points.size(), Plan::kFresh);
  std::vector<std::string> stale;
  for (size_t i : mine) {
    const fs::path run = point_run_dir(dir, points[i]);
    if (file_exists((run / "config.yaml").string())) {
      bool same = false;
      try {
        same = comparable(parse_config_file((run / "config.yaml").string()).config) ==
               comparable(configs[i]);
      } catch (const UsageError&) {
      }
      if (!same) stale.push_back(run.string());
    }
    plans[i] = plan_of(i);
  }
  if (!stale.empty()) {
    throw UsageError(fmt::format(
        "{}: {} run director{} hold a run of another config than this sweep gives {} (first: {}); "
        "use --out DIR for a new sweep directory, or delete them to run them again",
        dir, stale.size(), stale.size() == 1 ? "y" : "ies", stale.size() == 1 ? "it" : "them",
        stale[0]));
  }

  fs::create_directories(fs::path(dir) / "runs");
  fs::create_directories(fs::path(dir) / "claims");
  // One sweep process per directory and shard at a time (released by the kernel if it dies).
  // Different shards, or a shard beside the whole sweep, share the directory point by point.
  const std::string shard_name =
      shard.whole() ? "" : fmt::format("shard {}/{}", shard.index, shard.count);
  const DirectoryLock lock(
      (fs::path(dir) / (shard.whole() ? std::string("sweep.lock")
                                      : fmt::format("sweep.shard-{}-of-{}.lock", shard.index,
                                                    shard.count)))
          .string(),
      shard.whole() ? dir + ": another normlab sweep is running on this directory"
                    : fmt::format("{}: another normlab sweep is running {} on this directory",
                                  dir, shard_name));
  add_log_file((fs::path(dir) / "sweep.log").string());
  write_file_atomic((fs::path(dir) / "sweep.yaml").string(), dump_sweep(sweep));
  const int threads = threads_per_job(options.jobs);
  const auto env = child_env(threads);
  size_t n_skip = 0, n_resume = 0;
  for (size_t i : mine) {
    n_skip += plans[i] == Plan::kSkip;
    n_resume += plans[i] == Plan::kResume;
  }
  spdlog::info(
      "normlab sweep: {}{} points ({} finished earlier, {} to resume, {} new) | {} job{} x {} "
      "thread{} | {}",
      shard.whole() ? "" : fmt::format("{}: {} of ", shard_name, mine.size()), points.size(),
      n_skip, n_resume, mine.size() - n_skip - n_resume, options.jobs,
      options.jobs == 1 ? "" : "s", threads, threads == 1 ? "" : "s", dir);
  auto write_summary = [&] {
    // Every sweep process sharing the directory rewrites the summary: under the lock, the last
    // write sees every point record written before it.
    const DirectoryLock summary_lock((fs::path(dir) / "summary.lock").string());
    write_summary_files(summarise_sweep(sweep, points, dir));
  };
  write_summary();

  std::vector<size_t> todo;
  for (size_t i : mine) {
    if (plans[i] != Plan::kSkip) todo.push_back(i);
  }
  size_t next = 0, finished = n_skip, elsewhere = 0;
  std::vector<Job> running;
  std::map<size_t, std::unique_ptr<DirectoryLock>> claims;  // held while the point trains
  bool forwarded = false;

  auto start = [&](size_t i) {
    const SweepPoint& p = points[i];
    const std::string run = point_run_dir(dir, p);
    std::unique_ptr<DirectoryLock> claim;
    try {
      claim = std::make_unique<DirectoryLock>(
          (fs::path(dir) / "claims" / (p.name + ".lock")).string(), "");
    } catch (const UsageError&) {
      ++finished;
      ++elsewhere;
      spdlog::info("[{}/{}] skip     {}: another normlab sweep process is running it", finished,
                   mine.size(), p.name);
      return;
    }
    plans[i] = plan_of(i);
    if (plans[i] == Plan::kSkip) {
      ++finished;
      spdlog::info("[{}/{}] skip     {}: finished by another normlab sweep process", finished,
                   mine.size(), p.name);
      return;
    }
    const bool resume = plans[i] == Plan::kResume;
    double prior = 0;
    if (resume) {
      if (const auto rec = read_point_record(run); rec && std::isfinite(rec->wall_s))
        prior = rec->wall_s;
    } else {
      fs::remove_all(run);  // a start that never reached its first checkpoint
    }
    fs::create_directories(run);
    PointRecord rec;
    rec.status = "running";
    write_point_record(run, p, rec);
    ChildCommand cmd;
    cmd.argv = {"normlab", "train", "-c", sweep.base};
    for (const auto& o : point_overrides(sweep, p)) cmd.argv.insert(cmd.argv.end(), {"--set", o});
    cmd.argv.insert(cmd.argv.end(),
                    {"--set", fmt::format("train.threads={}", threads), "--out", run});
    if (resume) cmd.argv.push_back("--resume");
    cmd.env = env;
    cmd.log_path = (fs::path(run) / "stderr.log").string();
    running.push_back({i, spawn_child(options.exe, cmd.argv, cmd.env, cmd.log_path, "normlab sweep"), Clock::now(), prior});
    claims[i] = std::move(claim);
    spdlog::info("start   {}{}", p.name, resume ? " (resuming from its checkpoint)" : "");
  };

  auto finish = [&](const Job& job, int wait_status) {
    const SweepPoint& p = points[job.point];
    const std::string run = point_run_dir(dir, p);
    const int code =
        WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
    const SummaryValues m = run_metrics((fs::path(run) / "metrics.jsonl").string());
    const bool diverged = m[kDiverged] == 1;
    PointRecord rec;
    rec.exit_code = code;
    rec.wall_s = job.prior_wall_s + std::chrono::duration<double>(Clock::now() - job.start).count();
    if (code == 0) {
      rec.status = diverged ? "diverged" : "done";
    } else if (code == 130 || (forwarded && WIFSIGNALED(wait_status))) {
      rec.status = "running";  // interrupted: resumable, not done
    } else {
      rec.status = diverged ? "diverged" : "failed";
    }
    write_point_record(run, p, rec);
    claims.erase(job.point);
    ++finished;
    std::string what;
    if (rec.status == "failed") {
      what = fmt::format("exit {}: {} (log: {}/stderr.log)", code, last_line(run + "/stderr.log"),
                         run);
    } else if (rec.status == "running") {
      what = "interrupted; a re-run resumes it";
    } else {
      what = std::isfinite(m[kFinalTrainLoss]) ? fmt::format("loss {:.4f}", m[kFinalTrainLoss])
                                               : "loss not finite";
      if (code != 0) what += fmt::format(" (exit {}: {})", code, last_line(run + "/stderr.log"));
    }
    spdlog::info("[{}/{}] {:<8} {}: {}, {}", finished, mine.size(), rec.status, p.name, what,
                 seconds(rec.wall_s));
    write_summary();
  };

  while (next < todo.size() || !running.empty()) {
    const bool stopping = options.stop && options.stop->load();
    if (stopping && !forwarded) {
      forwarded = true;
      spdlog::info("interrupted: asking {} running point{} to checkpoint and stop ({} not started)",
                   running.size(), running.size() == 1 ? "" : "s", todo.size() - next);
      for (const auto& j : running) ::kill(j.pid, SIGINT);
    }
    while (!stopping && running.size() < static_cast<size_t>(options.jobs) && next < todo.size()) {
      start(todo[next++]);
    }
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, WNOHANG);
    if (pid > 0) {
      auto it =
          std::find_if(running.begin(), running.end(), [&](const Job& j) { return j.pid == pid; });
      if (it != running.end()) {
        const Job job = *it;
        running.erase(it);
        finish(job, st);
      }
      continue;
    }
    if (stopping && running.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  write_summary();
  size_t done = 0, diverged = 0, failed = 0;
  for (size_t i : mine) {
    const auto rec = read_point_record(point_run_dir(dir, points[i]));
    if (!rec) continue;
    done += rec->status == "done";
    diverged += rec->status == "diverged";
    failed += rec->status == "failed";
  }
  spdlog::info(
      "sweep {}{}: {} done, {} diverged, {} failed, {} not finished of {}{}; summary in "
      "{}/summary.md",
      shard_name.empty() ? "" : shard_name + " ", forwarded ? "interrupted" : "finished", done,
      diverged, failed, mine.size() - done - diverged - failed, mine.size(),
      elsewhere ? fmt::format(" ({} run by another sweep process)", elsewhere) : "", dir);
  if (forwarded) return 130;
  return failed ? 1 : 0;
}

}  // namespace normlab
