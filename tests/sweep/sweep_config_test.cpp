// Sweep files: expansion (product, zip, seeds, quick), point names, and errors that name the file.
#include "sweep/sweep_points.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/errors.h"
#include "test_util.h"
#include "sweep/sweep_contract.h"

namespace normlab {
namespace {

std::string write(const testing::TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir / name) << text;
  return dir / name;
}

// A base config next to the sweep file, with absolute data paths (tests run from any directory).
void write_base(const testing::TempDir& dir) {
  const std::string src = testing::source_dir();
  write(dir, "base.yaml",
        "base: " + src + "/configs/default.yaml\ndata: {train: " + src +
            "/data/toy/train.txt, val: " + src + "/data/toy/val.txt}\n");
}

std::vector<std::string> names(const std::vector<SweepPoint>& points) {
  std::vector<std::string> out;
  for (const auto& p : points) out.push_back(p.name);
  return out;
}

// Every problem line of the ConfigError `f` throws (empty when it throws none).
template <class F>
std::vector<std::string> problems(F f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.problems();
  }
  return {};
}

TEST(SweepConfigTest, ProductOfAxesThenZipGroupsWithSeedsInnermost) {
  testing::TempDir dir;
  write_base(dir);
  const std::string path = write(dir, "s.yaml",
                                 "base: base.yaml\n"
                                 "set: {train.steps: 300}\n"
                                 "axes:\n"
                                 "  model.layout: [pre, post]\n"
                                 "  model.norm.type: [layernorm, rmsnorm]\n"
                                 "zip:\n"
                                 "  - {optim.lr: [1.0e-3, 3.0e-3], optim.warmup: [100, 30]}\n"
                                 "seeds: [1, 2]\n");
  const Sweep s = parse_sweep_file(path);
  EXPECT_EQ(s.base, dir / "base.yaml");
  EXPECT_EQ(s.out_dir, "runs/sweeps/s");  // default: named after the file
  EXPECT_EQ(s.axis_keys(), (std::vector<std::string>{"model.layout", "model.norm.type", "optim.lr",
                                                     "optim.warmup"}));
  const auto points = expand_sweep(s);
  ASSERT_EQ(points.size(), 2u * 2 * 2 * 2);
  EXPECT_EQ(points[0].name, "layout=pre,norm.type=layernorm,lr=1.0e-3,warmup=100,seed=1");
  EXPECT_EQ(points[1].name, "layout=pre,norm.type=layernorm,lr=1.0e-3,warmup=100,seed=2");
  EXPECT_EQ(points[2].name, "layout=pre,norm.type=layernorm,lr=3.0e-3,warmup=30,seed=1");
  EXPECT_EQ(points[4].name, "layout=pre,norm.type=rmsnorm,lr=1.0e-3,warmup=100,seed=1");
  EXPECT_EQ(points[15].name, "layout=post,norm.type=rmsnorm,lr=3.0e-3,warmup=30,seed=2");
  EXPECT_EQ(points[15].group, "layout=post,norm.type=rmsnorm,lr=3.0e-3,warmup=30");
  EXPECT_EQ(points[2].overrides[2], (std::pair<std::string, std::string>{"optim.lr", "3.0e-3"}));
  EXPECT_EQ(
      point_overrides(s, points[2]),
      (std::vector<std::string>{"train.steps=300", "model.layout=pre", "model.norm.type=layernorm",
                                "optim.lr=3.0e-3", "optim.warmup=30", "seed=1"}));
  EXPECT_EQ(point_run_dir("d", points[0]), "d/runs/" + points[0].name);
}

TEST(SweepConfigTest, QuickMergesSetReplacesAxesAndSeedsAndCliSetComesLast) {
  testing::TempDir dir;
  write_base(dir);
  const std::string path =
      write(dir, "s.yaml",
            "base: base.yaml\n"
            "out_dir: runs/full\n"
            "set: {train.steps: 300, eval.every: 100}\n"
            "axes: {model.layout: [pre, post, sandwich], model.norm.type: [layernorm, rmsnorm]}\n"
            "seeds: [1, 2, 3]\n"
            "quick:\n"
            "  set: {train.steps: 60}\n"
            "  axes: {model.layout: [pre]}\n"
            "  seeds: [7]\n"
            "  out_dir: runs/quick\n");
  const Sweep full = parse_sweep_file(path);
  EXPECT_EQ(expand_sweep(full).size(), 3u * 2 * 3);
  EXPECT_EQ(full.out_dir, "runs/full");

  SweepOptions o;
  o.quick = true;
  o.sets = {"eval.every=20", "optim.lr=0.01"};
  const Sweep quick = parse_sweep_file(path, o);
  EXPECT_EQ(quick.out_dir, "runs/quick");
  EXPECT_EQ(quick.set, (std::vector<std::pair<std::string, std::string>>{
                           {"train.steps", "60"}, {"eval.every", "20"}, {"optim.lr", "0.01"}}));
  EXPECT_EQ(names(expand_sweep(quick)),
            (std::vector<std::string>{"layout=pre,norm.type=layernorm,seed=7",
                                      "layout=pre,norm.type=rmsnorm,seed=7"}));
  o.out_dir = "elsewhere";
  EXPECT_EQ(parse_sweep_file(path, o).out_dir, "elsewhere");

  // The resolved sweep reads back as the same sweep (quick applied, no quick section left).
  const std::string dumped = write(dir, "dumped.yaml", dump_sweep(quick));
  const Sweep again = parse_sweep_file(dumped);
  EXPECT_EQ(again.base, quick.base);
  EXPECT_EQ(again.set, quick.set);
  EXPECT_EQ(again.seeds, quick.seeds);
  EXPECT_EQ(names(expand_sweep(again)), names(expand_sweep(quick)));

  // The parser keeps the quick variant; applying it is a step of its own.
  ASSERT_TRUE(full.quick);
  const Sweep applied = apply_quick(full);
  EXPECT_EQ(applied.out_dir, "runs/quick");
  EXPECT_EQ(names(expand_sweep(applied)), names(expand_sweep(parse_sweep_file(path, SweepOptions{true}))));
  EXPECT_FALSE(applied.quick);
  EXPECT_THROW(apply_quick(again), ConfigError);  // a dumped sweep has no quick section
}

