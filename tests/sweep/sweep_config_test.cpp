// Sweep files: expansion (product, zip, seeds, quick), point names, and errors that name the file.
#include "sweep/sweep_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/errors.h"
#include "test_util.h"

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
      path + ":2: axis: unknown key; expected one of: base, out_dir, set, axes, zip, seeds, quick",
      path + ":4: axes.model.layout: expected a non-empty list of values, got 'pre'",
      path + ":5: axes.seed: list seeds under `seeds:`, not as an override",
      path + ":7: zip[0]: zipped lists must have equal lengths, got optim.lr: 2, optim.warmup: 1",
      path + ":8: seeds: expected an integer seed, got 'x'",
      path + ":9: quick.steps: unknown key; expected one of: set, axes, zip, seeds, out_dir",
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

// Every shipped sweep, full and quick, expands and validates (data paths are relative to the
// repository root, as when run from there).
TEST(SweepConfigTest, ShippedSweepsAreValid) {
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(testing::source_dir());
  for (const char* name : {"placement", "norms", "depth", "lr", "curse_of_depth", "pointwise"}) {
    for (bool quick : {false, true}) {
      SweepOptions o;
      o.quick = quick;
      const Sweep s = parse_sweep_file(std::string("configs/sweeps/") + name + ".yaml", o);
      const auto points = expand_sweep(s);
      EXPECT_NO_THROW(validate_points(s, points)) << name << (quick ? " --quick" : "");
      EXPECT_NE(s.out_dir.find(name), std::string::npos);
      if (quick) {
        EXPECT_NE(s.out_dir.find("-quick"), std::string::npos) << name;
      }
    }
  }
  std::filesystem::current_path(cwd);
}

}  // namespace
}  // namespace normlab
