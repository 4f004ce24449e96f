// Several training processes (src/parallel/README.md): the ranks' environment as torchrun sets it,
// and the c10d process group they talk through. Only src/parallel/c10d.cpp sees c10d and Gloo; the
// rest of NormLab sees this interface.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/torch.h"

namespace normlab {

// torchrun's variables. Without WORLD_SIZE (or with WORLD_SIZE=1) a run is one process.
struct DistEnv {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string master_addr;
  int master_port = 0;
  bool distributed() const { return world_size > 1; }
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT. Throws
// UsageError naming the variable when one is malformed or missing while WORLD_SIZE > 1.
DistEnv dist_env_from_environment();

// LibTorch threads for a rank: train.threads when set, else this machine's cores shared evenly
// between the ranks on it (at least one).
int64_t threads_per_rank(int64_t configured, const DistEnv& env, int64_t cores);

// A connected process group. Collectives work on contiguous float32 tensors of any device (with
// Gloo CUDA tensors go through host memory, with NCCL CPU tensors through the rank's GPU). A collective that fails (a rank died, or stayed
// silent for train.dist_timeout) never returns: the process logs one line naming the lost rank
// and exits with status 1; the run directory keeps its last complete checkpoint.
class Comm {
 public:
  // Collectives started and not yet waited for.
  class Pending {
   public:
    virtual ~Pending() = default;
    // Waits; then the tensors given to the start hold the result.
    virtual void wait() = 0;
  };

  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Starts summing each tensor over the ranks, in place (each its own collective), and returns
  // at once: the caller computes on meanwhile and must not touch the tensors before wait().
  virtual std::unique_ptr<Pending> start_allreduce_sum(std::vector<torch::Tensor> tensors) = 0;
  // Sums each tensor over the ranks, in place; all reductions run at once.
  void allreduce_sum(std::vector<torch::Tensor>& tensors) { start_allreduce_sum(tensors)->wait(); }
  // Element-wise max over the ranks, in place (QK-Clip's per-head max logit).
  virtual void allreduce_max(std::vector<torch::Tensor>& tensors) = 0;
  // Rank `root`'s values into every rank's tensors, in place.
  virtual void broadcast(std::vector<torch::Tensor>& tensors, int root) = 0;
  // Waits for every rank; timeout_s > 0 replaces train.dist_timeout for this wait (the ranks that
  // wait while rank 0 alone evaluates or writes a checkpoint). A rank that dies still fails it at once.
  virtual void barrier(double timeout_s = 0) = 0;
  // What this rank is doing, for the error another rank prints when this one falls silent.
  virtual void set_step(int64_t step) = 0;
  // The one-line error for a failed collective; exits the process (status 1).
  [[noreturn]] virtual void fail(const std::string& during, const std::string& reason) = 0;
};

// Rendezvous through a c10d TCPStore at MASTER_ADDR:MASTER_PORT (rank 0 hosts it) and a process
// group over it; waits at most timeout_s for every rank to join. backend: the resolved
// train.dist_backend, gloo or nccl (collectives on cuda:LOCAL_RANK, made this process's current
// device). Throws UsageError for a backend this build lacks, RuntimeFailure when it cannot connect.
std::unique_ptr<Comm> connect_ranks(const DistEnv& env, DistBackend backend, double timeout_s);

// Whether this build has c10d's Gloo process group (libgloo-dev's headers were found), and NCCL's
// (a LibTorch 2.x CUDA build with nccl.h, beside Gloo).
bool have_gloo();
bool have_nccl();

// A rendezvous store served by a launcher (`--nproc`), as torchrun's agent does: on a free port of
// 127.0.0.1, alive for the object's life, so the ranks' store outlives any of them.
class StoreHost {
 public:
  virtual ~StoreHost() = default;
  virtual int port() const = 0;
};
std::unique_ptr<StoreHost> host_rendezvous_store(double timeout_s);

// Rank 0's parameter values into every rank (flattened into ~25 MB buffers).
void broadcast_parameters(Comm& comm, const std::vector<torch::Tensor>& params);

// Averages the parameters' gradients over the ranks, overlapped with the backward, as
// DistributedDataParallel's reducer does. The parameters, in reverse order (the order the backward
// produces their gradients), are cut into buckets: the first of at most first_bucket_bytes (so
// communication starts early), the others of at most bucket_bytes (DDP's 1 MB and 25 MB). A hook
// on each parameter's gradient accumulator counts the gradients of the backward after arm(); when
// a bucket's last gradient has been accumulated, the bucket is flattened and its all-reduce started
// while the backward goes on. finish() starts what is left (buckets with a parameter the backward
// did not reach, every bucket when nothing was armed) together with `scalars` (0-dim tensors:
// summed over the ranks), waits, and writes the averages back into the gradients. Gradients the
// backward left undefined stay undefined (the same parameters on every rank).
class GradientReducer {
 public:
  GradientReducer(Comm& comm, std::vector<torch::Tensor> params, int64_t first_bucket_bytes = 1 << 20,
                  int64_t bucket_bytes = 25 << 20);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // The next backward completes this update's gradients (the last micro-batch's).
  void arm();
  void finish(std::vector<torch::Tensor>& scalars);

  // Buckets, and how many of them the last finish() found started during the backward.
  size_t buckets() const { return buckets_.size(); }
  size_t started_in_backward() const { return started_in_backward_; }

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    size_t ready = 0;            // gradients accumulated since arm()
    torch::Tensor flat;          // the buffer in flight
    std::unique_ptr<Comm::Pending> pending;
  };
  void on_gradient(size_t param);
  void start(Bucket& b);

  Comm& comm_;
  std::vector<torch::Tensor> params_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive, as DDP does
  std::vector<uintptr_t> hook_keys_;
  bool armed_ = false;
  size_t started_in_backward_ = 0;
};

}  // namespace normlab
