// The only file that includes c10d's Gloo process group (third_party/c10d.md): gloo types stay
// opaque here (never constructed, subclassed or called directly), so the same code builds against
// Debian's LibTorch 1.13 (ProcessGroupGloo is a ProcessGroup) and the pip wheel's 2.x (a Backend),
// with libgloo-dev's headers in both cases.
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/torch_compat.h"
#include "parallel/comm.h"

#if __has_include(<gloo/config.h>) && defined(USE_C10D_GLOO)
#define NORMLAB_HAVE_GLOO 1
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#else
#define NORMLAB_HAVE_GLOO 0
#endif
// NCCL: LibTorch 2.x CUDA builds define USE_C10D_NCCL for their users; nccl.h comes with the CUDA
// toolkit or the nvidia-nccl wheel. The store and the heartbeat are the Gloo build's, so NCCL
// needs it too.
#if NORMLAB_HAVE_GLOO && defined(USE_C10D_NCCL) && __has_include(<nccl.h>)
#define NORMLAB_HAVE_NCCL 1
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#else
#define NORMLAB_HAVE_NCCL 0
#endif

namespace normlab {

bool have_gloo() { return NORMLAB_HAVE_GLOO; }
bool have_nccl() { return NORMLAB_HAVE_NCCL; }

#if NORMLAB_HAVE_GLOO
namespace {

using std::chrono::milliseconds;

milliseconds to_ms(double seconds) { return milliseconds(static_cast<int64_t>(seconds * 1000.0)); }

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

// torchrun (2.x) hosts the store in its agent and tells the ranks so: then every rank is a client
// and keys live under the attempt's prefix, as torch.distributed does it.
bool agent_hosts_store() {
  const char* v = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  return v && std::string(v) == "True";
}
std::string key_prefix() {
  if (!agent_hosts_store()) return "";
  const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
  return fmt::format("/worker/attempt_{}/", attempt && *attempt ? attempt : "0");
}

std::string heartbeat_key(int rank) { return fmt::format("{}normlab/heartbeat/{}", key_prefix(), rank); }
std::string exiting_key(int rank) { return fmt::format("{}normlab/exiting/{}", key_prefix(), rank); }

c10::intrusive_ptr<c10d::TCPStore> store_client(const DistEnv& env, double timeout_s) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(env.master_port);
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = to_ms(timeout_s);
  return c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

// The process group's base class: c10d::Backend in LibTorch 2.x, c10d::ProcessGroup in 1.13.
#if NORMLAB_TORCH_AT_LEAST(2, 0)
using ProcessGroupBase = c10d::Backend;
#else
using ProcessGroupBase = c10d::ProcessGroup;
#endif

// A rank's process group: Gloo (CPU tensors; CUDA tensors staged through host memory) or NCCL
// (CUDA tensors on this rank's device, cuda:LOCAL_RANK; CPU tensors staged through it), over the
// TCPStore rendezvous, with a heartbeat through the store for the diagnosis of a lost rank.
class C10dComm final : public Comm {
 public:
  C10dComm(const DistEnv& env, DistBackend backend, double timeout_s)
      : env_(env), timeout_s_(timeout_s), nccl_(backend == DistBackend::kNccl) {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(env.master_port);
    // Every rank counts itself in and rank 0's server waits for all of them; under torchrun's
    // agent store the agent does that.
    so.isServer = env.rank == 0 && !agent_hosts_store();
    if (!agent_hosts_store()) so.numWorkers = static_cast<size_t>(env.world_size);
    so.waitWorkers = !agent_hosts_store();
    so.timeout = to_ms(timeout_s);
    try {
      store_ = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
    } catch (const std::exception& e) {
      throw RuntimeFailure(fmt::format(
          "rank {}: cannot join the rendezvous at {}:{} within train.dist_timeout {} s: {}", env.rank,
          env.master_addr, env.master_port, timeout_s, first_line(e.what())));
    }
    c10::intrusive_ptr<c10d::Store> pg_store = store_;
    if (!key_prefix().empty()) pg_store = c10::make_intrusive<c10d::PrefixStore>(key_prefix(), store_);
    if (nccl_) {
      connect_nccl(pg_store);
    } else {
      connect_gloo(pg_store);
    }
    heartbeat_ = std::thread([this] { beat(); });
  }

