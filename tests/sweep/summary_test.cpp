// Summary numbers from hand-written metrics.jsonl files, aggregation over seeds, CSV and Markdown.
#include "sweep/summary.h"

#include <gtest/gtest.h>

#include <cmath>

#include <filesystem>
#include <fstream>

#include "core/fs.h"
#include "test_util.h"

namespace normlab {
namespace {

TEST(SweepSummaryTest, RunNumbersFollowTheFormat) {
  testing::TempDir dir;
  testing::write_lines(
      dir / "m.jsonl",
      {R"({"kind":"eval","step":0,"val_loss":5.5,"val_excess":4.5})",
       R"({"kind":"train","step":0,"loss":5.0,"grad_norm":2.0,"tok_per_s":100,"layers":{"grad_norm":[3.0,1.0,0.5]}})",
       R"({"kind":"train","step":10,"loss":3.0,"grad_norm":4.0,"tok_per_s":400,"layers":{"grad_norm":[9.0,1.0,1.0]}})",
       R"({"kind":"spike","step":10,"metric":"grad_norm","value":4.0,"z":7.0,"action":"log"})",
       R"({"kind":"train","step":20,"loss":2.0,"grad_norm":1.0,"tok_per_s":200})",
       R"({"kind":"eval","step":20,"val_loss":2.5,"val_excess":1.5})",
       R"({"kind":"train","step":29,"loss":2.25,"grad_norm":1.5,"tok_per_s":300})",
       R"({"kind":"eval","step":30,"val_loss":2.7,"val_excess":1.7})",
       R"({"kind":"train","step":30,"lo)"});  // a torn last line is ignored
  const SummaryValues v = run_metrics(dir / "m.jsonl");
  EXPECT_EQ(v[kSteps], 30);
  EXPECT_EQ(v[kFinalTrainLoss], 2.25);
  EXPECT_EQ(v[kBestValLoss], 2.5);
  EXPECT_EQ(v[kBestValExcess], 1.5);
  EXPECT_EQ(v[kDiverged], 0);
  EXPECT_EQ(v[kSpikes], 1);
  EXPECT_EQ(v[kMaxGradNorm], 4.0);
  EXPECT_EQ(v[kGradRatioFirstLast], 6.0);  // 3.0 / 0.5 at the first train record
  EXPECT_EQ(v[kTokPerS], 250);             // median of 100, 200, 300, 400
  EXPECT_TRUE(std::isnan(v[kWallS]));      // from point.json, not the metrics
  EXPECT_TRUE(std::isnan(v[kSpikeScore]));  // no record had an active detector

  // spike_score: of the 4 records with z-scores, 1 is above 6 (grad_norm) and 1 above 6 only
  // under a threshold of 3; records without z (detector warming up) do not count.
  testing::write_lines(dir / "z.jsonl",
              {R"({"kind":"train","step":0,"loss":5.0,"grad_norm":2.0})",
               R"({"kind":"train","step":1,"loss":4.0,"grad_norm":2.0,"loss_z":0.5,"grad_norm_z":-1.0})",
               R"({"kind":"train","step":2,"loss":4.0,"grad_norm":9.0,"loss_z":1.0,"grad_norm_z":7.5})",
               R"({"kind":"train","step":3,"loss":6.0,"grad_norm":2.0,"loss_z":4.0,"grad_norm_z":0.1})",
               R"({"kind":"train","step":4,"loss":3.0,"grad_norm":2.0,"loss_z":-2.0,"grad_norm_z":0.0})"});
  EXPECT_DOUBLE_EQ(run_metrics(dir / "z.jsonl")[kSpikeScore], 0.25);
  EXPECT_DOUBLE_EQ(run_metrics(dir / "z.jsonl", 3.0)[kSpikeScore], 0.5);

  // No eval excess, one train record: empty cells where the records have nothing.
  testing::write_lines(dir / "short.jsonl", {R"({"kind":"train","step":0,"loss":5.0,"grad_norm":2.0})"});
  const SummaryValues s = run_metrics(dir / "short.jsonl");
  EXPECT_EQ(s[kSteps], 1);
  EXPECT_TRUE(std::isnan(s[kBestValLoss]));
  EXPECT_TRUE(std::isnan(s[kGradRatioFirstLast]));
  EXPECT_TRUE(std::isnan(s[kTokPerS]));
  EXPECT_EQ(s[kDiverged], 1);  // the last loss is not below the first

  const SummaryValues none = run_metrics(dir / "missing.jsonl");
  for (double x : none) EXPECT_TRUE(std::isnan(x));
}

TEST(SweepSummaryTest, DivergedWhenNonFiniteOrLossDidNotFall) {
  testing::TempDir dir;
  testing::write_lines(
      dir / "nan.jsonl",
      {R"({"kind":"train","step":0,"loss":5.0,"grad_norm":2.0})",
       R"({"kind":"train","step":1,"loss":null,"grad_norm":null,"skipped":true,"nonfinite":true})",
       R"({"kind":"train","step":2,"loss":4.0,"grad_norm":9.0})"});
  const SummaryValues n = run_metrics(dir / "nan.jsonl");
  EXPECT_EQ(n[kDiverged], 1);  // a non-finite record anywhere
  EXPECT_EQ(n[kMaxGradNorm], 9.0);
  EXPECT_EQ(n[kSteps], 3);

  testing::write_lines(dir / "last_null.jsonl",
              {R"({"kind":"train","step":0,"loss":5.0,"grad_norm":2.0})",
               R"({"kind":"train","step":1,"loss":null,"grad_norm":1.0})"});
  EXPECT_EQ(run_metrics(dir / "last_null.jsonl")[kDiverged], 1);
  EXPECT_TRUE(std::isnan(run_metrics(dir / "last_null.jsonl")[kFinalTrainLoss]));

  testing::write_lines(dir / "up.jsonl", {R"({"kind":"train","step":0,"loss":5.0,"grad_norm":2.0})",
                                 R"({"kind":"train","step":9,"loss":5.0,"grad_norm":1.0})"});
  EXPECT_EQ(run_metrics(dir / "up.jsonl")[kDiverged], 1);  // >= the first loss

  testing::write_lines(dir / "ok.jsonl", {R"({"kind":"train","step":0,"loss":5.0,"grad_norm":2.0})",
                                 R"({"kind":"train","step":9,"loss":4.999,"grad_norm":1.0})"});
  EXPECT_EQ(run_metrics(dir / "ok.jsonl")[kDiverged], 0);
}

// Two layouts x two seeds; one point never ran.
class SweepSummaryTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sweep_.axes = {SweepAxis{{"model.layout"}, {{"pre"}, {"post"}}}};
    sweep_.seeds = {1, 2};
    points_ = expand_sweep(sweep_);
    auto run = [&](size_t i, double last_loss, double tok, PointStatus status, double wall) {
      const std::string dir = point_run_dir(dir_.path(), points_[i]);
      testing::write_lines(
          dir + "/metrics.jsonl",
          {R"({"kind":"train","step":0,"loss":5.0,"grad_norm":2.0,"tok_per_s":)" +
               std::to_string(tok) + R"(,"layers":{"grad_norm":[2.0,1.0]}})",
           R"({"kind":"train","step":9,"loss":)" + std::to_string(last_loss) +
               R"(,"grad_norm":1.0})",
           R"({"kind":"eval","step":10,"val_loss":)" + std::to_string(last_loss + 0.5) + "}"});
      PointRecord r;
      r.status = status;
      r.exit_code = 0;
      r.wall_s = wall;
      write_point_record(dir, points_[i], r);
    };
    run(0, 2.0, 1000, PointStatus::kDone, 10);
    run(1, 3.0, 3000, PointStatus::kDone, 30);
    run(2, 6.0, 2000, PointStatus::kDiverged, 20);  // post, seed 1; post seed 2 never ran
  }
  testing::TempDir dir_;
  Sweep sweep_;
  std::vector<SweepPoint> points_;
};

TEST_F(SweepSummaryTableTest, MeanAndSampleStdOverTheSeedsOfEachCombination) {
  const SweepSummary s = summarise_sweep(sweep_, points_, dir_.path());
  ASSERT_EQ(s.rows.size(), 4u + 2 * 2);
  EXPECT_EQ(s.rows[3].status, "pending");
  EXPECT_TRUE(std::isnan(s.rows[3].values[kSteps]));
  const SummaryRow& mean = s.rows[4];
  const SummaryRow& sd = s.rows[5];
  EXPECT_EQ(mean.row, "mean");
  EXPECT_EQ(mean.name, "layout=pre");
  EXPECT_EQ(mean.axis_values, std::vector<std::string>{"pre"});
  EXPECT_EQ(mean.seed, "");
  EXPECT_EQ(mean.n, 2);
  EXPECT_EQ(mean.status, "2/2 done");
  EXPECT_DOUBLE_EQ(mean.values[kFinalTrainLoss], 2.5);
  // seed_stats (metrics/records.h): sample std, sqrt(((2-2.5)^2 + (3-2.5)^2) / (2 - 1))
  EXPECT_DOUBLE_EQ(sd.values[kFinalTrainLoss], std::sqrt(0.5));
  EXPECT_DOUBLE_EQ(mean.values[kBestValLoss], 3.0);
  EXPECT_DOUBLE_EQ(mean.values[kTokPerS], 2000);
  EXPECT_DOUBLE_EQ(sd.values[kTokPerS], 1000 * std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(mean.values[kWallS], 20);
  EXPECT_DOUBLE_EQ(mean.values[kDiverged], 0);
  const SummaryRow& post = s.rows[6];
  EXPECT_EQ(post.n, 1);  // only the seed that ran
  EXPECT_EQ(post.status, "0/2 done");
  EXPECT_DOUBLE_EQ(post.values[kDiverged], 1);
  EXPECT_TRUE(std::isnan(s.rows[7].values[kFinalTrainLoss]));  // one seed: no spread
}

TEST_F(SweepSummaryTableTest, CsvAndMarkdownFiles) {
  const SweepSummary s = summarise_sweep(sweep_, points_, dir_.path());
  write_summary_files(s);
  const std::string csv = read_file(dir_ / "summary.csv");
  std::istringstream in(csv);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 1u + 8);
  EXPECT_EQ(lines[0],
            "row,name,model.layout,seed,n,status,steps,final_train_loss,best_val_loss,best_val_"
            "excess,best_val_bpb,diverged,"
            "spike_count,spike_score,max_grad_norm,grad_ratio_first_last,final_eff_rank,tok_per_s,wall_s");
  EXPECT_EQ(lines[1], "run,\"layout=pre,seed=1\",pre,1,1,done,10,2,2.5,,,0,0,,2,2,,1000,10");
  EXPECT_EQ(lines[4], "run,\"layout=post,seed=2\",post,2,1,pending,,,,,,,,,,,,,");
  EXPECT_EQ(lines[5], "mean,layout=pre,pre,,2,2/2 done,10,2.5,3,,,0,0,,2,2,,2000,20");
  EXPECT_EQ(lines[6], "std,layout=pre,pre,,2,2/2 done,0,0.707107,0.707107,,,0,0,,0,0,,1414.21,14.1421");

  const std::string md = read_file(dir_ / "summary.md");
  EXPECT_NE(md.find("final loss: last train loss"), std::string::npos);
  EXPECT_NE(md.find("| layout | seed | status | steps | final loss |"), std::string::npos) << md;
  EXPECT_NE(md.find("| pre | 1 | done | 10 | 2.0000 | 2.5000 | - | - | 0 | 0 | - | 2 | 2 | - | 1000 | 10.0 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| pre | 2 | 2/2 done | 2.5000 ± 0.7071 | 3.0000 ± 0.7071 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| post | 1 | 0/2 done | 6.0000 | 6.5000 | - | - | 1.00 |"), std::string::npos)
      << md;

  const std::string json = summary_json(s);
  EXPECT_NE(
      json.find(
          R"({"row":"run","name":"layout=pre,seed=1","model.layout":"pre","seed":1,"n":1,"status":"done","steps":10,)"),
      std::string::npos)
      << json;
  EXPECT_NE(json.find(R"("seed":null,"n":2,"status":"2/2 done")"), std::string::npos) << json;
}

TEST(SweepSummaryTest, PointRecordRoundTrips) {
  testing::TempDir dir;
  SweepPoint p;
  p.name = "layout=pre,seed=3";
  p.overrides = {{"model.layout", "pre"}};
  p.seed = 3;
  EXPECT_FALSE(read_point_record(dir.path()));
  PointRecord r;
  r.status = PointStatus::kRunning;
  write_point_record(dir.path(), p, r);
  EXPECT_EQ(
      read_file(dir / "point.json"),
      R"({"name":"layout=pre,seed=3","overrides":{"model.layout":"pre"},"seed":3,"status":"running","exit_code":null,"wall_s":null})"
      "\n");
  r.status = PointStatus::kFailed;
  r.exit_code = 2;
  r.wall_s = 1.5;
  write_point_record(dir.path(), p, r);
  const auto back = read_point_record(dir.path());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->status, PointStatus::kFailed);
  EXPECT_EQ(back->exit_code, 2);
  EXPECT_EQ(back->wall_s, 1.5);
}

}  // namespace
}  // namespace normlab

namespace normlab {
namespace {

TEST(SweepSummaryTest, MarkdownLeavesOutTheAggregateTableWithOneSeed) {
  testing::TempDir dir;
  Sweep sweep;
  sweep.axes = {SweepAxis{{"model.layout"}, {{"pre"}, {"post"}}}};
  sweep.seeds = {1};
  const SweepSummary s = summarise_sweep(sweep, expand_sweep(sweep), dir.path());
  EXPECT_EQ(s.rows.size(), 2u + 2 * 2);  // the CSV keeps its mean/std rows
  const std::string md = summary_markdown(s);
  EXPECT_NE(md.find("| post | 1 | pending |"), std::string::npos) << md;
  EXPECT_EQ(md.find("## Mean"), std::string::npos) << md;
}

}  // namespace
}  // namespace normlab
