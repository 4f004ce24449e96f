// The gradient reducer (parallel/comm.h) against an in-process stand-in for the other rank: buckets
// start while the backward runs, the averages land in the right gradients, scalars are summed,
// and the same holds when nothing was armed (every bucket started at finish()).
#include <gtest/gtest.h>

#include <cstdlib>

#include "config/load.h"
#include "parallel/comm.h"
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

// NCCL on the GPU (label `cuda`: skipped without one): a one-rank group on cuda:0 over a hosted
// store, as `--nproc` and torchrun's agent serve it. Sums and broadcasts leave one rank's values as
// they are, CPU tensors go through the GPU and come back, and the reducer over a model on the GPU
// starts every bucket during the backward and leaves the gradients as they were.
TEST(CudaNccl, OneRankGroupReducesOnTheGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  if (!have_nccl()) GTEST_SKIP() << "this build has no NCCL process group (LibTorch 2.x CUDA with nccl.h)";
  auto store = host_rendezvous_store(60);
  ::setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  DistEnv env;
  env.master_addr = "127.0.0.1";
  env.master_port = store->port();
  auto comm = connect_ranks(env, DistBackend::kNccl, 60);
  ::unsetenv("TORCHELASTIC_USE_AGENT_STORE");
  const torch::Device gpu(torch::kCUDA, 0);
  std::vector<torch::Tensor> xs{torch::arange(5, torch::TensorOptions().dtype(torch::kFloat).device(gpu))};
  comm->allreduce_sum(xs);
  EXPECT_TRUE(torch::equal(xs[0].cpu(), torch::arange(5, torch::kFloat)));
  std::vector<torch::Tensor> host{torch::tensor({int64_t{1}, int64_t{7}})};
  comm->broadcast(host, 0);
  EXPECT_TRUE(host[0].device().is_cpu());
  EXPECT_EQ(host[0][1].item<int64_t>(), 7);
  comm->barrier();

  testing::TempDir dir;
  Config c = testing::tiny_config(dir / "run");
  c.train.device = DeviceKind::kCuda;
  c = check_and_resolve(parse_config_text(dump_config(c)), true);
  const Corpus data = Corpus::load(c.data.train);
  Trainable t = make_trainable(c, gpu);
  int64_t mb = 0;
  forward_backward(c, t.model, *t.optimizer, data, gpu, mb, false);
  const auto local = grads_of(t);
  GradientReducer reducer(*comm, t.params, 4096, 16384);
  mb = 0;
  forward_backward(c, t.model, *t.optimizer, data, gpu, mb, false, 1.0, 0, 1, &reducer);
  std::vector<torch::Tensor> scalars{torch::full({}, 3.0f, torch::TensorOptions().device(gpu))};
  reducer.finish(scalars);
  EXPECT_EQ(reducer.started_in_backward(), reducer.buckets());
  EXPECT_FLOAT_EQ(scalars[0].item<float>(), 3.0f);
  for (size_t i = 0; i < t.params.size(); ++i) {
    EXPECT_TRUE(torch::allclose(t.params[i].grad(), local[i], 1e-6, 1e-7)) << t.names[i];
  }
}

}  // namespace
}  // namespace normlab
