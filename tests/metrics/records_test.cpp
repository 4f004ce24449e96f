// The one reader of a run's records (src/metrics/records.h) on hand-written metrics.jsonl files:
// every derived number of src/metrics/README.md ("Derived numbers"), and `normlab report` and the
// sweep summary giving the same numbers for the same run directory.
#include "metrics/records.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>

#include "core/errors.h"
#include "metrics/report.h"
#include "sweep/summary.h"
#include "test_util.h"

namespace normlab {
namespace {

void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream f(path);
  for (const auto& l : lines) f << l << "\n";
}

RunRecords records(const testing::TempDir& dir, const std::vector<std::string>& lines, double zscore = 6) {
  write_lines(dir / "m.jsonl", lines);
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
  write_lines(dir + "/config.yaml", {kConfig});
  write_lines(
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
  same(kFinalEffRank, "eff_rank");
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
  write_lines(dir / "metrics.jsonl", {R"({"kind":"train","step":0,"loss":5.0})"});
  write_lines(dir / "config.yaml", {"model: [unclosed"});
  const RunRecords r = read_run(dir.path());  // a broken config.yaml: defaults and a warning
  EXPECT_EQ(r.info.spike_zscore, 6);
  ASSERT_EQ(r.derived.warnings.size(), 1u);
  EXPECT_NE(r.derived.warnings[0].find("config.yaml"), std::string::npos);
}

}  // namespace
}  // namespace normlab
