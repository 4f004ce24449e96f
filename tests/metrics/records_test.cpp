// The one reader of a run's records (src/metrics/records.h) on hand-written metrics.jsonl files:
// every derived number of src/metrics/README.md ("Derived numbers"), and `normlab report` and the
// sweep summary giving the same numbers for the same run directory.
#include "metrics/records.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <fstream>

#include "core/errors.h"
#include "metrics/compare.h"
#include "metrics/report.h"
#include "sweep/summary.h"
#include "test_util.h"

namespace normlab {
namespace {

RunRecords records(const testing::TempDir& dir, const std::vector<std::string>& lines, double zscore = 6) {
  testing::write_lines(dir / "m.jsonl", lines);
  RunInfo info;
  info.spike_zscore = zscore;
  return read_records(dir / "m.jsonl", info);
}

TEST(RecordsTest, ParsesTypedRecordsAndSkipsTornOrForeignLines) {
  testing::TempDir dir;
  const RunRecords r = records(
      dir, {R"({"kind":"train","step":0,"loss":5.0,"lr":0.001,"grad_norm":2.0,"tokens":128,"tok_per_s":100,)"
            R"("layers":{"grad_norm":[3.0,1.0],"act_rms":[1,2,null]}})",
            R"({"kind":"train","step":1,"loss":null,"grad_norm":null,"tokens":128,"skipped":true,"nonfinite":true})",
            R"({"kind":"eval","step":2,"val_loss":4.5,"eff_rank":null,"val_excess":3.5})",
            R"({"kind":"spike","step":1,"metric":"loss","value":9,"mean":5,"std":0.5,"z":8,"action":"skip"})",
            R"({"kind":"other","step":3})", R"({"step":4})", R"({"kind":"train","step":5,"lo)"});
  ASSERT_EQ(r.train.size(), 2u);
  EXPECT_EQ(r.train[0].tokens, 128);
  EXPECT_EQ(r.train[0].layers.size(), 2u);
  EXPECT_EQ(r.train[0].layers[1].first, "act_rms");  // record order
  ASSERT_NE(r.train[0].layer("act_rms"), nullptr);
  EXPECT_TRUE(std::isnan((*r.train[0].layer("act_rms"))[2]));
  EXPECT_EQ(r.train[0].layer("block_cos"), nullptr);
  EXPECT_TRUE(r.train[1].skipped && r.train[1].nonfinite);
  EXPECT_TRUE(std::isnan(r.train[1].loss));
  EXPECT_TRUE(std::isnan(r.train[0].loss_z));  // absent
  ASSERT_EQ(r.eval.size(), 1u);
  EXPECT_TRUE(r.eval[0].has_eff_rank);
  EXPECT_TRUE(std::isnan(r.eval[0].eff_rank));
  ASSERT_EQ(r.spikes.size(), 1u);
  EXPECT_EQ(r.spikes[0].action, "skip");
  EXPECT_EQ(r.derived.skipped, 1);
  EXPECT_EQ(r.derived.nonfinite, 1);
  EXPECT_EQ(r.derived.last_step, 1);  // skipped records count as logged steps
  EXPECT_EQ(r.derived.final_train_loss, 5.0);  // the last applied record's loss
}

// spike_score counts every train record that carries a z-score, skipped ones included: under
// diag.spike.action: skip the spike steps are the skipped ones (src/metrics/README.md).
TEST(RecordsTest, SpikeScoreCountsSkippedSpikeSteps) {
  testing::TempDir dir;
  const std::vector<std::string> lines = {
      R"({"kind":"train","step":0,"loss":5.0,"grad_norm":2.0})",  // detector warming up: not counted
      R"({"kind":"train","step":1,"loss":4.0,"grad_norm":2.0,"loss_z":0.5,"grad_norm_z":-1.0})",
      R"({"kind":"train","step":2,"loss":9.0,"grad_norm":2.0,"loss_z":8.0,"grad_norm_z":0.0,"skipped":true})",
      R"({"kind":"spike","step":2,"metric":"loss","value":9,"mean":4,"std":0.6,"z":8,"action":"skip"})",
      R"({"kind":"train","step":3,"loss":4.0,"grad_norm":2.0,"loss_z":4.0,"grad_norm_z":0.1})",
      R"({"kind":"train","step":4,"loss":null,"grad_norm":null,"skipped":true,"nonfinite":true})",  // no z
      R"({"kind":"train","step":5,"loss":3.0,"grad_norm":2.0,"loss_z":-2.0,"grad_norm_z":0.0})"};
  EXPECT_DOUBLE_EQ(records(dir, lines).derived.spike_score, 0.25);       // 1 of 4
  EXPECT_DOUBLE_EQ(records(dir, lines, 3.0).derived.spike_score, 0.5);   // the threshold is the run's
  EXPECT_EQ(records(dir, lines).derived.spikes, 1);
  EXPECT_TRUE(std::isnan(records(dir, {lines[0]}).derived.spike_score));  // never active
}

TEST(RecordsTest, DivergedWhenNonFiniteOrTheLastLossIsNotBelowTheFirst) {
  testing::TempDir dir;
  const std::string first = R"({"kind":"train","step":0,"loss":5.0,"grad_norm":2.0})";
  EXPECT_EQ(records(dir, {first, R"({"kind":"train","step":9,"loss":4.999,"grad_norm":1.0})"}).derived.diverged, 0);
  EXPECT_EQ(records(dir, {first, R"({"kind":"train","step":9,"loss":5.0,"grad_norm":1.0})"}).derived.diverged, 1);
  EXPECT_EQ(records(dir, {first, R"({"kind":"train","step":1,"loss":null,"grad_norm":1.0})"}).derived.diverged, 1);
  EXPECT_EQ(records(dir, {first, R"({"kind":"train","step":1,"loss":null,"skipped":true,"nonfinite":true})",
                          R"({"kind":"train","step":2,"loss":1.0,"grad_norm":1.0})"})
                .derived.diverged,
            1);  // a non-finite record anywhere
  EXPECT_EQ(records(dir, {first}).derived.diverged, 1);  // one record: the last loss is not below the first
  EXPECT_TRUE(std::isnan(records(dir, {R"({"kind":"eval","step":0,"val_loss":5.5})"}).derived.diverged));
}

TEST(RecordsTest, FinalAndBestValidationWithTheirStepsAndExcess) {
  testing::TempDir dir;
  const RunRecords r = records(dir, {R"({"kind":"eval","step":0,"val_loss":5.5,"val_excess":4.5,"eff_rank":2})",
                                     R"({"kind":"eval","step":10,"val_loss":2.5,"val_excess":1.5,"eff_rank":7.5})",
                                     R"({"kind":"eval","step":20,"val_loss":null,"val_excess":null})",
                                     R"({"kind":"eval","step":30,"val_loss":2.5,"val_excess":1.5})",
                                     R"({"kind":"eval","step":40,"val_loss":2.75,"val_excess":1.75})"});
  const RunDerived& d = r.derived;
  EXPECT_EQ(d.best_val_loss, 2.5);
  EXPECT_EQ(d.best_val_step, 10);  // the first evaluation that reached it
  EXPECT_EQ(d.best_val_excess, 1.5);
  EXPECT_EQ(d.final_val_loss, 2.75);
  EXPECT_EQ(d.final_val_step, 40);
  EXPECT_EQ(d.final_val_excess, 1.75);
  EXPECT_DOUBLE_EQ(d.entropy_floor, 1.0);  // val_loss - val_excess as recorded
  EXPECT_EQ(d.final_eff_rank, 7.5);        // the last evaluation that carries it

  const RunRecords none = records(dir, {R"({"kind":"train","step":0,"loss":5.0,"grad_norm":2.0})"});
  EXPECT_TRUE(std::isnan(none.derived.best_val_loss));
  EXPECT_EQ(none.derived.best_val_step, -1);
  EXPECT_TRUE(std::isnan(none.derived.best_val_excess));
}

TEST(RecordsTest, ThroughputGradientsAndProfiles) {
  testing::TempDir dir;
  const RunRecords r = records(
      dir, {R"({"kind":"train","step":0,"loss":1,"grad_norm":2.0,"tok_per_s":100,"layers":{"grad_norm":[3.0,1.0,0.5]}})",
            R"({"kind":"train","step":1,"loss":1,"grad_norm":9.0,"skipped":true})",
            R"({"kind":"train","step":2,"loss":1,"grad_norm":4.0,"tok_per_s":400,"layers":{"grad_norm":[9.0,1.0,1.0]}})",
            R"({"kind":"train","step":3,"loss":1,"grad_norm":1.0,"tok_per_s":200,"layers":{"grad_norm":[2.0,1.0,1.0]}})",
            R"({"kind":"train","step":4,"loss":1,"grad_norm":1.5,"tok_per_s":300,"layers":{"grad_norm":[1.0,1.0,4.0]}})"});
  const RunDerived& d = r.derived;
  EXPECT_EQ(d.max_grad_norm, 9.0);  // skipped records included
  EXPECT_EQ(d.tok_per_s, 250);      // median of 100, 200, 300, 400
  ASSERT_EQ(d.profiles.size(), 3u);
  EXPECT_EQ(d.profiles[0].step, 0);
  EXPECT_EQ(d.profiles[1].step, 3);  // the middle of the four applied records with profiles
  EXPECT_EQ(d.profiles[2].step, 4);
  EXPECT_EQ(d.grad_ratio_first_last, 6.0);  // 3.0 / 0.5 at the first profile
  EXPECT_EQ(d.profiles[2].first_last(), 0.25);
}

const char* kConfig =
    "model:\n  layout: \"pre\"\n  n_layers: 2\n  d_model: 8\n  norm:\n    type: \"rmsnorm\"\n"
    "diag:\n  spike:\n    zscore: 3\n";

// A run with a spike, a skipped step, evaluations and per-layer series, written at `dir`.
void write_run(const std::string& dir) {
  testing::write_lines(dir + "/config.yaml", {kConfig});
  testing::write_lines(
      dir + "/metrics.jsonl",
      {R"({"kind":"eval","step":0,"val_loss":5.5,"eff_rank":1.5,"val_excess":4.5})",
       R"({"kind":"train","step":0,"loss":5.0,"grad_norm":2.0,"tokens":64,"tok_per_s":100,"layers":{"grad_norm":[3.0,0.5]}})",
       R"({"kind":"train","step":1,"loss":4.0,"grad_norm":2.5,"loss_z":1.0,"grad_norm_z":0.5,"tokens":128,"tok_per_s":300,)"
       R"("layers":{"grad_norm":[2.0,1.0],"act_rms":[1.0,1.5,2.0],"act_kurtosis":[3.0,4.5,60.0],)"
       R"("future_stat":[0.25,0.5,0.75],"block_cos":[0.5,0.9]}})",
       R"({"kind":"train","step":2,"loss":8.0,"grad_norm":7.0,"loss_z":4.0,"grad_norm_z":5.0,"tokens":128,"skipped":true})",
       R"({"kind":"spike","step":2,"metric":"loss","value":8.0,"mean":4.5,"std":0.8,"z":4.0,"action":"skip"})",
       R"({"kind":"spike","step":2,"metric":"grad_norm","value":7.0,"mean":2.2,"std":0.9,"z":5.0,"action":"skip"})",
       R"({"kind":"train","step":3,"loss":3.0,"grad_norm":1.5,"loss_z":-1.0,"grad_norm_z":-0.5,"tokens":192,"tok_per_s":200,)"
       R"("layers":{"grad_norm":[1.5,1.0]}})",
       R"({"kind":"eval","step":4,"val_loss":3.25,"eff_rank":3.5,"val_excess":2.25})"});
}

TEST(RecordsTest, ReportAndSweepSummaryAgreeOnTheSameRunDirectory) {
  testing::TempDir dir;
  Sweep sweep;
  sweep.axes = {SweepAxis{{"model.layout"}, {{"pre"}}}};
  sweep.seeds = {1};
  const auto points = expand_sweep(sweep);
  const std::string run = point_run_dir(dir.path(), points[0]);
  write_run(run);

  const SweepSummary s = summarise_sweep(sweep, points, dir.path());
  const SummaryValues& v = s.rows[0].values;
  const YAML::Node j = YAML::Load(report_json(run));
  auto same = [&](SummaryColumn c, const char* key) {
    SCOPED_TRACE(key);
    if (std::isnan(v[c])) {
      EXPECT_TRUE(j[key].IsNull());
    } else {
      EXPECT_DOUBLE_EQ(v[c], j[key].as<double>());
    }
  };
  same(kFinalTrainLoss, "final_train_loss");
  same(kBestValLoss, "best_val_loss");
  same(kBestValExcess, "best_val_excess");
  same(kBestValBpb, "best_val_bpb");
  same(kDiverged, "diverged");
  same(kSpikes, "spike_count");
  same(kSpikeScore, "spike_score");
  same(kMaxGradNorm, "max_grad_norm");
  same(kGradRatioFirstLast, "grad_ratio_first_last");
  same(kFinalEffRank, "final_eff_rank");
  same(kTokPerS, "tok_per_s");
  EXPECT_EQ(v[kSteps], j["last_step"].as<double>() + 1);
  // The numbers themselves: the threshold 3 is the run's config.yaml; the skipped spike step counts.
  EXPECT_DOUBLE_EQ(v[kSpikeScore], 1.0 / 3);  // steps 1, 2 (z 4 > 3, skipped), 3
  EXPECT_EQ(v[kSpikes], 2);
  EXPECT_EQ(v[kFinalTrainLoss], 3.0);
  EXPECT_EQ(v[kBestValLoss], 3.25);
  EXPECT_EQ(v[kDiverged], 0);
  EXPECT_EQ(v[kGradRatioFirstLast], 6.0);
  EXPECT_EQ(v[kFinalEffRank], 3.5);
  EXPECT_EQ(v[kTokPerS], 200);
  EXPECT_EQ(v[kMaxGradNorm], 7.0);
  EXPECT_EQ(j["layout"].as<std::string>(), "pre");
  EXPECT_EQ(j["skipped"].as<int>(), 1);
  EXPECT_EQ(j["spikes"].size(), 2u);

  // The summary's text reads the same numbers.
  const std::string t = report_text(run);
  EXPECT_NE(t.find("spike score 0.3333"), std::string::npos) << t;
  EXPECT_NE(t.find("best  3.2500 at step 4 (excess over floor 2.2500)"), std::string::npos) << t;
  EXPECT_NE(t.find("1 skipped updates"), std::string::npos) << t;
}

// The per-layer table lists every layers.<name> series of the last full-diagnostics record,
// whatever its name, with an `out` row for the L+1 positions of the residual stream.
TEST(RecordsTest, ReportListsEveryPerLayerSeriesIncludingUnknownOnes) {
  testing::TempDir dir;
  write_run(dir.path());
  const RunRecords r = read_run(dir.path());
  ASSERT_NE(r.diag_record(), nullptr);
  EXPECT_EQ(r.diag_record()->step, 1);  // the record with the most series, not the last one
  const std::string t = report_text(dir.path());
  EXPECT_NE(t.find("per-layer diagnostics at step 1"), std::string::npos) << t;
  for (const char* name : {"grad_norm", "act_rms", "act_kurtosis", "future_stat", "block_cos"}) {
    EXPECT_NE(t.find(name), std::string::npos) << name << "\n" << t;
  }
  // blocks.0 row: 2, 1, 3, 0.25, 0.5 in the record's order; the out row has the [L+1] series only.
  EXPECT_NE(t.find("out                    -           2            60         0.75           -"), std::string::npos)
      << t;
  const YAML::Node j = YAML::Load(report_json(dir.path()));
  EXPECT_EQ(j["diag_step"].as<int>(), 1);
  EXPECT_EQ(j["layers"]["future_stat"].size(), 3u);
  EXPECT_EQ(j["layers"]["act_kurtosis"][2].as<double>(), 60.0);
  EXPECT_EQ(j["block_cos"].size(), 2u);
}

TEST(RecordsTest, ReadRunNeedsADirectoryWithMetrics) {
  testing::TempDir dir;
  EXPECT_THROW(read_run(dir / "nope"), UsageError);
  EXPECT_THROW(read_run(dir.path()), UsageError);
  testing::write_lines(dir / "metrics.jsonl", {R"({"kind":"train","step":0,"loss":5.0})"});
  testing::write_lines(dir / "config.yaml", {"model: [unclosed"});
  const RunRecords r = read_run(dir.path());  // a broken config.yaml: defaults and a warning
  EXPECT_EQ(r.info.spike_zscore, 6);
  ASSERT_EQ(r.derived.warnings.size(), 1u);
  EXPECT_NE(r.derived.warnings[0].find("config.yaml"), std::string::npos);
}

}  // namespace
}  // namespace normlab

namespace normlab {
namespace {

// The writer and the reader are mirrors: every kind of train record written by to_json reads
// back into the same fields, and the keys come in the documented order.
TEST(RecordsWriterTest, TrainRecordsRoundTripThroughTheReader) {
  testing::TempDir dir;
  TrainRecord applied;
  applied.step = 7;
  applied.loss = 3.5;
  applied.lr = 1e-3;
  applied.grad_norm = 0.75;
  applied.loss_z = 1.25;
  applied.tokens = 4096;
  applied.applied = true;
  applied.tok_per_s = 1234.5;
  applied.param_norm = 12.0;
  applied.qk_clipped = 2;
  applied.layers = {{"grad_norm", {0.5, 0.25}}, {"act_rms", {1.0, 2.0, 3.0}}};
  applied.grad_norm_embed = 0.125;
  applied.grad_norm_head = 0.0625;
  applied.logit_max = 9.0;
  applied.lse_mean = 4.0;
  applied.depth_weights = {{"h_1", {0.5, 0.5}}};
  applied.params = {{"tok_emb.weight", 0.5}};
  TrainRecord overflow;
  overflow.step = 8;
  overflow.loss = 3.0;
  overflow.lr = 1e-3;
  overflow.grad_norm = std::numeric_limits<double>::infinity();
  overflow.loss_scale = 65536;
  overflow.tokens = 4096;
  overflow.skipped = overflow.overflow = true;
  TrainRecord stopped;  // a spike that stopped the run: neither applied nor skipped
  stopped.step = 9;
  stopped.loss = 30.0;
  stopped.lr = 1e-3;
  stopped.grad_norm = 5.0;
  stopped.loss_z = 12.0;
  stopped.tokens = 4096;
  const std::string line = to_json(applied);
  EXPECT_EQ(line.rfind(R"({"kind":"train","step":7,"loss":3.5,"lr":0.001,"grad_norm":0.75,"loss_z":1.25,"tokens":4096,)", 0), 0u)
      << line;
  EXPECT_EQ(to_json(stopped), R"({"kind":"train","step":9,"loss":30,"lr":0.001,"grad_norm":5,"loss_z":12,"tokens":4096})");
  const RunRecords r = records(dir, {line, to_json(overflow), to_json(stopped)});
  ASSERT_EQ(r.train.size(), 3u);
  const TrainRecord& a = r.train[0];
  EXPECT_TRUE(a.applied);
  EXPECT_FALSE(a.skipped);
  EXPECT_EQ(a.tokens, 4096);
  EXPECT_DOUBLE_EQ(a.tok_per_s, 1234.5);
  EXPECT_DOUBLE_EQ(a.param_norm, 12.0);
  EXPECT_EQ(a.qk_clipped, 2);
  EXPECT_TRUE(std::isnan(a.grad_noise_scale));
  EXPECT_EQ(a.layers, applied.layers);
  EXPECT_EQ(a.depth_weights, applied.depth_weights);
  EXPECT_EQ(a.params, applied.params);
  EXPECT_DOUBLE_EQ(a.logit_max, 9.0);
  EXPECT_EQ(to_json(a), line);  // read back, written again: the same line
  const TrainRecord& o = r.train[1];
  EXPECT_TRUE(o.skipped && o.overflow && !o.applied);
  EXPECT_DOUBLE_EQ(o.loss_scale, 65536);
  EXPECT_TRUE(std::isnan(o.grad_norm));  // written as null
  const TrainRecord& s = r.train[2];
  EXPECT_FALSE(s.skipped || s.applied);
  EXPECT_DOUBLE_EQ(s.loss_z, 12.0);
}

TEST(RecordsWriterTest, EvalAndSpikeRecordsRoundTrip) {
  testing::TempDir dir;
  EvalRecord e;
  e.step = 100;
  e.val_loss = 2.5;
  e.eff_rank = 40;
  e.val_excess = 1.5;
  SpikeRecord sp{12, "loss", "skip", 9.0, 3.0, 1.0, 6.0};
  EXPECT_EQ(to_json(e), R"({"kind":"eval","step":100,"val_loss":2.5,"eff_rank":40,"val_excess":1.5})");
  EXPECT_EQ(to_json(sp), R"({"kind":"spike","step":12,"metric":"loss","value":9,"mean":3,"std":1,"z":6,"action":"skip"})");
  const RunRecords r = records(dir, {to_json(e), to_json(sp)});
  ASSERT_EQ(r.eval.size(), 1u);
  ASSERT_EQ(r.spikes.size(), 1u);
  EXPECT_DOUBLE_EQ(r.eval[0].val_excess, 1.5);
  EXPECT_TRUE(std::isnan(r.eval[0].val_bpb));
  EXPECT_EQ(r.spikes[0].metric, "loss");
  EXPECT_DOUBLE_EQ(r.spikes[0].z, 6.0);
}

// spikes/step_<N>.json lists the layers in model order and again by relative jump, largest first,
// layers without a baseline last.
TEST(RecordsWriterTest, SpikeForensicsRankLayersByRelativeJump) {
  SpikeForensics f;
  f.step = 5;
  f.action = "log";
  f.window = 10;
  f.zscore_threshold = 6;
  f.loss = {4.0, 2.0, 0.5, 4.0};
  f.data = {"a.txt"};
  f.format = "bytes";
  f.ctx = 8;
  f.first_micro_batch = 3;
  f.offsets = {{0, 9}, {18, 27}};
  f.layers = {{"blocks.0", 1.0, 1.0}, {"blocks.1", 6.0, 2.0}, {"embed", 1.0, 0.0}, {"head", 4.0, 1.0}};
  const YAML::Node j = YAML::Load(to_json(f));
  EXPECT_EQ(j["batch"]["window_tokens"].as<int>(), 9);
  EXPECT_EQ(j["batch"]["micro_batches"][1]["micro_batch"].as<int>(), 4);
  EXPECT_EQ(j["batch"]["micro_batches"][1]["offsets"][0].as<int>(), 18);
  ASSERT_EQ(j["layers"].size(), 4u);
  EXPECT_EQ(j["layers"][2]["layer"].as<std::string>(), "embed");
  EXPECT_TRUE(j["layers"][2]["relative_jump"].IsNull());
  std::vector<std::string> order;
  for (const auto& l : j["layers_by_jump"]) order.push_back(l["layer"].as<std::string>());
  EXPECT_EQ(order, (std::vector<std::string>{"head", "blocks.1", "blocks.0", "embed"}));
  EXPECT_DOUBLE_EQ(j["layers_by_jump"][0]["relative_jump"].as<double>(), 4.0);
}

}  // namespace
}  // namespace normlab

namespace normlab {
namespace {

// Seed statistics are defined once (metrics/records.h): sample std, non-finite seeds left out and
// counted; the summary, compare and the plots read these.
TEST(SeedStatsTest, SampleStdOverTheFiniteSeedsWithTheOthersCounted) {
  const SeedStats s = seed_stats({1.0, 2.0, 3.0, std::nan(""), std::numeric_limits<double>::infinity()});
  EXPECT_EQ(s.n, 3);
  EXPECT_EQ(s.missing, 2);
  EXPECT_DOUBLE_EQ(s.mean, 2.0);
  EXPECT_DOUBLE_EQ(s.std, 1.0);  // sqrt((1 + 0 + 1) / (3 - 1))
  const SeedStats one = seed_stats({4.0});
  EXPECT_DOUBLE_EQ(one.mean, 4.0);
  EXPECT_TRUE(std::isnan(one.std));
  EXPECT_TRUE(std::isnan(seed_stats({}).mean));
}

TEST(RecordsTest, ARunWithoutValidRecordsIsAUsageErrorForReportAndCompare) {
  testing::TempDir dir;
  testing::write_lines(dir / "empty/metrics.jsonl", {"not json", R"({"kind":"other"})"});
  EXPECT_NO_THROW(read_run(dir / "empty"));  // the sweep summary reads a run that is starting
  try {
    read_run_with_records(dir / "empty");
    FAIL() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.jsonl: no valid train or eval record"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
  EXPECT_THROW(report_text(dir / "empty"), UsageError);
  EXPECT_THROW(report_json(dir / "empty"), UsageError);
  testing::write_lines(dir / "good/metrics.jsonl", {R"({"kind":"train","step":0,"loss":5.0,"grad_norm":1.0})"});
  EXPECT_THROW(compare_runs({dir / "good", dir / "empty"}, ""), UsageError);
}

}  // namespace
}  // namespace normlab

namespace normlab {
namespace {

TEST(RecordsTest, BitsPerByteFactorComesFromTheBestEvalRecord) {
  testing::TempDir dir;
  const RunRecords r = records(dir, {R"({"kind":"eval","step":0,"val_loss":4.0,"val_bpb":6.0})",
                                     R"({"kind":"eval","step":10,"val_loss":2.0,"val_bpb":2.5})"});
  EXPECT_DOUBLE_EQ(r.derived.bpb_per_nat, 1.25);  // the best record's 2.5 / 2.0
  const RunRecords none = records(dir, {R"({"kind":"eval","step":0,"val_loss":4.0})"});
  EXPECT_TRUE(std::isnan(none.derived.bpb_per_nat));
}

}  // namespace
}  // namespace normlab
