// The gradient reducer (dist/comm.h) against an in-process stand-in for the other rank: buckets
// start while the backward runs, the averages land in the right gradients, scalars are summed,
// and the same holds when nothing was armed (every bucket started at finish()).
#include <gtest/gtest.h>

#include "config/load.h"
#include "dist/comm.h"
#include "test_util.h"
#include "train/run_config.h"
#include "train/step.h"

namespace normlab {
namespace {

// Rank 0 of 2, whose peer holds x + 2 wherever this rank holds x: a sum is 2x + 2, an average
// x + 1. Counts the collectives started and those started while `in_backward` was set.
class PairComm final : public Comm {
 public:
  class Done final : public Pending {
   public:
    void wait() override {}
  };
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  std::unique_ptr<Pending> start_allreduce_sum(std::vector<torch::Tensor> tensors) override {
    ++started;
    for (auto& t : tensors) t.mul_(2).add_(2);
    return std::make_unique<Done>();
  }
  void allreduce_max(std::vector<torch::Tensor>&) override {}
  void broadcast(std::vector<torch::Tensor>&, int) override {}
  void barrier(double) override {}
  void set_step(int64_t) override {}
  [[noreturn]] void fail(const std::string& during, const std::string& reason) override {
    throw std::runtime_error(during + ": " + reason);
  }
  int started = 0;
};

struct Fixture {
  Config cfg;
  Corpus data;
  Trainable t;
};

Fixture make_fixture(const std::string& dir, int64_t accum) {
  Config c = testing::tiny_config(dir);
  c.train.accum = accum;
  c = check_and_resolve(parse_config_text(dump_config(c)), true);
  Fixture s{c, Corpus::load(c.data.train), make_trainable(c, torch::Device(torch::kCPU))};
  return s;
}

std::vector<torch::Tensor> grads_of(const Trainable& t) {
  std::vector<torch::Tensor> g;
  for (const auto& p : t.params) g.push_back(p.grad().clone());
  return g;
}

void expect_averaged(const Trainable& t, const std::vector<torch::Tensor>& local) {
  for (size_t i = 0; i < t.params.size(); ++i) {
    EXPECT_TRUE(torch::allclose(t.params[i].grad(), local[i] + 1, 0, 1e-6)) << t.names[i];
  }
}

TEST(GradientReducerTest, BucketsStartDuringTheBackwardAndAveragesLandInPlace) {
  for (const int64_t accum : {1, 2}) {
    testing::TempDir dir;
    Fixture s = make_fixture(dir / "run", accum);
    const torch::Device cpu(torch::kCPU);
    int64_t mb = 0;
    forward_backward(s.cfg, s.t.model, *s.t.optimizer, s.data, cpu, mb, false);
    const auto local = grads_of(s.t);

    PairComm comm;
    // Small buckets, so the model spans several and most start before the backward ends.
    GradientReducer reducer(comm, s.t.params, /*first_bucket_bytes=*/4096, /*bucket_bytes=*/16384);
    ASSERT_GT(reducer.buckets(), 3u);
    mb = 0;
    // The rows of a one-process run (rank 0 of 1), so the local gradients are those above.
    forward_backward(s.cfg, s.t.model, *s.t.optimizer, s.data, cpu, mb, false, 1.0, 0, 1, &reducer);
    EXPECT_EQ(comm.started, static_cast<int>(reducer.buckets())) << "accum " << accum;
    std::vector<torch::Tensor> scalars{torch::full({}, 3.0f), torch::full({}, 0.0f)};
    reducer.finish(scalars);
    EXPECT_EQ(reducer.started_in_backward(), reducer.buckets()) << "accum " << accum;
    EXPECT_EQ(comm.started, static_cast<int>(reducer.buckets()) + 1);  // + the scalars
    EXPECT_FLOAT_EQ(scalars[0].item<float>(), 8.0f);  // summed: 3 + (3 + 2)
    EXPECT_FLOAT_EQ(scalars[1].item<float>(), 2.0f);
    SCOPED_TRACE("accum " + std::to_string(accum));
    expect_averaged(s.t, local);
  }
}

TEST(GradientReducerTest, UnarmedBackwardIsReducedAtFinish) {
  testing::TempDir dir;
  Fixture s = make_fixture(dir / "run", 1);
  const torch::Device cpu(torch::kCPU);
  PairComm comm;
  GradientReducer reducer(comm, s.t.params, 4096, 16384);
  int64_t mb = 0;
  forward_backward(s.cfg, s.t.model, *s.t.optimizer, s.data, cpu, mb, false);  // not armed
  EXPECT_EQ(comm.started, 0);
  const auto local = grads_of(s.t);
  std::vector<torch::Tensor> none;
  reducer.finish(none);
  EXPECT_EQ(reducer.started_in_backward(), 0u);
  EXPECT_EQ(comm.started, static_cast<int>(reducer.buckets()));
  expect_averaged(s.t, local);
}

}  // namespace
}  // namespace normlab