TEST(SweepConfigTest, SeedsDefaultToTheBaseConfigsSeed) {
  testing::TempDir dir;
  write_base(dir);
  const Sweep s = parse_sweep_file(write(
      dir, "s.yaml", "base: base.yaml\nzip: [{model.d_model: [32, 64], model.d_ff: [64, 128]}]\n"));
  EXPECT_EQ(s.seeds, std::vector<int64_t>{1337});
  EXPECT_EQ(names(expand_sweep(s)), (std::vector<std::string>{"d_model=32,d_ff=64,seed=1337",
                                                              "d_model=64,d_ff=128,seed=1337"}));
}

TEST(SweepConfigTest, ShortNamesDropTheFirstSectionUnlessThatCollides) {
  const auto s = short_names({"model.layout", "model.norm.type", "optim.lr", "model.norm.eps",
                              "optim.eps", "model.bias", "norm.bias", "x.seed"});
  EXPECT_EQ(s.at("model.layout"), "layout");
  EXPECT_EQ(s.at("model.norm.type"), "norm.type");
  EXPECT_EQ(s.at("optim.lr"), "lr");
  EXPECT_EQ(s.at("model.norm.eps"), "norm.eps");
  EXPECT_EQ(s.at("optim.eps"), "eps");
  EXPECT_EQ(s.at("model.bias"), "model.bias");  // both would be `bias`
  EXPECT_EQ(s.at("norm.bias"), "norm.bias");
  EXPECT_EQ(s.at("x.seed"), "x.seed");  // `seed` is the point's own
  EXPECT_EQ(short_names({"seed"}).at("seed"), "seed");
}

TEST(SweepConfigTest, ValuesAreSanitizedAndNameCollisionsAreErrors) {
  EXPECT_EQ(sanitize_value("1.0e-3"), "1.0e-3");
  EXPECT_EQ(sanitize_value("+1_a-B"), "+1_a-B");
  EXPECT_EQ(sanitize_value("a b/c:d"), "a_b_c_d");
  EXPECT_EQ(sanitize_value("[0.9, 0.99]"), "_0.9__0.99_");

  testing::TempDir dir;
  write_base(dir);
  const Sweep betas = parse_sweep_file(
      write(dir, "b.yaml", "base: base.yaml\naxes: {optim.betas: [[0.9, 0.95], [0.9, 0.99]]}\n"));
  const auto points = expand_sweep(betas);
  EXPECT_EQ(points[1].name, "betas=_0.9__0.99_,seed=1337");
  EXPECT_EQ(points[1].overrides[0].second, "[0.9, 0.99]");  // --set takes it as YAML

  const Sweep clash = parse_sweep_file(
      write(dir, "c.yaml", "base: base.yaml\naxes: {data.train: ['a b', 'a/b']}\n"));
  const auto lines = problems([&] { expand_sweep(clash); });
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("train=a_b,seed=1337: points 1 and 2 get the same name"),
            std::string::npos)
      << lines[0];
}

TEST(SweepConfigTest, FileErrorsAreOneLineEachNamingFileLineAndKey) {
  testing::TempDir dir;
  write_base(dir);
  const std::string path = write(dir, "bad.yaml",
                                 "base: base.yaml\n"
                                 "axis: {model.layout: [pre]}\n"
                                 "axes:\n"
                                 "  model.layout: pre\n"
                                 "  seed: [1, 2]\n"
                                 "zip:\n"
                                 "  - {optim.lr: [1.0e-3, 3.0e-3], optim.warmup: [100]}\n"
                                 "seeds: [1, x]\n"
                                 "quick: {axes: {model.norm.type: [rmsnorm]}, steps: 3}\n");
  const auto lines = problems([&] { parse_sweep_file(path); });
  const std::vector<std::string> expected = {
      path + ":2: axis: unknown key; expected one of: base, out_dir, set, axes, zip, seeds, tune, quick",
      path + ":4: axes.model.layout: expected a non-empty list of values, got 'pre'",
      path + ":5: axes.seed: list seeds under `seeds:`, not as an override",
      path + ":7: zip[0]: zipped lists must have equal lengths, got optim.lr: 2, optim.warmup: 1",
      path + ":8: seeds: expected an integer seed, got 'x'",
      path + ":9: quick.steps: unknown key; expected one of: set, axes, zip, seeds, tune, out_dir",
      path + ":9: quick.axes.model.norm.type: not a key under axes:"};
  EXPECT_EQ(lines, expected);
  EXPECT_THROW(parse_sweep_file(dir / "missing.yaml"), UsageError);
  SweepOptions o;
  o.quick = true;
  const auto no_quick =
      problems([&] { parse_sweep_file(write(dir, "nq.yaml", "base: base.yaml\n"), o); });
  ASSERT_EQ(no_quick.size(), 1u);
  EXPECT_EQ(no_quick[0],
            dir / "nq.yaml" + ": quick: --quick given but the sweep file has no quick: section");
}

