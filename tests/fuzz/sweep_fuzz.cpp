// libFuzzer target for the sweep-file parser (sweep/sweep_config.h, sweep/sweep_points.h), the path of
// `normlab sweep -c FILE`: parse_sweep_file, expand_sweep, validate_points, and the dump_sweep
// copy that `normlab sweep` writes to <sweep>/sweep.yaml and the summary parses again.
// Input: the text of a sweep file. It is written to configs/sweeps/fuzz.yaml inside a private copy
// of the repository's configs/ (data/ linked in), so that `base: ../default.yaml` and the other
// shipped configs resolve as they do in the repository. The copy lies in
// $NORMLAB_SWEEP_FUZZ_DIR/<pid> (run_fuzz.sh: build-fuzz/sweep-tree), else in a /tmp directory;
// it is removed at a normal exit, not after a crash.
//
// The contract checked:
//  - every step may only answer with UsageError (ConfigError included); any other exception, a
//    crash, a hang or a sanitizer report is a finding;
//  - a sweep that parses expands into product(axis lengths) x seeds points (a tuned ladder: only
//    the rungs it searches counted; tune.given: none without a ladder), with distinct names, each
//    overriding exactly the axis keys, the seeds innermost (testing::expansion_problem);
//  - points that validate give one Config each, with the point's seed and run directory;
//  - such a sweep dumps (dump_sweep) without throwing, and the dump parses back to the same sweep
//    (base, out_dir, set, axes, seeds, every tune field a verdict reads) whose points have the same
//    names: the summary finds the runs by those names (testing::dump_problem). Both checks live in
//    tests/sweep/sweep_contract.h, which SweepConfigTest also runs on every shipped sweep.
// validate_points calls check_and_resolve (train/run_config.cpp), which needs LibTorch for the
// model registry and the device; this target links a stand-in below with the checks that need
// none (validate_config, the data files exist, relative data paths taken from the copy's root
// rather than the working directory, which libFuzzer needs for its own paths).
// Built and run by tests/fuzz/run_fuzz.sh.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "config/load.h"
#include "core/errors.h"
#include "core/fs.h"
#include "sweep/sweep_points.h"
#include "train/run_config.h"
#include "../readme_tables.h"
#include "../sweep/sweep_contract.h"

#ifndef NORMLAB_SOURCE_DIR
#error "build with -DNORMLAB_SOURCE_DIR=\"<repository root>\""
#endif

namespace fs = std::filesystem;

namespace {
fs::path copy_root;  // the private copy: configs/, data/
}  // namespace

namespace normlab {
// Stand-in for train/run_config.cpp's check_and_resolve without LibTorch: the value rules, the
// registry names (read from src/model/README.md's tables, which DocsTest holds to the registries
// with the same reader), the data files; no device or memory checks, no corpus loading.
Config check_and_resolve(LoadedConfig loaded, bool check_data_files, RunData*) {
  static const std::string doc = testing::read_text(NORMLAB_SOURCE_DIR "/src/model/README.md");
  static const std::set<std::string> norms = testing::table_names(doc, "## Norms"),
                                     layouts = testing::table_names(doc, "## Layouts"),
                                     residuals = testing::table_names(doc, "## Residual streams"),
                                     value_residuals = testing::table_names(doc, "## Value residual"),
                                     parametrizations = testing::table_names(doc, "## Parametrization"),
                                     ffns = testing::table_names(doc, "## Sublayers");
  if (norms.empty() || layouts.empty() || residuals.empty() || value_residuals.empty() || parametrizations.empty() ||
      ffns.empty())
    std::abort();
  Config& c = loaded.config;
  Problems problems(loaded.source);
  problems.add_earlier(loaded.problems, loaded.problem_keys);
  validate_config(c, problems);
  if (!norms.count(c.model.norm.type)) problems.add("model.norm.type", "not a registered norm");
  if (c.model.qk_norm_type && !norms.count(*c.model.qk_norm_type)) {
    problems.add("model.qk_norm_type", "not a registered norm");
  }
  if (!layouts.count(c.model.layout)) problems.add("model.layout", "not a registered layout");
  if (!residuals.count(c.model.residual.type)) problems.add("model.residual.type", "not a registered residual type");
  if (!value_residuals.count(c.model.value_residual)) problems.add("model.value_residual", "not a registered mode");
  if (!parametrizations.count(c.param.type)) problems.add("param.type", "not a registered parametrization");
  if (!ffns.count(c.model.ffn)) problems.add("model.ffn", "not a registered FFN");
  if (check_data_files) {
    for (const auto& [key, paths] : {std::pair{"data.train", &c.data.train}, std::pair{"data.val", &c.data.val}}) {
      for (std::string& path : *paths) {
        if (!path.empty()) path = (copy_root / path).lexically_normal().string();
        if (!path.empty() && !problems.has(key) && !file_exists(path)) {
          problems.add(key, "file '" + path + "' not found");
        }
      }
    }
  }
  problems.raise_if_any();
  return c;
}
}  // namespace normlab

namespace {

// A private copy of configs/ with data/ linked in.
void remove_copy() {
  std::error_code ec;
  fs::remove_all(copy_root, ec);
}

std::string sweep_dir() {
  static const std::string dir = [] {
    fs::path tmp;
    if (const char* parent = std::getenv("NORMLAB_SWEEP_FUZZ_DIR")) {
      tmp = fs::path(parent) / std::to_string(getpid());  // one per process (-fork, -jobs)
      fs::remove_all(tmp);
      fs::create_directories(tmp);
    } else {
      char tmpl[] = "/tmp/normlab_sweep_fuzz.XXXXXX";
      if (!mkdtemp(tmpl)) std::abort();
      tmp = tmpl;
    }
    const fs::path root(NORMLAB_SOURCE_DIR);
    fs::copy(root / "configs", tmp / "configs",
             fs::copy_options::recursive | fs::copy_options::skip_symlinks);
    fs::create_directory_symlink(root / "data", tmp / "data");
    copy_root = tmp;
    std::atexit(remove_copy);
    return (tmp / "configs" / "sweeps").string();
  }();
  return dir;
}

void write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) std::abort();
}

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace normlab;
  const std::string dir = sweep_dir();
  const std::string path = dir + "/fuzz.yaml";
  write(path, std::string(reinterpret_cast<const char*>(data), size));
  try {
    const Sweep s = parse_sweep_file(path);
    const std::vector<SweepPoint> points = expand_sweep(s);

    check(testing::expansion_problem(s, points).empty());  // tests/sweep/sweep_contract.h

    const std::vector<Config> configs = validate_points(s, points);
    check(configs.size() == points.size());
    for (size_t i = 0; i < points.size(); ++i) {
      check(configs[i].seed == points[i].seed);
      check(configs[i].out_dir == point_run_dir(s.out_dir, points[i]));
    }

    // What `normlab sweep` writes as <sweep>/sweep.yaml, and the summary reads back: neither
    // step may fail for a sweep that ran (not even with a UsageError).
    const std::string dumped_path = dir + "/dumped.yaml";
    Sweep again;
    try {
      write(dumped_path, dump_sweep(s));
      again = parse_sweep_file(dumped_path);
    } catch (...) {
      __builtin_trap();
    }
    check(testing::dump_problem(s, again).empty());
  } catch (const UsageError&) {  // ConfigError included
  }
  return 0;
}
