// The documentation cannot go stale against the code: the README's lists of norms and layouts are
// the registries, every config choice it names exists, and every key a run with full diagnostics
// writes to metrics.jsonl is defined in src/metrics/README.md.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "config/load.h"
#include "model/layouts/layout.h"
#include "model/norms/norm.h"
#include "model/transformer.h"
#include "test_util.h"
#include "train/run_config.h"
#include "train/trainer.h"

namespace normlab {
namespace {

std::string read_doc(const std::string& relative) {
  std::ifstream in(testing::source_dir() + "/" + relative);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The names in the first column of the Markdown tables under the heading `heading` (up to the
// next heading of the same level).
std::set<std::string> table_names(const std::string& doc, const std::string& heading) {
  std::set<std::string> out;
  const auto at = doc.find("\n" + heading + "\n");
  if (at == std::string::npos) return out;
  const auto end = doc.find("\n## ", at + 1);
  std::istringstream lines(doc.substr(at, end == std::string::npos ? std::string::npos : end - at));
  std::string line;
  const std::regex row("^\\| `([a-z0-9_]+)` \\|");
  std::smatch m;
  while (std::getline(lines, line)) {
    if (std::regex_search(line, m, row)) out.insert(m[1]);
  }
  return out;
}

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

TEST(DocsTest, ModelReadmeTablesAreExactlyTheRegisteredNormsAndLayouts) {
  const std::string doc = read_doc("src/model/README.md");
  std::set<std::string> norms, layouts;
  for (const auto& n : norm_registry()) norms.insert(n.name);
  for (const auto& l : layout_registry()) layouts.insert(l.name);
  EXPECT_EQ(table_names(doc, "## Norms"), norms);
  EXPECT_EQ(table_names(doc, "## Layouts"), layouts);
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
// contract's file, a sibling checkout, a developer's machine).
TEST(DocsTest, NoTrackedFileNamesAPathOutsideTheRepository) {
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
                           "src/train/README.md", "src/metrics/README.md", "src/dist/README.md", "src/cli/README.md",
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
    v.model.value_residual = ValueResidual::kToken;
  });
  variant("mhc", [](Config& v) { v.model.residual.type = "mhc"; });
  variant("ngpt", [](Config& v) {
    v.model.layout = "ngpt";
    v.model.pos = Position::kRope;
    v.model.ffn = FfnKind::kSwiglu;
    v.model.tie_embeddings = false;
    v.optim.weight_decay = 0;
  });
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
                               "layers.res_gain_fwd", "layers.vres_lambda", "layers.ngpt_a1", "attnres_weights"}) {
    EXPECT_TRUE(keys.count(expected)) << "the run did not write " << expected << ": the test lost its coverage";
  }
  const std::string doc = read_doc("src/metrics/README.md");
  for (const auto& k : keys) {
    EXPECT_NE(doc.find("`" + k + "`"), std::string::npos) << "metrics.jsonl key " << k
                                                           << " is not defined in src/metrics/README.md";
  }
}

}  // namespace
}  // namespace normlab