// A sweep file is read as strictly as a config (config/load.h's load_strict_yaml). Found by
// tests/fuzz/sweep_fuzz.cpp: a control byte in out_dir did not survive the dumped sweep.yaml.
TEST(SweepConfigTest, SweepFilesAreReadAsStrictlyAsConfigs) {
  testing::TempDir dir;
  write_base(dir);
  const std::string ctrl = write(dir, "ctrl.yaml", "base: base.yaml\nout_dir: runs/a\x0f\n");
  EXPECT_EQ(problems([&] { parse_sweep_file(ctrl); }),
            std::vector<std::string>{ctrl + ":2: control character 0x0f; YAML text must be printable UTF-8"});
  const std::string dup = write(dir, "dup.yaml", "base: base.yaml\naxes: {model.layout: [pre]}\naxes: {seed: [1]}\n");
  EXPECT_EQ(problems([&] { parse_sweep_file(dup); }),
            std::vector<std::string>{dup + ":3: axes: duplicate key (first set on line 2)"});
  const std::string two = write(dir, "two.yaml", "base: base.yaml\n---\nbogus: 1\n");
  EXPECT_EQ(problems([&] { parse_sweep_file(two); }),
            std::vector<std::string>{two + ":2: a second YAML document; a config is one document"});
}

TEST(SweepConfigTest, EveryPointIsValidatedAndProblemsNameTheSweepLine) {
  testing::TempDir dir;
  write_base(dir);
  const std::string path = write(dir, "s.yaml",
                                 "base: base.yaml\n"
                                 "set:\n"
                                 "  train.steps: 10\n"
                                 "axes:\n"
                                 "  model.n_heads: [4, 5]\n"
                                 "  model.norm.type: [rmsnorm, groupnorm]\n"
                                 "seeds: [1, 2]\n");
  const Sweep s = parse_sweep_file(path);
  const auto lines = problems([&] { validate_points(s, expand_sweep(s)); });
  ASSERT_EQ(lines.size(), 2u) << ::testing::PrintToString(
      lines);  // each problem once, not per point
  EXPECT_EQ(lines[0].rfind(path + ":6: model.norm.type: 'groupnorm' is not a registered norm", 0),
            0u)
      << lines[0];
  EXPECT_NE(lines[0].find("(point n_heads=4,norm.type=groupnorm,seed=1)"), std::string::npos)
      << lines[0];
  EXPECT_EQ(lines[1].rfind(path + ":5: model.n_heads: 5 does not divide d_model 128", 0), 0u)
      << lines[1];

  const std::string unknown =
      write(dir, "u.yaml", "base: base.yaml\naxes:\n  model.layuot: [pre]\n");
  const Sweep u = parse_sweep_file(unknown);
  const auto ul = problems([&] { validate_points(u, expand_sweep(u)); });
  ASSERT_EQ(ul.size(), 1u);
  EXPECT_EQ(ul[0].rfind(unknown + ":3: model.layuot: unknown key", 0), 0u) << ul[0];

  SweepOptions o;
  o.sets = {"train.stepz=3"};
  const Sweep cli = parse_sweep_file(path, o);
  const auto cl = problems([&] { validate_points(cli, expand_sweep(cli)); });
  ASSERT_FALSE(cl.empty());
  EXPECT_EQ(cl[0].rfind("--set: train.stepz: unknown key", 0), 0u) << cl[0];

  const std::string good =
      write(dir, "g.yaml", "base: base.yaml\naxes: {model.layout: [pre, post]}\n");
  const Sweep g = parse_sweep_file(good);
  const auto configs = validate_points(g, expand_sweep(g));
  ASSERT_EQ(configs.size(), 2u);
  EXPECT_EQ(configs[1].model.layout, "post");
  EXPECT_EQ(configs[1].out_dir, "runs/sweeps/g/runs/layout=post,seed=1337");
}

