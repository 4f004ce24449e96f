// The documentation cannot go stale against the code: the README's lists of norms and layouts are
// the registries, every config choice it names exists, and every key a run with full diagnostics
// writes to metrics.jsonl is defined in src/metrics/README.md. Below those, the repository's own
// claims about itself: its licence, the README's first screen, what the sweeps cover, the mutant
// count, links and anchors, which script installs anything. Those checks read files only (no child
// process, no git), so they run in the unit tier.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include "config/load.h"
#include "model/layouts/layout.h"
#include "model/norms/norm.h"
#include "model/parametrization.h"
#include "model/transformer.h"
#include "readme_tables.h"
#include "optim/registry.h"
#include "test_util.h"
#include "train/run_config.h"
#include "train/schedules/schedule_type.h"
#include "train/trainer.h"

namespace normlab {
namespace {

std::string read_doc(const std::string& relative) {
  std::ifstream in(testing::source_dir() + "/" + relative);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using testing::table_names;  // tests/readme_tables.h, shared with the sweep fuzzer's stand-in

// Every backticked name on the README line that starts with `prefix`.
std::set<std::string> listed(const std::string& readme, const std::string& prefix) {
  std::istringstream lines(readme);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    std::set<std::string> out;
    const std::regex name("`([a-z0-9_]+)`");
    for (std::sregex_iterator it(line.begin(), line.end(), name), end; it != end; ++it) out.insert((*it)[1]);
    return out;
  }
  return {};
}

TEST(DocsTest, ModelReadmeTablesAreExactlyTheRegisteredEntries) {
  const std::string doc = read_doc("src/model/README.md");
  std::set<std::string> norms, layouts, residuals;
  for (const auto& n : norm_registry()) norms.insert(n.name);
  for (const auto& l : layout_registry()) layouts.insert(l.name);
  for (const auto& r : residual_registry()) residuals.insert(r.name);
  EXPECT_EQ(table_names(doc, "## Norms"), norms);
  EXPECT_EQ(table_names(doc, "## Layouts"), layouts);
  EXPECT_EQ(table_names(doc, "## Residual streams"), residuals);
  std::set<std::string> value_residuals;
  for (const auto& v : value_residual_registry()) value_residuals.insert(v.name);
  EXPECT_EQ(table_names(doc, "## Value residual"), value_residuals);
  std::set<std::string> ffns;
  for (const auto& f : ffn_registry()) ffns.insert(f.name);
  EXPECT_EQ(table_names(doc, "## Sublayers"), ffns);
  std::set<std::string> parametrizations;
  for (const auto& t : parametrization_registry()) parametrizations.insert(t.name);
  EXPECT_EQ(table_names(doc, "## Parametrization"), parametrizations);
}

TEST(DocsTest, OptimReadmeTableIsExactlyTheRegisteredOptimizers) {
  std::set<std::string> names;
  for (const auto& e : optimizer_registry()) names.insert(e.name);
  EXPECT_EQ(table_names(read_doc("src/optim/README.md"), "## Optimizers"), names);
}

TEST(DocsTest, TrainReadmeTableIsExactlyTheRegisteredSchedules) {
  std::set<std::string> names;
  for (const auto& t : schedule_registry()) names.insert(t.name);
  EXPECT_EQ(table_names(read_doc("src/train/README.md"), "## Optimisation"), names);
}

// The front door may name fewer (it links to the tables), never a name that does not exist.
TEST(DocsTest, EveryNormAndLayoutTheReadmeNamesIsRegistered) {
  const std::string readme = read_doc("README.md");
  const auto norms = listed(readme, "**Norms:**"), layouts = listed(readme, "**Layouts:**");
  EXPECT_FALSE(norms.empty());
  EXPECT_FALSE(layouts.empty());
  for (const auto& n : norms) EXPECT_NE(find_norm(n), nullptr) << "README.md names norm " << n;
  for (const auto& l : layouts) EXPECT_NE(find_layout(l), nullptr) << "README.md names layout " << l;
}

TEST(DocsTest, ReadmeIsAFrontDoorOfAtMost250Lines) {
  const std::string readme = read_doc("README.md");
  EXPECT_LE(std::count(readme.begin(), readme.end(), '\n'), 250);
  EXPECT_EQ(readme.find(std::string("..") + "/shared"), std::string::npos);
}

// The repository stands on its own: no tracked file names a path outside it (the external
// contract's file, a sibling checkout, a developer's machine). It runs git: the integration tier.
TEST(DocsRunTest, NoTrackedFileNamesAPathOutsideTheRepository) {
  const std::string root = testing::source_dir();
  if (testing::run_command("git -C '" + root + "' rev-parse --git-dir").status != 0) GTEST_SKIP() << "not a git checkout";
  // The patterns are split so that this file does not match them itself.
  const std::string patterns = std::string("-e '\\.\\./shar") + "ed' -e 'MODEL\\.m" + "d' -e '/wor" + "k/' -e '/hom" + "e/'";
  const auto r = testing::run_command("git -C '" + root + "' grep -I -n -E " + patterns);
  EXPECT_EQ(r.out, "") << "tracked files naming paths outside the repository:\n" << r.out;
}

// Every `key: value` / `key=value` in backticks whose key is a config choice (a norm, a layout or
// an enum) names a value the config accepts; numbers and paths are not checked.
TEST(DocsTest, EveryConfigChoiceTheDocsNameExists) {
  std::set<std::string> keys;
  for (const auto& [key, value] : flat_values(Config{})) keys.insert(key);
  // A choice key: an unknown word is refused with "expected one of" or "not a registered".
  auto is_choice = [](const std::string& key) {
    try {
      LoadedConfig l = parse_config_text("{}\n", "<doc>", {key + "=not_a_choice_value"}, true);
      Problems p(l.source);
      p.add_earlier(l.problems, l.problem_keys);
      validate_config(l.config, p);
      check_model_config(l.config.model, p);
      check_param_config(l.config, p);
      for (const auto& line : p.lines()) {
        if (line.find(key + ":") != std::string::npos &&
            (line.find("expected one of") != std::string::npos || line.find("not a registered") != std::string::npos))
          return true;
      }
    } catch (const std::exception&) {
    }
    return false;
  };
  const std::regex pair("([a-z_]+(?:\\.[a-z_]+)+)(?:: |=)([a-z][a-z0-9_]*)");
  int checked = 0;
  for (const char* file : {"README.md", "configs/README.md", "configs/sweeps/README.md", "src/model/README.md",
                           "src/train/README.md", "src/optim/README.md", "src/metrics/README.md", "src/parallel/README.md", "src/cli/README.md",
                           "data/README.md", "tests/README.md", "scripts/README.md"}) {
  const std::string readme = read_doc(file);
  EXPECT_FALSE(readme.empty()) << file;
  for (std::sregex_iterator it(readme.begin(), readme.end(), pair), end; it != end; ++it) {
    const std::string key = (*it)[1], value = (*it)[2];
    if (!keys.count(key) || !is_choice(key)) continue;
    LoadedConfig l = parse_config_text("{}\n", "<README.md>", {key + "=" + value}, true);
    Problems p(l.source);
    p.add_earlier(l.problems, l.problem_keys);
    validate_config(l.config, p);
    check_model_config(l.config.model, p);
    check_param_config(l.config, p);
    // Only whether the value exists: rules between keys (fp16 needs cuda) are not the docs' concern.
    for (const auto& line : p.lines()) {
      const bool unknown = line.find(key + ":") != std::string::npos &&
                           (line.find("expected one of") != std::string::npos ||
                            line.find("not a registered") != std::string::npos ||
                            line.find("is not one of") != std::string::npos);
      EXPECT_FALSE(unknown) << file << " names " << key << ": " << value << ": " << line;
    }
    ++checked;
  }
  }
  EXPECT_GE(checked, 10) << "the docs name almost no config choice?";
}

// A key of a record as the docs name it: top-level keys, `layers.<series>`; `params` is one key.
std::set<std::string> record_keys(const YAML::Node& r) {
  std::set<std::string> out;
  for (const auto& kv : r) {
    const std::string k = kv.first.as<std::string>();
    out.insert(k);
    if (k == "layers") {
      for (const auto& s : kv.second) out.insert("layers." + s.first.as<std::string>());
    }
  }
  return out;
}

TEST(DocsRunTest, EveryMetricsKeyOfAFullDiagnosticsRunIsDocumented) {
  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "run");
  c.train.steps = 12;
  c.train.accum = 2;        // grad_noise_scale
  c.optim.qk_clip = 50;     // qk_clipped
  c.diag.every = 1;         // every statistic at every step
  c.diag.per_param = true;  // params
  c.diag.spike.window = 4;  // loss_z, grad_norm_z
  c.diag.spike.zscore = 0.5;  // a low threshold: spike records too
  c.eval.every = 6;
  ASSERT_EQ(train(check_and_resolve(LoadedConfig{c, {}}, true), {}), 0);
  // The residual-stream methods' own keys: AttnRes with value residual, mHC, nGPT.
  auto variant = [&](const std::string& name, const std::function<void(Config&)>& set) {
    Config v = testing::tiny_config(dir / name);
    v.train.steps = 2;
    v.diag.every = 1;
    set(v);
    ASSERT_EQ(train(check_and_resolve(LoadedConfig{v, {}}, true), {}), 0) << name;
  };
  variant("attnres", [](Config& v) {
    v.model.residual.type = "attnres";
    v.model.value_residual = "token";
  });
  variant("mhc", [](Config& v) { v.model.residual.type = "mhc"; });
  variant("ngpt", [](Config& v) { v = fit_to_layout(*find_layout("ngpt"), v); });
  std::set<std::string> keys;
  for (const char* run : {"run", "attnres", "mhc", "ngpt"}) {
    for (const char* kind : {"train", "eval", "spike"}) {
      for (const auto& r : testing::records(dir / run, kind)) {
        const auto k = record_keys(r);
        keys.insert(k.begin(), k.end());
      }
    }
  }
  for (const char* expected : {"layers.act_kurtosis", "grad_noise_scale", "qk_clipped", "params", "loss_z", "z",
                               "layers.res_gain_fwd", "layers.vres_lambda", "layers.ngpt_a1", "depth_weights"}) {
    EXPECT_TRUE(keys.count(expected)) << "the run did not write " << expected << ": the test lost its coverage";
  }
  const std::string doc = read_doc("src/metrics/README.md");
  for (const auto& k : keys) {
    EXPECT_NE(doc.find("`" + k + "`"), std::string::npos) << "metrics.jsonl key " << k
                                                           << " is not defined in src/metrics/README.md";
  }
}


// ---- The repository's claims about itself, read from the files. ----

namespace fs = std::filesystem;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Every file under the repository-relative `tops` (a file or a folder), as repository-relative
// paths, sorted. Build folders (build, build-*), run folders, caches and hidden folders below the
// top are skipped: they are outputs, not the repository.
std::vector<std::string> repo_files(const std::vector<std::string>& tops) {
  const fs::path root = testing::source_dir();
  std::vector<std::string> out;
  for (const auto& top : tops) {
    const fs::path start = root / top;
    if (fs::is_regular_file(start)) {
      out.push_back(top);
      continue;
    }
    if (!fs::is_directory(start)) continue;
    for (auto it = fs::recursive_directory_iterator(start); it != fs::recursive_directory_iterator(); ++it) {
      const std::string name = it->path().filename().string();
      if (it->is_directory()) {
        if (name.rfind("build", 0) == 0 || name == "runs" || name == "__pycache__" || name[0] == '.')
          it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) out.push_back(fs::relative(it->path(), root).string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Every Markdown file of the repository.
std::vector<std::string> markdown_files() {
  std::vector<std::string> out;
  for (const auto& f : repo_files({"."})) {
    if (ends_with(f, ".md")) out.push_back(f.rfind("./", 0) == 0 ? f.substr(2) : f);
  }
  return out;
}

// The scripts: files under scripts/, tests/ and .ci/ that are shell or Python, by name or by a
// `#!` first line.
std::vector<std::string> script_files() {
  std::vector<std::string> out;
  for (const auto& f : repo_files({"scripts", "tests", ".ci"})) {
    bool script = ends_with(f, ".sh") || ends_with(f, ".py");
    if (!script) {
      std::ifstream in(testing::source_dir() + "/" + f);
      char head[2] = {0, 0};
      in.read(head, 2);
      script = head[0] == '#' && head[1] == '!';
    }
    if (script) out.push_back(f);
  }
  return out;
}

// The part of a script line that runs as a command: nothing for a comment, the part before a
// trailing ` #` comment, and only the part before an `echo` / `printf`, whose text is a message to
// the user (one that may name a command to run).
std::string command_part(const std::string& line) {
  const auto first = line.find_first_not_of(" \t");
  if (first == std::string::npos || line[first] == '#') return "";
  std::string cmd = line.substr(first);
  const auto comment = cmd.find(" #");
  if (comment != std::string::npos) cmd = cmd.substr(0, comment);
  for (const char* word : {"echo ", "printf "}) {
    const auto at = cmd.find(word);
    if (at != std::string::npos && (at == 0 || !std::isalnum(static_cast<unsigned char>(cmd[at - 1]))))
      cmd = cmd.substr(0, at);
  }
  return cmd;
}

TEST(DocsTest, TheRepositoryHasAnMitLicenseTheReadmeNames) {
  const std::string license = read_doc("LICENSE");
  EXPECT_EQ(license.rfind("MIT License\n", 0), 0u) << "LICENSE is missing or not the MIT licence";
  EXPECT_NE(license.find("Copyright (c) 2026 NormLab developers"), std::string::npos);
  EXPECT_NE(license.find("THE SOFTWARE IS PROVIDED \"AS IS\""), std::string::npos);
  EXPECT_NE(read_doc("README.md").find("](LICENSE)"), std::string::npos) << "README.md does not link LICENSE";
}

// The first screen: the title, a one-line pitch, the two commands exactly, then (within the first
// 30 lines) a figure that is a file in the repository with a caption naming the command that made
// it. Every duration and test count the set-up paragraph gives is one written up where the
// measurements live (tests/README.md, scripts/BENCHMARKS.md).
TEST(DocsTest, TheReadmeOpensWithAPitchTheTwoCommandsAndAFigureARunMade) {
  const std::string readme = read_doc("README.md");
  const auto lines = lines_of(readme);
  ASSERT_GE(lines.size(), 30u);
  EXPECT_EQ(lines[0], "# NormLab");
  EXPECT_EQ(lines[1], "");
  EXPECT_FALSE(lines[2].empty()) << "the pitch line";
  EXPECT_NE(lines[2][0], '#');
  EXPECT_EQ(lines[3], "");
  EXPECT_EQ(lines[4], "```bash");
  EXPECT_EQ(lines[5], "scripts/train.sh   # installs what is missing, builds, trains configs/default.yaml on the toy corpus");
  EXPECT_EQ(lines[6], "scripts/test.sh    # same set-up, then builds and runs the whole test suite (CTest)");
  EXPECT_EQ(lines[7], "```");

  const std::regex image("^!\\[[^\\]]+\\]\\(([^)]+\\.png)\\)$");
  std::smatch m;
  bool figure = false;
  for (size_t i = 8; i < 30 && i + 1 < lines.size(); ++i) {
    if (!std::regex_search(lines[i], m, image)) continue;
    figure = true;
    EXPECT_TRUE(fs::is_regular_file(fs::path(testing::source_dir()) / m[1].str())) << m[1];
    const std::string& caption = lines[i + 1];
    EXPECT_TRUE(caption.find("`build/normlab ") != std::string::npos || caption.find("`scripts/") != std::string::npos)
        << "the figure's caption names no command: " << caption;
  }
  EXPECT_TRUE(figure) << "no figure in the README's first 30 lines";

  // The paragraph after the commands.
  std::string setup;
  for (size_t i = 9; i < lines.size() && !lines[i].empty(); ++i) setup += lines[i] + "\n";
  const std::string measured = read_doc("tests/README.md") + read_doc("scripts/BENCHMARKS.md");
  const std::regex figure_re("(\\d+ min \\d+ s|\\d+ tests)");
  int figures = 0;
  for (std::sregex_iterator it(setup.begin(), setup.end(), figure_re), end; it != end; ++it, ++figures) {
    std::string f = (*it)[1];
    EXPECT_NE(measured.find(f), std::string::npos)
        << "README.md gives " << f << ", which neither tests/README.md nor scripts/BENCHMARKS.md records";
  }
  EXPECT_GE(figures, 3) << "the set-up paragraph gives no build, test or training time";
}

// placement.yaml and norms.yaml sweep a subset of the registries: a paragraph that names one of
// them (or scripts/bench.sh --layouts, which times the same layouts) does not say "every layout" /
// "all norms", and the shipped-sweeps table lists exactly the names on each sweep's axis.
TEST(DocsTest, SweepDocsNameExactlyTheLayoutsAndNormsTheSweepsCover) {
  std::set<std::string> layouts, norms;
  for (const auto& l : layout_registry()) layouts.insert(l.name);
  for (const auto& n : norm_registry()) norms.insert(n.name);
  auto axis = [](const std::string& sweep, const std::string& key) {
    std::set<std::string> out;
    for (const auto& v : YAML::LoadFile(testing::source_dir() + "/configs/sweeps/" + sweep)["axes"][key])
      out.insert(v.as<std::string>());
    return out;
  };
  const auto placement = axis("placement.yaml", "model.layout"), which_norm = axis("norms.yaml", "model.norm.type");
  std::set<std::string> bench_layouts;
  {
    std::smatch m;
    const std::string bench = read_doc("scripts/bench.sh");
    ASSERT_TRUE(std::regex_search(bench, m, std::regex("for layout in ([a-z_ ]+); do")));
    std::istringstream words(m[1].str());
    for (std::string w; words >> w;) bench_layouts.insert(w);
  }
  ASSERT_FALSE(placement.empty());
  ASSERT_FALSE(which_norm.empty());

  // Table rows of configs/sweeps/README.md: the registered names in the row are the axis.
  const std::string sweeps = read_doc("configs/sweeps/README.md");
  auto row_names = [&](const std::string& file, const std::set<std::string>& registered) {
    std::set<std::string> out;
    for (const auto& line : lines_of(sweeps)) {
      if (line.rfind("| `" + file + "` |", 0) != 0) continue;
      const std::regex name("`([a-z0-9_]+)`");
      for (std::sregex_iterator it(line.begin(), line.end(), name), end; it != end; ++it)
        if (registered.count((*it)[1])) out.insert((*it)[1]);
    }
    return out;
  };
  EXPECT_EQ(row_names("placement.yaml", layouts), placement);
  EXPECT_EQ(row_names("norms.yaml", norms), which_norm);

  // "Every"/"all" claims in the paragraphs that name a sweep covering a subset.
  struct Subject {
    std::string mention;
    bool subset;
  };
  const std::vector<Subject> subjects = {{"placement.yaml", placement != layouts},
                                         {"norms.yaml", which_norm != norms},
                                         {"--layouts", bench_layouts != layouts}};
  const std::regex every("\\b(every|all)( the| registered| block)* (layout|norm)s?\\b", std::regex::icase);
  for (const char* file : {"README.md", "configs/sweeps/README.md", "configs/sweeps/placement.yaml",
                           "configs/sweeps/norms.yaml", "scripts/bench.sh", "scripts/README.md",
                           "scripts/BENCHMARKS.md", "tests/README.md"}) {
    // Paragraphs: blocks between blank lines; each table row on its own.
    std::vector<std::string> paragraphs(1);
    for (const auto& line : lines_of(read_doc(file))) {
      const bool blank = line.find_first_not_of(" \t#") == std::string::npos;
      if (blank || line.rfind("|", 0) == 0) paragraphs.emplace_back();
      paragraphs.back() += line + "\n";
      if (line.rfind("|", 0) == 0) paragraphs.emplace_back();
    }
    for (const auto& para : paragraphs) {
      for (const auto& s : subjects) {
        if (!s.subset || para.find(s.mention) == std::string::npos) continue;
        std::smatch m;
        EXPECT_FALSE(std::regex_search(para, m, every))
            << file << " says \"" << m[0] << "\" of " << s.mention << ", which covers a subset:\n" << para;
      }
    }
  }
}

// scripts/BENCHMARKS.md and the benchmark scripts report what was measured: no targets, no project
// history. And what the page says runs on CUDA for the norms is what the norm files call.
TEST(DocsTest, BenchmarksReportResultsWithoutTargetsOrHistory) {
  const std::string bench = read_doc("scripts/BENCHMARKS.md");
  const std::regex history(
      "\\b(we|our|target|targets|met|missed|budget|goal|this round|this change|this work|previous session|"
      "helper session|issue \\d+)\\b",
      std::regex::icase);
  int n = 0;
  for (const auto& line : lines_of(bench)) {
    ++n;
    std::string text = std::regex_replace(line, std::regex("--target"), "");
    std::smatch m;
    EXPECT_FALSE(std::regex_search(text, m, history)) << "scripts/BENCHMARKS.md:" << n << ": \"" << m[0] << "\"";
  }
  for (const auto& f : repo_files({"scripts"})) {
    if (f.find("bench") == std::string::npos || !(ends_with(f, ".sh") || ends_with(f, ".py"))) continue;
    const std::string text = read_doc(f);
    for (const char* column : {"\"target\"", "\"met\"", "TARGETS", "targets["})
      EXPECT_EQ(text.find(column), std::string::npos) << f << " prints a target column (" << column << ")";
  }
  // The CUDA path of the norms with a hand-written CPU kernel.
  ASSERT_NE(read_doc("src/model/norms/rmsnorm.cpp").find("at::rms_norm("), std::string::npos);
  EXPECT_NE(bench.find("call `at::rms_norm`"), std::string::npos)
      << "scripts/BENCHMARKS.md does not say that rmsnorm calls at::rms_norm on CUDA";
  EXPECT_EQ(bench.find("on CUDA are composed ops"), std::string::npos);
}

// The mutant count written in tests/README.md, and every "N patches" anywhere in the docs, is the
// number of patches in tests/mutants/.
TEST(DocsTest, EveryMutantCountIsTheNumberOfPatches) {
  int patches = 0;
  for (const auto& f : repo_files({"tests/mutants"})) patches += ends_with(f, ".patch");
  ASSERT_GT(patches, 0);
  std::smatch m;
  const std::string tests_readme = read_doc("tests/README.md");
  ASSERT_TRUE(std::regex_search(tests_readme, m, std::regex("`tests/mutants/` holds (\\d+) patches")))
      << "tests/README.md no longer says how many patches tests/mutants/ holds";
  EXPECT_EQ(std::stoi(m[1]), patches);
  std::vector<std::string> files = markdown_files();
  for (const auto& f : repo_files({"tests/mutants"}))
    if (ends_with(f, ".txt") || ends_with(f, ".sh")) files.push_back(f);
  const std::regex count("\\b(\\d+) (mutant )?(patches|mutants)\\b", std::regex::icase);
  for (const auto& f : files) {
    for (const auto& line : lines_of(read_doc(f))) {
      const std::string l = lower(line);
      if (l.find("patches") == std::string::npos && l.find("mutants") == std::string::npos) continue;
      for (std::sregex_iterator it(line.begin(), line.end(), count), end; it != end; ++it)
        EXPECT_EQ(std::stoi((*it)[1]), patches) << f << " says \"" << (*it)[0] << "\"; tests/mutants/ holds " << patches;
    }
  }
}

// Comments name the README and heading they mean, not a numbered section of a document the
// repository does not have. A paper's numbered section is written "the paper's section N".
TEST(DocsTest, NoFilePointsToANumberedSection) {
  const std::regex numbered("section [0-9]", std::regex::icase);
  int checked = 0;
  for (const auto& f : repo_files({"src", "scripts", "tests", "configs", "third_party", "data", ".ci", "README.md",
                                   "CMakeLists.txt"})) {
    if (ends_with(f, ".png") || ends_with(f, ".bin") || f.rfind("data/toy", 0) == 0) continue;
    ++checked;
    int n = 0;
    for (const auto& line : lines_of(read_doc(f))) {
      ++n;
      const std::string l = lower(line);
      if (l.find("section ") == std::string::npos || l.find("the paper's section") != std::string::npos) continue;
      EXPECT_FALSE(std::regex_search(line, numbered)) << f << ":" << n << ": " << line;
    }
  }
  EXPECT_GT(checked, 100);
}

// GitHub's anchor for a heading: lowercase; letters, digits, '-' and '_' kept, spaces to '-', all
// other characters dropped (ASCII punctuation, and non-ASCII symbols such as '±'; non-ASCII letters
// of Latin-1 and Latin Extended-A/B are kept as they are).
std::string github_anchor(const std::string& heading) {
  std::string out;
  for (size_t i = 0; i < heading.size(); ++i) {
    const unsigned char c = heading[i];
    if (c < 0x80) {
      if (std::isalnum(c) || c == '-' || c == '_') out += static_cast<char>(std::tolower(c));
      else if (c == ' ') out += '-';
      continue;
    }
    // A UTF-8 sequence: decode its code point.
    int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    uint32_t cp = c & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
    for (int k = 1; k < len && i + k < heading.size(); ++k) cp = (cp << 6) | (heading[i + k] & 0x3F);
    if (cp >= 0xC0 && cp <= 0x24F && cp != 0xD7 && cp != 0xF7) out += heading.substr(i, len);
    i += len - 1;
  }
  return out;
}

// A Markdown file's lines outside fenced code blocks, with inline code spans removed.
std::vector<std::string> prose_lines(const std::string& text) {
  std::vector<std::string> out;
  bool fence = false;
  for (const auto& line : lines_of(text)) {
    if (line.rfind("```", 0) == 0) {
      fence = !fence;
      out.emplace_back();
      continue;
    }
    out.push_back(fence ? "" : line);
  }
  return out;
}

std::set<std::string> anchors_of(const std::string& text) {
  std::set<std::string> out;
  std::map<std::string, int> seen;
  const std::regex heading("^#{1,6} +(.*?)[ #]*$");
  std::smatch m;
  for (const auto& line : prose_lines(text)) {
    if (!std::regex_search(line, m, heading)) continue;
    const std::string a = github_anchor(m[1]);
    const int k = seen[a]++;
    out.insert(k == 0 ? a : a + "-" + std::to_string(k));
  }
  return out;
}

// Every relative link of every Markdown file names a file that exists, and every `#anchor` (in the
// same file or another one) is a heading there.
TEST(DocsTest, EveryLinkAndAnchorInTheDocsResolves) {
  const fs::path root = testing::source_dir();
  const std::regex link("\\]\\(([^)# ]*)(#[^) ]*)?\\)");
  int anchors = 0;
  for (const auto& f : markdown_files()) {
    const std::string text = read_doc(f);
    int n = 0;
    for (auto line : prose_lines(text)) {
      ++n;
      if (line.find("](") == std::string::npos) continue;
      line = std::regex_replace(line, std::regex("`[^`]*`"), "");
      for (std::sregex_iterator it(line.begin(), line.end(), link), end; it != end; ++it) {
        const std::string target = (*it)[1], anchor = (*it)[2];
        if (target.find("://") != std::string::npos || target.rfind("mailto:", 0) == 0) continue;
        const fs::path file = target.empty() ? root / f : (root / f).parent_path() / target;
        if (!target.empty()) {
          EXPECT_TRUE(fs::exists(file)) << f << ":" << n << ": links to a missing " << target;
          if (!fs::exists(file)) continue;
        }
        if (anchor.empty()) continue;
        ++anchors;
        if (!ends_with(file.string(), ".md")) continue;
        std::ifstream in(file);
        std::stringstream ss;
        ss << in.rdbuf();
        EXPECT_TRUE(anchors_of(ss.str()).count(anchor.substr(1)))
            << f << ":" << n << ": " << (target.empty() ? "" : target) << anchor << " is no heading there";
      }
    }
  }
  EXPECT_GT(anchors, 50);
}

TEST(DocsTest, GithubAnchorsFollowGithubsRule) {
  EXPECT_EQ(github_anchor("The default run (`scripts/train.sh`)"), "the-default-run-scriptstrainsh");
  EXPECT_EQ(github_anchor("Against PyTorch 2.x (four-way CPU comparison)"), "against-pytorch-2x-four-way-cpu-comparison");
  EXPECT_EQ(github_anchor("Mean ± std over seeds"), "mean--std-over-seeds");
  EXPECT_EQ(github_anchor("torch_env.sh: which LibTorch"), "torch_envsh-which-libtorch");
  EXPECT_EQ(anchors_of("# A\n## A\n```\n# not a heading\n```\n"), (std::set<std::string>{"a", "a-1"}));
}

// third_party/c10d.md is user documentation: what NormLab uses, which LibTorch versions, how the
// build finds c10d and gloo, how to check it; the versions it names are the pinned ones.
TEST(DocsTest, TheC10dPageIsUserDocumentationWithThePinnedVersions) {
  const std::string page = read_doc("third_party/c10d.md");
  for (const char* heading : {"\n## What NormLab uses\n", "\n## Which LibTorch versions\n", "\n## How the build finds it\n",
                              "\n## How to check that it works\n"})
    EXPECT_NE(page.find(heading), std::string::npos) << "third_party/c10d.md lacks" << heading;
  for (const char* notes : {"Research notes", "Recommend", "scratch", "## Q1", "Code sketch"})
    EXPECT_EQ(page.find(notes), std::string::npos) << "third_party/c10d.md still has its notes: " << notes;
  const std::string versions = read_doc("third_party/VERSIONS.md");
  std::smatch m;
  for (const char* package : {"libtorch-dev", "libgloo-dev"}) {
    ASSERT_TRUE(std::regex_search(versions, m, std::regex(std::string("\\| `") + package + "` \\| ([^ |]+) \\|")))
        << package;
    EXPECT_NE(page.find(m[1].str()), std::string::npos) << "third_party/c10d.md does not name " << package << " " << m[1];
  }
  const std::string env = read_doc("scripts/torch_env.sh");
  ASSERT_TRUE(std::regex_search(env, m, std::regex("NORMLAB_TORCH_PIP_VERSION=([0-9.]+)")));
  EXPECT_NE(page.find("torch==" + m[1].str()), std::string::npos) << "third_party/c10d.md does not name torch==" << m[1];
}

// scripts/setup.sh is the one script that installs anything. In every other script (scripts/,
// tests/, .ci/; shell or Python) no command line installs a package: `apt-get install`,
// `apt install`, `pip install`, `pip download`, `python3 -m pip ...`, `dpkg -i`. Comments, and
// the text of an `echo`/`printf` telling the user which setup.sh option to run, are not commands.
// scripts/torch_env.sh, which every script sources, holds variables only: no function.
TEST(DocsTest, OnlySetupShInstallsAnything) {
  const std::vector<std::regex> installs = {
      std::regex("\\bapt(-get)?\\s+(-\\S+\\s+)*install\\b"), std::regex("\\bpip3?\\s+(-\\S+\\s+)*(install|download)\\b"),
      std::regex("-m\\s+pip\\b"), std::regex("\\bdpkg\\s+-i\\b")};
  int scripts = 0;
  for (const auto& f : script_files()) {
    if (f == "scripts/setup.sh") continue;
    ++scripts;
    int n = 0;
    for (const auto& line : lines_of(read_doc(f))) {
      ++n;
      const std::string cmd = command_part(line);
      if (cmd.find("apt") == std::string::npos && cmd.find("pip") == std::string::npos &&
          cmd.find("dpkg") == std::string::npos)
        continue;
      for (const auto& re : installs)
        EXPECT_FALSE(std::regex_search(cmd, re)) << f << ":" << n << " installs (only scripts/setup.sh may): " << line;
    }
  }
  EXPECT_GT(scripts, 20);
  const std::string env = read_doc("scripts/torch_env.sh");
  EXPECT_FALSE(std::regex_search(env, std::regex("(^|\\n)\\s*(function\\s+)?[A-Za-z_][A-Za-z0-9_]*\\s*\\(\\)")))
      << "scripts/torch_env.sh defines a function; it holds variables only";
  const std::string setup = read_doc("scripts/setup.sh");
  for (const char* option : {"--mkl)", "--blis)", "--pip-torch)"})
    EXPECT_NE(setup.find(option), std::string::npos) << "scripts/setup.sh lost its option " << option;
  EXPECT_NE(read_doc("scripts/bench_blas.sh").find("--mkl"), std::string::npos);
}

// The rules of command_part, which the test above relies on.
TEST(DocsTest, ACommandLineIsWhatRunsNotItsCommentsOrMessages) {
  EXPECT_EQ(command_part("  # pip install x"), "");
  EXPECT_EQ(command_part("python3 -m pip install x"), "python3 -m pip install x");
  EXPECT_EQ(command_part("[ -f x ] || { echo \"run scripts/setup.sh --mkl\"; exit 2; }"), "[ -f x ] || { ");
  EXPECT_EQ(command_part("recho pip install"), "recho pip install");
  EXPECT_EQ(command_part("make  # then pip install x"), "make ");
}

// A script stops only the processes it started (by PID, process group or session), never every
// process whose command line matches a pattern.
TEST(DocsTest, NoScriptKillsProcessesByName) {
  const std::regex by_name("\\b(pkill|killall)\\b");
  for (const auto& f : script_files()) {
    int n = 0;
    for (const auto& line : lines_of(read_doc(f))) {
      ++n;
      if (line.find("kill") == std::string::npos) continue;
      EXPECT_FALSE(std::regex_search(command_part(line), by_name)) << f << ":" << n << ": " << line;
    }
  }
}

}  // namespace
}  // namespace normlab
