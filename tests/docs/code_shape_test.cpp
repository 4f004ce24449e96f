// The run half's shape, held by reading the sources (no git, no child process): one owner for the
// restore, the step plan and the registry lookups, and the sizes the restructuring promised
// (src/train/README.md, "One step"; tests/README.md, "Tiers").
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "model/layouts/layout.h"
#include "model/norms/norm.h"
#include "model/residual/residual.h"
#include "test_util.h"

namespace normlab {
namespace {
namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// "path:line" of every line of src/**/*.cpp matching `re`, except under `except_dir`.
std::vector<std::string> grep_src(const std::string& re, const std::string& except_dir = "") {
  std::vector<std::string> hits;
  const fs::path src = fs::path(testing::source_dir()) / "src";
  const std::regex r(re);
  for (const auto& e : fs::recursive_directory_iterator(src)) {
    if (!e.is_regular_file() || e.path().extension() != ".cpp") continue;
    const std::string rel = fs::relative(e.path(), testing::source_dir()).string();
    if (!except_dir.empty() && rel.rfind(except_dir, 0) == 0) continue;
    std::istringstream in(read(e.path()));
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      ++n;
      if (std::regex_search(line, r)) hits.push_back(rel + ":" + std::to_string(n));
    }
  }
  return hits;
}

// Lines from the line matching `start` through the first line after it that is exactly `end`.
int64_t span_lines(const std::string& file, const std::string& start, const std::string& end) {
  std::istringstream in(read(fs::path(testing::source_dir()) / file));
  int64_t n = 0;
  bool in_span = false;
  for (std::string line; std::getline(in, line);) {
    if (!in_span && line.rfind(start, 0) == 0) in_span = true;
    if (!in_span) continue;
    ++n;
    if (line == end) return n;
  }
  return -1;
}

TEST(CodeShapeTest, TheCheckpointRestoreLivesInResumeAlone) {
  for (const char* fn : {R"(\bload_trainer_state\()", R"(\bset_torch_rng_state_hex\()"}) {
    for (const auto& hit : grep_src(fn)) {
      EXPECT_TRUE(hit.rfind("src/train/resume.cpp:", 0) == 0 || hit.rfind("src/train/checkpoint.cpp:", 0) == 0)
          << fn << " called outside resume.cpp: " << hit;
    }
  }
}

TEST(CodeShapeTest, TheStepPlanIsDecidedInOnePlace) {
  // Which steps are diagnostics, logged, evaluated or checkpointed: plan_at in step.cpp alone.
  for (const char* re : {R"(%\s*cfg_?\.diag\.every)", R"(%\s*cfg_?\.train\.log_every)", R"(%\s*cfg_?\.eval\.every)",
                         R"(%\s*cfg_?\.train\.checkpoint_every)"}) {
    for (const auto& hit : grep_src(re)) {
      EXPECT_EQ(hit.rfind("src/train/step.cpp:", 0), 0u) << re << " outside plan_at: " << hit;
    }
  }
}

TEST(CodeShapeTest, RegistryEntriesAreLookedUpThroughResolvedModel) {
  // find_layout / find_residual by a config's name: ResolvedModel::of alone (the registries
  // themselves and their own folders aside).
  for (const char* re : {R"(\bfind_layout\()", R"(\bfind_residual\()"}) {
    for (const auto& hit : grep_src(re)) {
      const bool registry = hit.rfind("src/model/layouts/", 0) == 0 || hit.rfind("src/model/residual/", 0) == 0;
      EXPECT_TRUE(registry || hit.rfind("src/model/transformer.cpp:", 0) == 0) << re << ": " << hit;
    }
    int in_transformer = 0;
    for (const auto& hit : grep_src(re)) in_transformer += hit.rfind("src/model/transformer.cpp:", 0) == 0;
    EXPECT_EQ(in_transformer, 1) << re << ": once, in ResolvedModel::of";
  }
}

TEST(CodeShapeTest, TheRunAndTheSweepRunnerStaySmall) {
  const int64_t run = span_lines("src/train/trainer.cpp", "class Run {", "};");
  EXPECT_GT(run, 0);
  EXPECT_LE(run, 250) << "class Run in src/train/trainer.cpp";
  // The sweep runner is the scheduler (launch, poll, claims, summary) and run_sweep, which drives
  // it through the search and confirm phases.
  const int64_t scheduler = span_lines("src/sweep/runner.cpp", "class SweepScheduler {", "};");
  EXPECT_GT(scheduler, 0);
  EXPECT_LE(scheduler, 260) << "class SweepScheduler in src/sweep/runner.cpp";
  const int64_t sweep = span_lines("src/sweep/runner.cpp", "int run_sweep(", "}");
  EXPECT_GT(sweep, 0);
  EXPECT_LE(sweep, 50) << "run_sweep in src/sweep/runner.cpp";
  const int64_t parse = span_lines("src/sweep/sweep_config.cpp", "Sweep parse_sweep_file(", "}");
  EXPECT_GT(parse, 0);
  EXPECT_LE(parse, 80) << "parse_sweep_file";
}

TEST(CodeShapeTest, RecordsAreWrittenByTheirTypesNotByLiteralKeys) {
  // The trainer and replay build typed records (metrics/records.h) and never spell a record key.
  for (const char* file : {"src/train/trainer.cpp", "src/train/replay.cpp"}) {
    const std::string code = read(fs::path(testing::source_dir()) / file);
    for (const char* key : {"\"kind\"", "\"tok_per_s\"", "\"loss_z\"", "\"val_loss\"", "\"layers_by_jump\"", "\"rows\"",
                            "\"baseline\"", "\"grad_norm_attn\"", "add_raw(", "JsonObject"}) {
      EXPECT_EQ(code.find(key), std::string::npos) << key << " in " << file;
    }
  }
}

TEST(CodeShapeTest, ReplayRunsTheTrainingStepNotACopyOfIt) {
  // normlab replay re-runs updates through TrainStep::run and looks inside through a
  // StepInspector: no batch windows, autocast, forward or update ratio of its own.
  const std::string replay = read(fs::path(testing::source_dir()) / "src/train/replay.cpp");
  EXPECT_NE(replay.find("step.run("), std::string::npos);
  for (const char* own : {"batch_offsets", "windows(", "AutocastGuard", "->forward(", "update_ratio(", "backward("}) {
    EXPECT_EQ(replay.find(own), std::string::npos) << own << " in src/train/replay.cpp";
  }
}

TEST(CodeShapeTest, TheModelHasOneBlockLoopAndNamesNoMethod) {
  // One loop over the blocks (in hidden(), through the carrier), and no shared model file compares
  // a registry name or carries a per-method flag.
  const fs::path root = testing::source_dir();
  const std::string transformer = read(root / "src/model/transformer.cpp");
  const std::regex loop(R"(for \(int64_t i = 0; i < n_blocks\(\); \+\+i\))");
  EXPECT_EQ(std::distance(std::sregex_iterator(transformer.begin(), transformer.end(), loop), std::sregex_iterator()), 1);
  for (const char* file : {"src/model/transformer.cpp", "src/model/transformer.h", "src/model/block.cpp", "src/model/block.h",
                           "src/model/attention.cpp", "src/model/attention.h", "src/model/ffn.cpp", "src/model/ffn.h",
                           "src/model/layouts/layout.h", "src/model/residual/residual.h"}) {
    const std::string code = read(root / file);
    for (const char* name : {"ngpt", "resi_dual", "normformer", "\"add\"", "\"hc\"", "\"mhc\"", "\"attnres\""}) {
      std::string lower = code;
      std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
      // Comments may name a method; code may not.
      std::istringstream lines(lower);
      int n = 0;
      for (std::string line; std::getline(lines, line);) {
        ++n;
        const auto code_part = line.substr(0, line.find("//"));
        EXPECT_EQ(code_part.find(name), std::string::npos) << file << ":" << n << " names " << name << ": " << line;
      }
    }
  }
}

TEST(CodeShapeTest, NoReferenceIntoATemporaryParameterDictionary) {
  // named_parameters() returns its dictionary by value: a reference to one of its entries dangles
  // at the end of the statement (an nGPT run with a value residual crashed on exactly that).
  // Any reference type (auto&, const auto&, const torch::Tensor&, ...), not one spelling.
  for (const auto& hit : grep_src(R"(&\s*\w+\s*=[^;]*named_parameters\([^)]*\)\s*\[)")) {
    ADD_FAILURE() << "a reference into named_parameters()' temporary: " << hit;
  }
}

TEST(CodeShapeTest, ProblemsAreCollectedByOneClass) {
  // Config and sweep files report through config/load.h's Problems; no second collector.
  EXPECT_EQ(grep_src(R"(class\s+Collector\b)"), std::vector<std::string>{});
  for (const auto& hit : grep_src(R"(class\s+Problems\b)")) ADD_FAILURE() << "a second Problems: " << hit;
}

TEST(CodeShapeTest, TheMutantListNamesGuaranteesNotProjectHistory) {
  const std::string list = read(fs::path(testing::source_dir()) / "tests/mutants/mutants.txt");
  std::smatch m;
  EXPECT_FALSE(std::regex_search(list, m, std::regex(R"(\b(finding|issue) [0-9])"))) << m.str();
}

// The quoted includes `file` reaches, itself included, as paths relative to the checkout.
std::set<std::string> reachable_includes(const std::string& file) {
  const fs::path root = testing::source_dir();
  std::set<std::string> seen;
  std::vector<std::string> todo = {file};
  const std::regex inc(R"re(^#include\s+"([^"]+)")re");
  while (!todo.empty()) {
    const std::string f = todo.back();
    todo.pop_back();
    if (!seen.insert(f).second) continue;
    std::istringstream in(read(root / f));
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (!std::regex_search(line, m, inc)) continue;
      const std::string name = m[1].str();
      if (fs::exists(root / "src" / name)) todo.push_back("src/" + name);
      else if (fs::exists(root / fs::path(f).parent_path() / name)) todo.push_back((fs::path(f).parent_path() / name).string());
    }
  }
  return seen;
}

TEST(CodeShapeTest, TheFuzzTargetsCompileWithoutLibTorch) {
  // tests/fuzz/run_fuzz.sh compiles its targets with clang and no LibTorch: none of the sources it
  // names may reach core/torch.h (a header that leaks a tensor type into run_config.h broke it).
  const std::string script = read(fs::path(testing::source_dir()) / "tests/fuzz/run_fuzz.sh");
  const std::regex src(R"re(\$ROOT/((src|tests)/[A-Za-z0-9_/]+\.cpp))re");
  int n = 0;
  for (auto it = std::sregex_iterator(script.begin(), script.end(), src); it != std::sregex_iterator(); ++it) {
    ++n;
    const std::string cpp = (*it)[1].str();
    for (const auto& h : reachable_includes(cpp)) {
      EXPECT_NE(h, "src/core/torch.h") << cpp << " reaches LibTorch";
      EXPECT_EQ(read(fs::path(testing::source_dir()) / h).find("#include <torch/"), std::string::npos)
          << cpp << " reaches LibTorch through " << h;
    }
  }
  EXPECT_GE(n, 8) << "the sources named in tests/fuzz/run_fuzz.sh";
}

}  // namespace
}  // namespace normlab