// Found by tests/fuzz/sweep_fuzz.cpp: values whose text changes when read as YAML (a leading
// space or tab, a mapping written as a string) came back changed from the dumped sweep.yaml, so
// the summary looked for the runs under other names.
TEST(SweepConfigTest, DumpedSweepKeepsValuesWhoseTextYamlWouldChange) {
  testing::TempDir dir;
  write_base(dir);
  const Sweep s = parse_sweep_file(
      write(dir, "s.yaml",
            "base: base.yaml\n"
            "set: {model.norm: \"type: rmsnorm\"}\n"
            "axes: {model.layout: [\" pre\", post]}\n"
            "zip: [{optim.lr: [1.0e-3, \"\\t2e-3\"], optim.warmup: [0, 10]}]\n"));
  ASSERT_EQ(s.axes.size(), 2u);
  EXPECT_EQ(s.axes[0].values[0][0], " pre");
  EXPECT_EQ(s.axes[1].values[1][0], "\t2e-3");
  const Sweep again = parse_sweep_file(write(dir, "dumped.yaml", dump_sweep(s)));
  EXPECT_EQ(again.set, s.set);
  ASSERT_EQ(again.axes.size(), 2u);
  EXPECT_EQ(again.axes[0].values, s.axes[0].values);
  EXPECT_EQ(again.axes[1].values, s.axes[1].values);
  EXPECT_EQ(names(expand_sweep(s))[0], "layout=_pre,lr=1.0e-3,warmup=0,seed=1337");
  EXPECT_EQ(names(expand_sweep(again)), names(expand_sweep(s)));
}

// Found by tests/fuzz/sweep_fuzz.cpp: a few long lists made expand_sweep build millions of
// points (minutes, gigabytes) before anything was checked.
TEST(SweepConfigTest, MoreThanAThousandPointsIsAnError) {
  testing::TempDir dir;
  write_base(dir);
  const std::string ten = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]";
  const std::string axes =
      "axes: {train.steps: " + ten + ", eval.every: " + ten + ", train.log_every: " + ten + "}\n";
  const Sweep big =
      parse_sweep_file(write(dir, "big.yaml", "base: base.yaml\n" + axes + "seeds: [1, 2]\n"));
  const auto lines = problems([&] { expand_sweep(big); });
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0],
            dir / "big.yaml" + ": axes: more than 1000 points (10 x 10 x 10 x 2 seeds); " +
                "split the sweep");
  const Sweep limit =
      parse_sweep_file(write(dir, "limit.yaml", "base: base.yaml\n" + axes + "seeds: [1]\n"));
  EXPECT_EQ(expand_sweep(limit).size(), 1000u);
}

}  // namespace
}  // namespace normlab

namespace normlab {
namespace {

// Every shipped sweep (each configs/sweeps/*.yaml), full and quick, expands and validates (data
// paths are relative to the repository root, as when run from there). The Shakespeare studies'
// points validate where scripts/prepare_shakespeare.sh has written the corpus (else their data
// files are missing, which is the error validation should give).
TEST(SweepConfigTest, ShippedSweepsAreValid) {
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(testing::source_dir());
  const bool have_shakespeare = std::filesystem::exists("data/shakespeare/train.txt");
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator("configs/sweeps"))
    if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
  EXPECT_GE(names.size(), 20u);
  for (const auto& name : names) {
    for (bool quick : {false, true}) {
      SweepOptions o;
      o.quick = quick;
      const Sweep s = parse_sweep_file("configs/sweeps/" + name + ".yaml", o);
      auto points = expand_sweep(s);
      // A tuned sweep whose every value is given (tune.given) searches nothing: its points are
      // the confirm points at those values.
      const auto arms = s.tune ? tune_arms(s) : std::vector<SweepPoint>{};
      const bool searches = !s.tune || std::any_of(arms.begin(), arms.end(), [&](const SweepPoint& a) {
        return rung_searched(s, a.rung);
      });
      EXPECT_EQ(points.empty(), !searches) << name;
      if (!searches) {
        std::vector<int> selected;
        for (const SweepPoint& a : arms) selected.push_back(given_index(*s.tune, a.overrides));
        EXPECT_TRUE(std::none_of(selected.begin(), selected.end(), [](int v) { return v < 0; })) << name;
        points = confirm_points(s, selected);
        EXPECT_EQ(points.size(), arms.size() * s.tune->confirm_seeds.size()) << name;
      }
      const bool shakespeare = std::filesystem::path(s.base).filename() == "shakespeare.yaml";
      if (!shakespeare || have_shakespeare) {
        EXPECT_NO_THROW(validate_points(s, points)) << name << (quick ? " --quick" : "");
      }
      EXPECT_NE(s.out_dir.find(name), std::string::npos) << name;
      if (quick) {
        EXPECT_NE(s.out_dir.find("-quick"), std::string::npos) << name;
      }
    }
  }
  std::filesystem::current_path(cwd);
}

// The sweep fuzzer's contract (tests/sweep/sweep_contract.h) on every shipped sweep, full and
// quick: the fuzzer seeds its corpus with these files, so one it would reject fails here first.
TEST(SweepConfigTest, ShippedSweepsKeepTheExpansionContract) {
  testing::TempDir dir;
  const std::string dumped = dir.path() + "/dumped.yaml";
  size_t checked = 0;
  for (const auto& e : std::filesystem::directory_iterator(testing::source_dir() + "/configs/sweeps")) {
    if (e.path().extension() != ".yaml") continue;
    for (bool quick : {false, true}) {
      SweepOptions o;
      o.quick = quick;
      const std::string what = e.path().filename().string() + (quick ? " --quick" : "");
      const Sweep s = parse_sweep_file(e.path().string(), o);
      EXPECT_EQ(testing::expansion_problem(s, expand_sweep(s)), "") << what;
      testing::write_text(dumped, dump_sweep(s));
      EXPECT_EQ(testing::dump_problem(s, parse_sweep_file(dumped)), "") << what;
      ++checked;
    }
  }
  EXPECT_GE(checked, 40u);
}

// The contract can fail, and says what broke: a point dropped, two names alike, a given value or
// the margin lost in the dump.
TEST(SweepConfigTest, TheExpansionContractNamesWhatIsBroken) {
  const std::string sweeps = testing::source_dir() + "/configs/sweeps/";
  const Sweep given = parse_sweep_file(sweeps + "width_norms_mup_shakespeare_512.yaml");
  ASSERT_TRUE(given.tune && given.tune->given.size() == 5);
  EXPECT_TRUE(expand_sweep(given).empty());  // every value given, no rung searched
  EXPECT_EQ(testing::expansion_problem(given, {}), "");
  const Sweep plain = parse_sweep_file(sweeps + "tune_example.yaml");
  const std::vector<SweepPoint> points = expand_sweep(plain);
  ASSERT_GE(points.size(), 2u);
  EXPECT_EQ(testing::expansion_problem(plain, points), "");
  const std::vector<SweepPoint> fewer(points.begin() + 1, points.end());
  EXPECT_EQ(testing::expansion_problem(plain, fewer),
            fmt::format("{} points, expected {}", points.size() - 1, points.size()));
  std::vector<SweepPoint> alike = points;
  alike[1].name = alike[0].name;
  EXPECT_EQ(testing::expansion_problem(plain, alike), "two points share a name");
  Sweep lost = given;
  lost.tune->given.back().text = "4.0e-3";
  EXPECT_EQ(testing::dump_problem(given, lost), "tune.given entry 4 changed");
  Sweep unmargined = given;
  unmargined.tune->margin = 0;
  EXPECT_EQ(testing::dump_problem(given, unmargined), "tune's ladder, search_at, test, margin, correction or fit changed");
  EXPECT_EQ(testing::dump_problem(given, given), "");
}

}  // namespace
}  // namespace normlab