  ~C10dComm() override {
    {
      std::lock_guard<std::mutex> g(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (heartbeat_.joinable()) heartbeat_.join();
  }

  int rank() const override { return env_.rank; }
  int world_size() const override { return env_.world_size; }
  void set_step(int64_t step) override { step_.store(step); }

  std::unique_ptr<Pending> start_allreduce_sum(std::vector<torch::Tensor> tensors) override {
    return start_all(std::move(tensors), "the gradient all-reduce", [this](std::vector<torch::Tensor>& one) {
      c10d::AllreduceOptions o;
      o.reduceOp = c10d::ReduceOp::SUM;
      return pg_->allreduce(one, o);
    });
  }

  void allreduce_max(std::vector<torch::Tensor>& tensors) override {
    run_all(tensors, "the QK-Clip max exchange", [this](std::vector<torch::Tensor>& one) {
      c10d::AllreduceOptions o;
      o.reduceOp = c10d::ReduceOp::MAX;
      return pg_->allreduce(one, o);
    });
  }

  void broadcast(std::vector<torch::Tensor>& tensors, int root) override {
    run_all(tensors, "the weight broadcast", [this, root](std::vector<torch::Tensor>& one) {
      c10d::BroadcastOptions o;
      o.rootRank = root;
      o.rootTensor = 0;
      return pg_->broadcast(one, o);
    });
  }

  void barrier(double timeout_s) override {
    try {
      c10d::BarrierOptions o;
      if (timeout_s > 0) o.timeout = to_ms(timeout_s);
      if (nccl_) o.device_ids = {env_.local_rank};
      pg_->barrier(o)->wait();
    } catch (const std::exception& e) {
      fail("a barrier", e.what());
    }
  }

  [[noreturn]] void fail(const std::string& during, const std::string& reason) override {
    const std::string lost = diagnose();
    try {  // so that slower survivors do not count this rank among the lost
      store_client(env_, 2.0)->set(exiting_key(env_.rank), bytes(lost));
    } catch (const std::exception&) {
    }
    spdlog::error("error: rank {} of {}: {} during {} at step {}: {}; stopping (the run directory keeps "
                  "its last complete checkpoint)", env_.rank, env_.world_size, lost, during, step_.load(),
                  first_line(reason));
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    // In-flight Gloo work may still wait on the lost peer: leave without destructors.
    std::_Exit(1);
  }

 private:
  static std::string first_line(const std::string& s) {
    auto end = s.find('\n');
    std::string l = s.substr(0, end);
    while (!l.empty() && (l.back() == ' ' || l.back() == '\r')) l.pop_back();
    return l;
  }

  void connect_gloo(const c10::intrusive_ptr<c10d::Store>& pg_store) {
    auto opts = c10d::ProcessGroupGloo::Options::create(to_ms(timeout_s_));
    // As torch.distributed: GLOO_SOCKET_IFNAME picks the interface; a loopback master means one
    // machine; otherwise the address this machine's hostname resolves to.
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    try {
      if (ifname && *ifname) {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      } else if (is_loopback(env_.master_addr)) {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      } else {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      }
      opts->threads = 2;
      pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(pg_store, env_.rank, env_.world_size, opts);
    } catch (const std::exception& e) {
      throw RuntimeFailure(fmt::format("rank {}: cannot connect the Gloo process group of {} ranks "
                                       "within train.dist_timeout {} s: {}", env_.rank, env_.world_size,
                                       timeout_s_, first_line(e.what())));
    }
  }

  void connect_nccl(const c10::intrusive_ptr<c10d::Store>& pg_store) {
#if NORMLAB_HAVE_NCCL
    try {
      // Rank r uses cuda:LOCAL_RANK (src/parallel/README.md), made current before NCCL sees it.
      device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(env_.local_rank));
      c10::cuda::set_device(static_cast<c10::DeviceIndex>(env_.local_rank));
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = to_ms(timeout_s_);
      pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(pg_store, env_.rank, env_.world_size, opts);
    } catch (const std::exception& e) {
      throw RuntimeFailure(fmt::format("rank {}: cannot set up the NCCL process group of {} ranks on cuda:{}: {}",
                                       env_.rank, env_.world_size, env_.local_rank, first_line(e.what())));
    }
#else
    (void)pg_store;
#endif
  }

  // Collectives issued and not yet awaited: the host tensors they work on (CUDA tensors go through
  // host copies) and the tensors the results go back into.
  class PendingWork final : public Pending {
   public:
    PendingWork(C10dComm& comm, const char* what) : comm_(comm), what_(what) {}
    void wait() override {
      try {
        for (auto& w : works_) w->wait();
      } catch (const std::exception& e) {
        comm_.fail(what_, e.what());
      }
      for (size_t i = 0; i < tensors_.size(); ++i) {
        if (!host_[i][0].is_same(tensors_[i])) tensors_[i].copy_(host_[i][0]);
      }
    }
    C10dComm& comm_;
    const char* what_;
    std::vector<torch::Tensor> tensors_;
    std::vector<std::vector<torch::Tensor>> host_;
    // c10d::Work in LibTorch 2.x, c10d::ProcessGroup::Work in 1.13.
    std::vector<decltype(std::declval<c10d::ProcessGroup&>().barrier())> works_;
  };

  // Each tensor is reduced as its own collective, all issued before any is awaited.
  template <class Op>
  std::unique_ptr<Pending> start_all(std::vector<torch::Tensor> tensors, const char* what, Op op) {
    auto p = std::make_unique<PendingWork>(*this, what);
    p->tensors_ = std::move(tensors);
    for (const auto& t : p->tensors_) {
      if (nccl_) {
        p->host_.push_back({t.device() == device_ ? t.contiguous() : t.to(device_)});
      } else {
        p->host_.push_back({t.is_cuda() ? t.to(torch::kCPU) : t.contiguous()});
      }
    }
    try {
      for (auto& h : p->host_) p->works_.push_back(op(h));
    } catch (const std::exception& e) {
      fail(what, e.what());
    }
    return p;
  }

  template <class Op>
  void run_all(std::vector<torch::Tensor>& tensors, const char* what, Op op) {
    start_all(tensors, what, op)->wait();
  }

  // Every second: "<beat> <step>" under this rank's key, through a store connection of its own.
  void beat() {
    c10::intrusive_ptr<c10d::TCPStore> s;
    int64_t n = 0;
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      lock.unlock();
      try {
        if (!s) s = store_client(env_, 5.0);
        s->set(heartbeat_key(env_.rank), bytes(fmt::format("{} {}", ++n, step_.load())));
      } catch (const std::exception&) {
        s.reset();  // the store may be gone with rank 0; fail() says so
      }
      lock.lock();
      cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; });
    }
  }

