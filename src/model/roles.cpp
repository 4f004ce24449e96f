#include "model/roles.h"

#include <mutex>
#include <unordered_map>

namespace normlab {

namespace {
struct Entry {
  c10::weak_intrusive_ptr<c10::TensorImpl> alive;  // tells a freed tensor from a new one at its address
  Role role;
};
std::mutex& table_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<const c10::TensorImpl*, Entry>& table() {
  static std::unordered_map<const c10::TensorImpl*, Entry> t;
  return t;
}
// Drops the entries of freed tensors once the table has grown (models are built many times in
// one process by the tests and the sweeps' config checks).
void sweep_dead_locked() {
  auto& t = table();
  for (auto it = t.begin(); it != t.end();) {
    it = it->second.alive.expired() ? t.erase(it) : std::next(it);
  }
}
}  // namespace

const torch::Tensor& with_role(const torch::Tensor& p, Role role) {
  TORCH_CHECK(p.defined(), "with_role: undefined tensor");
  std::lock_guard<std::mutex> lock(table_mutex());
  auto& t = table();
  static size_t sweep_at = 4096;
  if (t.size() >= sweep_at) {
    sweep_dead_locked();
    sweep_at = std::max<size_t>(4096, 2 * t.size());
  }
  c10::intrusive_ptr<c10::TensorImpl> strong = p.getIntrusivePtr();
  t.insert_or_assign(p.unsafeGetTensorImpl(), Entry{c10::weak_intrusive_ptr<c10::TensorImpl>(strong), role});
  return p;
}

void declare_roles(const torch::nn::Module& m, Role role) {
  for (const auto& p : m.parameters(/*recurse=*/true)) with_role(p, role);
}

void declare_linear(const torch::nn::Linear& l, Role weight_role) {
  with_role(l->weight, weight_role);
  if (l->bias.defined()) with_role(l->bias, Role::kBias);
}

torch::nn::Linear make_linear(int64_t in, int64_t out, bool bias, Role weight_role) {
  torch::nn::Linear l(torch::nn::LinearOptions(in, out).bias(bias));
  declare_linear(l, weight_role);
  return l;
}

std::optional<Role> role_of(const torch::Tensor& p) {
  if (!p.defined()) return std::nullopt;
  std::lock_guard<std::mutex> lock(table_mutex());
  auto& t = table();
  auto it = t.find(p.unsafeGetTensorImpl());
  if (it == t.end()) return std::nullopt;
  if (it->second.alive.expired()) {
    t.erase(it);
    return std::nullopt;
  }
  return it->second.role;
}

}  // namespace normlab