namespace normlab {
namespace {

// A tuned sweep: search points carry the tuned value in their names, confirm points a `confirm`
// marker before the seed; quick: may replace the grid and the seeds; sweep.yaml reads back.
TEST(SweepTuneConfigTest, SearchPointsCarryTheValueAndConfirmPointsAMarker) {
  testing::TempDir dir;
  write_base(dir);
  const std::string path =
      write(dir, "t.yaml",
            "base: base.yaml\n"
            "set: {train.steps: 10}\n"
            "axes: {model.layout: [pre, post]}\n"
            "tune: {key: optim.lr, values: [1.0e-3, 2.0e-3, 4.0e-3], seeds: [1337],\n"
            "       confirm_seeds: [2001, 2002], metric: final_val, baseline: {model.layout: post}}\n"
            "quick: {tune: {values: [1.0e-3, 4.0e-3, 8.0e-3], confirm_seeds: [7]}, out_dir: q}\n");
  const Sweep s = parse_sweep_file(path);
  ASSERT_TRUE(s.tune);
  EXPECT_TRUE(s.seeds.empty());
  EXPECT_EQ(s.tune->metric, TuneMetric::kFinalVal);
  EXPECT_EQ(s.tune->numbers, (std::vector<double>{1e-3, 2e-3, 4e-3}));
  EXPECT_EQ(name_keys(s), (std::vector<std::string>{"model.layout", "optim.lr"}));
  const auto points = expand_sweep(s);
  EXPECT_EQ(names(points), (std::vector<std::string>{
                               "layout=pre,lr=1.0e-3,seed=1337", "layout=pre,lr=2.0e-3,seed=1337",
                               "layout=pre,lr=4.0e-3,seed=1337", "layout=post,lr=1.0e-3,seed=1337",
                               "layout=post,lr=2.0e-3,seed=1337", "layout=post,lr=4.0e-3,seed=1337"}));
  EXPECT_EQ(points[4].group, "layout=post,lr=2.0e-3");
  EXPECT_EQ(points[4].phase, PointPhase::kSearch);
  EXPECT_EQ(points[4].arm, 1u);
  EXPECT_EQ(point_overrides(s, points[4]),
            (std::vector<std::string>{"train.steps=10", "model.layout=post", "optim.lr=2.0e-3", "seed=1337"}));
  const auto arms = tune_arms(s);
  ASSERT_EQ(arms.size(), 2u);
  EXPECT_EQ(arms[1].name, "layout=post");
  const auto confirm = confirm_points(s, {2, -1});
  EXPECT_EQ(names(confirm), (std::vector<std::string>{"layout=pre,lr=4.0e-3,confirm,seed=2001",
                                                      "layout=pre,lr=4.0e-3,confirm,seed=2002"}));
  EXPECT_EQ(confirm[0].group, "layout=pre,lr=4.0e-3,confirm");
  EXPECT_EQ(confirm[0].phase, PointPhase::kConfirm);
  EXPECT_EQ(validate_points(s, points).size(), 6u);
  EXPECT_EQ(validate_points(s, confirm)[0].optim.lr, 4e-3);

  // The resolved sweep keeps the block (and writes no seeds:).
  const Sweep again = parse_sweep_file(write(dir, "dumped.yaml", dump_sweep(s)));
  ASSERT_TRUE(again.tune);
  EXPECT_EQ(again.tune->values, s.tune->values);
  EXPECT_EQ(again.tune->confirm_seeds, s.tune->confirm_seeds);
  EXPECT_EQ(again.tune->metric, TuneMetric::kFinalVal);
  EXPECT_EQ(again.tune->baseline, s.tune->baseline);
  EXPECT_EQ(names(expand_sweep(again)), names(points));

  SweepOptions o;
  o.quick = true;
  const Sweep quick = parse_sweep_file(path, o);
  EXPECT_EQ(quick.out_dir, "q");
  EXPECT_EQ(quick.tune->values, (std::vector<std::string>{"1.0e-3", "4.0e-3", "8.0e-3"}));
  EXPECT_EQ(quick.tune->seeds, std::vector<int64_t>{1337});
  EXPECT_EQ(quick.tune->confirm_seeds, std::vector<int64_t>{7});
  EXPECT_EQ(names(confirm_points(quick, {0, 0}))[1], "layout=post,lr=1.0e-3,confirm,seed=7");
}

// Every violation of the tune: rules is one line naming file:line, the key and what was expected.
TEST(SweepTuneConfigTest, EveryBadTuneBlockIsOneLineNamingFileLineAndKey) {
  testing::TempDir dir;
  write_base(dir);
  const std::string head =
      "base: base.yaml\n"
      "axes: {model.layout: [pre, post]}\n"
      "zip: [{model.n_heads: [2, 4], model.n_layers: [1, 2]}]\n";
  const std::string good_rest = "seeds: [1], confirm_seeds: [2, 3], baseline: {model.layout: pre, model.n_heads: 2}";
  const std::string values = "values: [1.0e-3, 2.0e-3, 4.0e-3]";
  const std::string ladder_rest = "seeds: [1], confirm_seeds: [2, 3], baseline: {model.layout: pre}, ladder: model.n_layers";
  auto tune = [&](const std::string& key, const std::string& vals, const std::string& rest) {
    return "tune: {key: " + key + ", " + vals + ", " + rest + "}\n";
  };
  const std::string arms = "layout=pre,n_heads=2,n_layers=1; layout=pre,n_heads=4,n_layers=2; "
                           "layout=post,n_heads=2,n_layers=1; layout=post,n_heads=4,n_layers=2";
  struct Case {
    std::string text, line;
    std::vector<std::string> sets = {};
  };
  const std::vector<Case> cases = {
      {tune("model.norm.type", values, good_rest),
       ":4: tune.key: model.norm.type is not numeric (its value is 'layernorm'); expected a numeric key such as "
       "optim.lr"},
      {tune("optim.lrr", values, good_rest),
       ":4: tune.key: 'optim.lrr' is not a config key (build/normlab keys lists them); expected a numeric key such "
       "as optim.lr"},
      {tune("model.layout", values, good_rest),
       ":4: tune.key: model.layout is an axis (FILE:2); the tuned key is searched per arm and cannot also be one"},
      {tune("model.n_layers", values, good_rest),
       ":4: tune.key: model.n_layers is a zip key (FILE:3); the tuned key is searched per arm and cannot also be one"},
      {tune("seed", values, good_rest),
       ":4: tune.key: seed cannot be tuned; the seeds are tune.seeds (search) and tune.confirm_seeds"},
      {tune("optim.lr", "values: [2.0e-3, 1.0e-3, 4.0e-3]", good_rest),
       ":4: tune.values: values must be ascending, got 1.0e-3 after 2.0e-3"},
      {tune("optim.lr", "values: [1.0e-3, 1.0e-3, 4.0e-3]", good_rest),
       ":4: tune.values: values must be ascending, got 1.0e-3 after 1.0e-3"},
      {tune("optim.lr", "values: [0, 1.0e-3, 4.0e-3]", good_rest), ":4: tune.values: expected a number > 0, got '0'"},
      {tune("optim.lr", "values: [1.0e-3, fast, 4.0e-3]", good_rest),
       ":4: tune.values: expected a number > 0, got 'fast'"},
      {tune("optim.lr", "values: [1.0e-3, 2.0e-3]", good_rest),
       ":4: tune.values: expected a list of at least 3 ascending numbers > 0, got 2 values"},
      {tune("optim.lr", values, "seeds: [], confirm_seeds: [2, 3], baseline: {model.layout: pre, model.n_heads: 2}"),
       ":4: tune.seeds: expected a non-empty list of integer seeds, got a list"},
      {tune("optim.lr", values, "seeds: [1], confirm_seeds: [], baseline: {model.layout: pre, model.n_heads: 2}"),
       ":4: tune.confirm_seeds: expected a non-empty list of integer seeds, got a list"},
      {tune("optim.lr", values, "seeds: [1, 2], confirm_seeds: [2, 3], baseline: {model.layout: pre, model.n_heads: 2}"),
       ":4: tune.confirm_seeds: seed 2 is also a search seed; confirm seeds must be fresh (disjoint from "
       "tune.seeds)"},
      {tune("optim.lr", values, good_rest) + "seeds: [1]\n",
       ":5: seeds: a sweep with tune: has no seeds:; list them as tune.seeds (search) and tune.confirm_seeds "
       "(confirm)"},
      {tune("optim.lr", values, good_rest + ", metric: last_val"),
       ":4: tune.metric: expected best_val or final_val, got 'last_val'"},
      {tune("optim.lr", values, "seeds: [1], confirm_seeds: [2, 3], baseline: {model.layout: sandwich}"),
       ":4: tune.baseline: names no arm; expected the axis values of one of: " + arms},
      {tune("optim.lr", values, "seeds: [1], confirm_seeds: [2, 3], baseline: {model.layout: pre}"),
       ":4: tune.baseline: names 2 arms (layout=pre,n_heads=2,n_layers=1; layout=pre,n_heads=4,n_layers=2); "
       "expected the axis values of exactly one"},
      {tune("optim.lr", values, "seeds: [1], confirm_seeds: [2, 3], baseline: {model.layout: pre, optim.warmup: 2}"),
       ":4: tune.baseline.optim.warmup: not an axis; expected axis keys naming one arm (model.layout, "
       "model.n_heads, model.n_layers)"},
      {tune("optim.lr", values, "seeds: [1], confirm_seeds: [2, 3]"),
       ":4: tune.baseline: missing; tune: needs key, values, seeds, confirm_seeds and baseline (metric, ladder, "
       "search_at, given, test, margin, correction, fit and fit_extend are optional)"},
      {tune("optim.lr", values, good_rest + ", sweeps: 3"),
       ":4: tune.sweeps: unknown key; expected one of: key, values, seeds, confirm_seeds, metric, baseline, ladder, "
       "search_at, given, test, margin, correction, fit, fit_extend"},
      {tune("optim.lr", values, good_rest + ", fit: cubic"), ":4: tune.fit: expected quadratic or none, got 'cubic'"},
      {tune("optim.lr", values, good_rest + ", fit_extend: 2"),
       ":4: tune.fit_extend: needs tune.fit: quadratic (it moves the fit's bracket)"},
      {tune("optim.lr", values, good_rest + ", fit: quadratic, fit_extend: -1"),
       ":4: tune.fit_extend: expected a whole number >= 0 (how many grid values past v*'s neighbours the fit's "
       "bracket may move), got '-1'"},
      {tune("optim.lr", values, good_rest + ", fit: quadratic, fit_extend: 1.5"),
       ":4: tune.fit_extend: expected a whole number >= 0 (how many grid values past v*'s neighbours the fit's "
       "bracket may move), got '1.5'"},
      {"tune: [optim.lr]\n",
       ":4: tune: expected a mapping {key, values, seeds, confirm_seeds, metric, baseline, ladder, search_at, given, "
       "test, margin, correction, fit, fit_extend}, got a list"},
      {tune("optim.lr", values, good_rest + ", ladder: model.d_model"),
       ":4: tune.ladder: 'model.d_model' is not an axis; expected one of the sweep's axis keys (model.layout, "
       "model.n_heads, model.n_layers)"},
      {tune("optim.lr", values, good_rest + ", search_at: [1]"),
       ":4: tune.search_at: needs tune.ladder (the axis whose values the searched rungs name)"},
      {tune("optim.lr", values, good_rest + ", ladder: model.n_layers, search_at: [1, 3]"),
       ":4: tune.search_at: 3 is not a value of the ladder model.n_layers; expected some of: 1, 2"},
      {tune("optim.lr", values, good_rest + ", ladder: model.n_layers, search_at: [1, 1.0]"),
       ":4: tune.search_at: 1.0 is listed twice"},
      {tune("optim.lr", values, good_rest + ", ladder: model.n_layers, search_at: []"),
       ":4: tune.search_at: expected a non-empty list of the ladder's values, got a list"},
      {tune("optim.lr", values, "seeds: [1], confirm_seeds: [2, 3], baseline: {model.layout: pre, model.n_heads: 2}, "
                                "ladder: model.n_layers"),
       ":4: tune.baseline.model.n_heads: belongs to the ladder's axis; the baseline names an arm by the other axes and is "
       "compared with every arm at each rung"},
      {tune("optim.lr", values, good_rest + ", test: ttest"), ":4: tune.test: expected welch or paired, got 'ttest'"},
      {tune("optim.lr", values, good_rest + ", correction: bonferroni"),
       ":4: tune.correction: expected holm or none, got 'bonferroni'"},
      {tune("optim.lr", values, good_rest + ", margin: -0.01"),
       ":4: tune.margin: expected a number >= 0 in the metric's unit (nats), e.g. 0.01, got '-0.01'"},
      {tune("optim.lr", values, good_rest + ", margin: small"),
       ":4: tune.margin: expected a number >= 0 in the metric's unit (nats), e.g. 0.01, got 'small'"},
      {tune("optim.lr", values, good_rest) + "set: {optim.lr: 0.01}\n",
       ":5: set.optim.lr: the tuned key takes its values from tune.values; remove it from set: / --set"},
      {tune("optim.lr", values, good_rest) + "quick: {seeds: [5]}\n",
       ":5: quick.seeds: a sweep with tune: has no seeds:; set quick.tune.seeds and quick.tune.confirm_seeds"},
      {tune("optim.lr", values, good_rest) + "quick: {tune: {values: [1.0e-3, 2.0e-3, 3.0e-3], key: optim.warmup}}\n",
       ":5: quick.tune.key: unknown key; expected one of: values, seeds, confirm_seeds, search_at, given"},
      // tune.given: values chosen elsewhere, one per arm (by the arms' axes, the ladder's left out).
      {tune("optim.lr", values, good_rest + ", given: {model.layout: pre}"),
       ":4: tune.given: expected a non-empty list of mappings, each an arm's axis values and its value, e.g. "
       "[{model.layout: pre, value: 8.0e-3}], got a mapping"},
      {tune("optim.lr", values, good_rest + ", given: [{model.layout: pre}]"),
       ":4: tune.given: expected a mapping of an arm's axis values and its value, e.g. {model.layout: pre, value: "
       "8.0e-3}, got a mapping"},
      {tune("optim.lr", values, ladder_rest + ", given: [{model.layout: pre, value: 2.0e-3}]"),
       ":4: tune.given: gives no value for the arm layout=post; every arm needs one"},
      {tune("optim.lr", values, ladder_rest + ", given: [{model.layout: pre, value: 2.0e-3}, {model.layout: post, "
                                              "value: 2.0e-3}, {model.layout: post, value: 4.0e-3}]"),
       ":4: tune.given: gives 2 values for the arm layout=post; expected one"},
      {tune("optim.lr", values, ladder_rest + ", given: [{model.layout: pre, value: 3.0e-3}, {model.layout: post, "
                                              "value: 2.0e-3}]"),
       ":4: tune.given: value 3.0e-3 is not in tune.values (1.0e-3, 2.0e-3, 4.0e-3); the confirm runs run at grid "
       "values"},
      {tune("optim.lr", values, ladder_rest + ", given: [{model.layout: pre, value: 1.0e-3}, {model.layout: post, "
                                              "value: 2.0e-3}, {model.layout: post, model.n_heads: 2, value: 2.0e-3}]"),
       ":4: tune.given.model.n_heads: belongs to the ladder's axis (a given value serves the arm at every rung); "
       "expected axis keys naming one arm (model.layout)"},
      {tune("optim.lr", values, ladder_rest + ", given: [{model.layout: pre, value: 1.0e-3}, {model.layout: post, "
                                              "value: 2.0e-3}, {model.layout: sandwich, value: 2.0e-3}]"),
       ":4: tune.given: an entry names no arm; expected the axis values of one of: layout=pre; layout=post"},
      {tune("optim.lr", values, good_rest + ", given: [{model.layout: pre, value: 1.0e-3}, {model.layout: post, "
                                            "model.n_heads: 2, value: 2.0e-3}, {model.layout: post, model.n_heads: 4, "
                                            "value: 4.0e-3}]"),
       ":4: tune.given: an entry names 2 arms (layout=pre,n_heads=2,n_layers=1; layout=pre,n_heads=4,n_layers=2); "
       "expected the axis values of exactly one"},
      {tune("optim.lr", values, good_rest) + "quick: {tune: {confirm_seeds: [1]}}\n",
       ":5: quick.tune.confirm_seeds: seed 1 is also a search seed; confirm seeds must be fresh (disjoint from "
       "tune.seeds)"},
      {tune("optim.lr", values, good_rest), "--set: set.optim.lr: the tuned key takes its values from tune.values; "
                                            "remove it from set: / --set", {"optim.lr=0.1"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = write(dir, fmt::format("bad{}.yaml", i), head + cases[i].text);
    SweepOptions o;
    o.sets = cases[i].sets;
    const auto lines = problems([&] { expand_sweep(parse_sweep_file(path, o)); });
    std::string expected = cases[i].line[0] == ':' ? path + cases[i].line : cases[i].line;
    for (size_t at = expected.find("FILE"); at != std::string::npos; at = expected.find("FILE")) {
      expected.replace(at, 4, path);
    }
    EXPECT_EQ(lines, std::vector<std::string>{expected}) << cases[i].text;
  }
  // The good block parses.
  EXPECT_NO_THROW(parse_sweep_file(write(dir, "good.yaml", head + tune("optim.lr", values, good_rest))));
}

// The shipped example tuned sweep, full and quick, expands and validates.
TEST(SweepTuneConfigTest, ShippedTuneExampleIsValid) {
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(testing::source_dir());
  for (bool quick : {false, true}) {
    SweepOptions o;
    o.quick = quick;
    const Sweep s = parse_sweep_file("configs/sweeps/tune_example.yaml", o);
    ASSERT_TRUE(s.tune);
    const auto points = expand_sweep(s);
    EXPECT_NO_THROW(validate_points(s, points)) << (quick ? " --quick" : "");
    EXPECT_NO_THROW(validate_points(s, confirm_points(s, std::vector<int>(tune_arms(s).size(), 0))));
  }
  std::filesystem::current_path(cwd);
}

}  // namespace
}  // namespace normlab
