#include "parallel/comm.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <functional>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "core/errors.h"

namespace normlab {
namespace {

std::optional<int64_t> env_int(const char* name, int64_t min_value) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  int64_t out = 0;
  const char* end = v + std::char_traits<char>::length(v);
  auto [p, ec] = std::from_chars(v, end, out);
  if (ec != std::errc() || p != end || out < min_value) {
    throw UsageError(fmt::format("environment: {}={} is not an integer >= {}", name, v, min_value));
  }
  return out;
}

constexpr int64_t kBucketBytes = 25 << 20;  // as DistributedDataParallel's default bucket_cap_mb

// Consecutive runs of tensors of at most kBucketBytes each (a larger tensor is a bucket alone).
std::vector<std::vector<torch::Tensor>> buckets_of(const std::vector<torch::Tensor>& tensors) {
  std::vector<std::vector<torch::Tensor>> out;
  int64_t bytes = kBucketBytes;
  for (const auto& t : tensors) {
    const int64_t b = t.numel() * static_cast<int64_t>(t.element_size());
    if (out.empty() || bytes + b > kBucketBytes) {
      out.emplace_back();
      bytes = 0;
    }
    out.back().push_back(t);
    bytes += b;
  }
  return out;
}

torch::Tensor flatten(const std::vector<torch::Tensor>& ts) {
  std::vector<torch::Tensor> flat;
  for (const auto& t : ts) flat.push_back(t.reshape({-1}).to(torch::kFloat));
  return torch::cat(flat);
}

void unflatten_into(const torch::Tensor& flat, const std::vector<torch::Tensor>& ts) {
  int64_t at = 0;
  for (const auto& t : ts) {
    t.copy_(flat.narrow(0, at, t.numel()).view_as(t));
    at += t.numel();
  }
}

}  // namespace

DistEnv dist_env_from_environment() {
  DistEnv e;
  const auto world = env_int("WORLD_SIZE", 1);
  if (!world || *world == 1) return e;
  e.world_size = static_cast<int>(*world);
  auto need = [&](const char* name, int64_t min_value) {
    const auto v = env_int(name, min_value);
    if (!v) throw UsageError(fmt::format("environment: WORLD_SIZE={} but {} is not set", e.world_size, name));
    return *v;
  };
  const int64_t rank = need("RANK", 0);
  if (rank >= e.world_size) {
    throw UsageError(fmt::format("environment: RANK={} must be below WORLD_SIZE={}", rank, e.world_size));
  }
  e.rank = static_cast<int>(rank);
  e.local_rank = env_int("LOCAL_RANK", 0).value_or(0);
  e.local_world_size = static_cast<int>(env_int("LOCAL_WORLD_SIZE", 1).value_or(e.world_size));
  const char* addr = std::getenv("MASTER_ADDR");
  if (!addr || !*addr) throw UsageError(fmt::format("environment: WORLD_SIZE={} but MASTER_ADDR is not set", e.world_size));
  e.master_addr = addr;
  const int64_t port = need("MASTER_PORT", 1);
  if (port > 65535) throw UsageError(fmt::format("environment: MASTER_PORT={} is not a TCP port (1..65535)", port));
  e.master_port = static_cast<int>(port);
  return e;
}

int64_t threads_per_rank(int64_t configured, const DistEnv& env, int64_t cores) {
  if (configured > 0) return configured;
  return std::max<int64_t>(1, cores / std::max(1, env.local_world_size));
}

void broadcast_parameters(Comm& comm, const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard ng;
  for (const auto& bucket : buckets_of(params)) {
    std::vector<torch::Tensor> flat{flatten(bucket)};
    comm.broadcast(flat, 0);
    unflatten_into(flat[0], bucket);
  }
}

namespace {
// Calls back after a parameter's gradient accumulator ran (its .grad() holds the new sum).
class AccumulatedHook final : public torch::autograd::FunctionPostHook {
 public:
  explicit AccumulatedHook(std::function<void()> f) : f_(std::move(f)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    f_();
    return outputs;
  }

 private:
  std::function<void()> f_;
};
}  // namespace

GradientReducer::GradientReducer(Comm& comm, std::vector<torch::Tensor> params, int64_t first_bucket_bytes,
                                 int64_t bucket_bytes)
    : comm_(comm), params_(std::move(params)), bucket_of_(params_.size()) {
  int64_t bytes = 0, cap = first_bucket_bytes;
  for (size_t k = params_.size(); k-- > 0;) {
    const int64_t b = params_[k].numel() * static_cast<int64_t>(sizeof(float));  // the flat buffers are float32
    if (buckets_.empty() || bytes + b > cap) {
      if (!buckets_.empty()) cap = bucket_bytes;
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().params.push_back(k);
    bucket_of_[k] = buckets_.size() - 1;
    bytes += b;
  }
  for (size_t k = 0; k < params_.size(); ++k) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[k]);
    hook_keys_.push_back(acc->add_post_hook(std::make_unique<AccumulatedHook>([this, k] { on_gradient(k); })));
    accumulators_.push_back(std::move(acc));
  }
}

GradientReducer::~GradientReducer() {
  for (size_t k = 0; k < accumulators_.size(); ++k) accumulators_[k]->del_post_hook(hook_keys_[k]);
}

void GradientReducer::arm() {
  armed_ = true;
  for (auto& b : buckets_) b.ready = 0;
}

void GradientReducer::on_gradient(size_t param) {
  if (!armed_) return;
  Bucket& b = buckets_[bucket_of_[param]];
  if (++b.ready == b.params.size() && !b.pending) start(b);
}

void GradientReducer::start(Bucket& b) {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> grads;
  for (size_t k : b.params) {
    const auto& g = params_[k].grad();
    if (g.defined()) grads.push_back(g.reshape({-1}).to(torch::kFloat));
  }
  b.flat = grads.empty() ? torch::Tensor() : torch::cat(grads);
  if (b.flat.defined()) b.pending = comm_.start_allreduce_sum({b.flat});
}

void GradientReducer::finish(std::vector<torch::Tensor>& scalars) {
  torch::NoGradGuard ng;
  started_in_backward_ = 0;
  for (auto& b : buckets_) {
    if (b.pending) {
      ++started_in_backward_;
    } else {
      start(b);
    }
  }
  armed_ = false;
  std::vector<torch::Tensor> s;
  for (const auto& x : scalars) s.push_back(x.reshape({1}).to(torch::kFloat));
  torch::Tensor flat_scalars = s.empty() ? torch::Tensor() : torch::cat(s);
  std::unique_ptr<Comm::Pending> scalars_pending;
  if (flat_scalars.defined()) scalars_pending = comm_.start_allreduce_sum({flat_scalars});
  const double inv = 1.0 / comm_.world_size();
  for (auto& b : buckets_) {
    if (!b.pending) continue;
    b.pending->wait();
    b.pending.reset();
    b.flat.mul_(inv);
    int64_t at = 0;
    for (size_t k : b.params) {
      auto g = params_[k].mutable_grad();
      if (!g.defined()) continue;
      g.copy_(b.flat.narrow(0, at, g.numel()).view_as(g));
      at += g.numel();
    }
    b.flat = torch::Tensor();
  }
  if (scalars_pending) {
    scalars_pending->wait();
    for (size_t i = 0; i < scalars.size(); ++i) scalars[i] = flat_scalars[static_cast<int64_t>(i)];
  }
}

}  // namespace normlab