  // Which rank stopped: one whose heartbeat does not move over 3 s, else the one furthest behind.
  std::string diagnose() {
    auto read_all = [&](c10d::TCPStore& s) {
      std::vector<std::string> v(env_.world_size);
      for (int r = 0; r < env_.world_size; ++r) {
        if (r != env_.rank && s.check({heartbeat_key(r)})) v[r] = text(s.get(heartbeat_key(r)));
      }
      return v;
    };
    try {
      auto s = store_client(env_, 3.0);
      const auto before = read_all(*s);
      std::this_thread::sleep_for(std::chrono::milliseconds(3500));
      const auto after = read_all(*s);
      std::vector<int> silent;
      int64_t behind_step = step_.load();
      int behind = -1;
      for (int r = 0; r < env_.world_size; ++r) {
        if (r == env_.rank || s->check({exiting_key(r)})) continue;  // a survivor that gave up
        if (after[r].empty() || before[r] == after[r]) silent.push_back(r);
        const auto sp = after[r].find(' ');
        if (sp != std::string::npos) {
          const int64_t st = std::atoll(after[r].c_str() + sp + 1);
          if (st < behind_step) {
            behind_step = st;
            behind = r;
          }
        }
      }
      if (!silent.empty()) {
        std::string names;
        for (int r : silent) names += (names.empty() ? "rank " : ", rank ") + std::to_string(r);
        return fmt::format("lost {} (its process stopped)", names);
      }
      if (behind >= 0) return fmt::format("rank {} stopped responding (alive, at step {})", behind, behind_step);
      return "another rank stopped responding";
    } catch (const std::exception&) {
      if (agent_hosts_store()) return "the launcher's rendezvous store is gone";
      return fmt::format("lost rank 0 (its rendezvous store at {}:{} is gone)", env_.master_addr, env_.master_port);
    }
  }

  DistEnv env_;
  double timeout_s_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
  c10::intrusive_ptr<ProcessGroupBase> pg_;
  bool nccl_ = false;
  torch::Device device_{torch::kCPU};  // NCCL: this rank's GPU
  std::atomic<int64_t> step_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread heartbeat_;
};

class TcpStoreHost final : public StoreHost {
 public:
  explicit TcpStoreHost(double timeout_s) {
    c10d::TCPStoreOptions o;
    o.port = 0;  // the kernel picks a free one, bound from now on: no race with other listeners
    o.isServer = true;
    o.waitWorkers = false;
    o.timeout = to_ms(timeout_s);
    store_ = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
  }
  int port() const override { return store_->getPort(); }

 private:
  c10::intrusive_ptr<c10d::TCPStore> store_;
};

}  // namespace

std::unique_ptr<StoreHost> host_rendezvous_store(double timeout_s) {
  try {
    return std::make_unique<TcpStoreHost>(timeout_s);
  } catch (const std::exception& e) {
    throw RuntimeFailure(fmt::format("--nproc: cannot start the rendezvous store on 127.0.0.1: {}", e.what()));
  }
}

std::unique_ptr<Comm> connect_ranks(const DistEnv& env, DistBackend backend, double timeout_s) {
  if (backend == DistBackend::kNccl && !NORMLAB_HAVE_NCCL) {
    throw UsageError("train.dist_backend: nccl is not available in this build (it needs a LibTorch 2.x CUDA "
                     "build and nccl.h); use gloo");
  }
  if (backend == DistBackend::kAuto) {
    throw UsageError("train.dist_backend: auto is not a process group; resolve it to gloo or nccl first");
  }
  return std::make_unique<C10dComm>(env, backend, timeout_s);
}

#else

std::unique_ptr<StoreHost> host_rendezvous_store(double) {
  throw UsageError("--nproc: this normlab was built without c10d's Gloo (install libgloo-dev and rebuild)");
}

std::unique_ptr<Comm> connect_ranks(const DistEnv& env, DistBackend backend, double timeout_s) {
  throw UsageError(fmt::format(
      "rank {}: WORLD_SIZE={} needs c10d's Gloo process group, but this normlab was built without "
      "gloo's headers (install libgloo-dev and rebuild)", env.rank, env.world_size));
}

#endif

}  // namespace normlab
