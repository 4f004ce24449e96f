// The stream methods' shared operations (residual.h): mixing n streams with per-position weights,
// adding a scaled sublayer output to n streams, the projection of the rms-normalised streams,
// Sinkhorn. The one dispatch point of each: the fused CPU loops of
// stream_kernels.h behind autograd functions where they apply, else the composed LibTorch ops of
// namespace `composed`, which are the reference the tests hold the loops to.
#include <atomic>
#include <cstdlib>
#include <string>

#include "model/residual/residual.h"
#include "model/residual/stream_kernels.h"

namespace normlab {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {
constexpr double kSinkhornEps = 1e-6;  // mHC's own eps (mhc.cpp)

std::atomic<bool> g_fused{true};

bool env_off() {
  static const bool off = [] {
    const char* v = std::getenv("NORMLAB_COMPOSED_STREAMS");
    return v && *v && std::string(v) != "0";
  }();
  return off;
}

bool cpu_real(const torch::Tensor& t) {
  return t.defined() && t.device().is_cpu() && (t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kDouble);
}

// Streams the loops can read: CPU float/double, one dtype and shape, at least one dimension.
bool streams_apply(const Streams& X) {
  if (!fused_stream_kernels() || X.empty() || !cpu_real(X[0]) || X[0].dim() < 1) return false;
  for (const auto& x : X) {
    if (!x.defined() || x.device() != X[0].device() || x.scalar_type() != X[0].scalar_type() || x.sizes() != X[0].sizes())
      return false;
  }
  return true;
}

// A weight tensor of the streams' dtype, either `tail` (shared) or the streams' leading dimensions
// followed by `tail` (per position). -1: not applicable; 0: per position; 1: shared.
int weight_form(const torch::Tensor& w, const torch::Tensor& x, std::vector<int64_t> tail) {
  if (!w.defined() || w.device() != x.device() || w.scalar_type() != x.scalar_type()) return -1;
  if (w.sizes().vec() == tail) return 1;
  auto lead = x.sizes().vec();
  lead.pop_back();
  lead.insert(lead.end(), tail.begin(), tail.end());
  return w.sizes().vec() == lead ? 0 : -1;
}

template <class T>
std::vector<const T*> cptrs(const variable_list& v) {
  std::vector<const T*> out;
  for (const auto& t : v) out.push_back(t.defined() ? t.template data_ptr<T>() : nullptr);
  return out;
}
template <class T>
std::vector<T*> ptrs(const variable_list& v) {
  std::vector<T*> out;
  for (const auto& t : v) out.push_back(t.defined() ? t.template data_ptr<T>() : nullptr);
  return out;
}

variable_list contiguous(const variable_list& v) {
  variable_list out;
  for (const auto& t : v) out.push_back(t.defined() ? t.contiguous() : t);
  return out;
}

// A per-position gradient (P, ...) summed over the positions when the weight was shared.
torch::Tensor weight_grad(const torch::Tensor& per_position, const torch::Tensor& w, bool shared) {
  return shared ? per_position.sum(0) : per_position.view(w.sizes());
}

// Y = mix(W, X): inputs W then X_0 .. X_{n-1}; outputs Y_0 .. Y_{m-1}.
struct MixFunction : public torch::autograd::Function<MixFunction> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& W, at::TensorList streams) {
    ctx->set_materialize_grads(false);
    auto w = W.contiguous();
    const variable_list X = contiguous(streams.vec());
    const int64_t n = static_cast<int64_t>(X.size()), m = w.size(-1), d = X[0].size(-1);
    const bool shared = w.dim() == 2;
    const stream_kernels::Mix s{X[0].numel() / std::max<int64_t>(d, 1), d, n, m, shared};
    variable_list Y;
    for (int64_t c = 0; c < m; ++c) Y.push_back(torch::empty_like(X[0]));
    AT_DISPATCH_FLOATING_TYPES(w.scalar_type(), "mix_streams", [&] {
      stream_kernels::mix_forward<scalar_t>(s, cptrs<scalar_t>(X).data(), w.data_ptr<scalar_t>(), ptrs<scalar_t>(Y).data());
    });
    // The inputs themselves (not contiguous copies): a create_graph backward differentiates
    // through them.
    variable_list saved{W};
    saved.insert(saved.end(), streams.begin(), streams.end());
    ctx->save_for_backward(saved);
    return Y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list dY) {
    const auto saved = ctx->get_saved_variables();
    const auto& W = saved[0];
    variable_list X(saved.begin() + 1, saved.end());
    const int64_t n = static_cast<int64_t>(X.size()), m = W.size(-1), d = X[0].size(-1);
    const bool shared = W.dim() == 2;
    variable_list out(1 + n);
    if (torch::GradMode::is_enabled()) {  // create_graph: the same formulas in differentiable ops
      for (auto& g : dY)
        if (!g.defined()) g = torch::zeros_like(X[0]);
      if (ctx->needs_input_grad(0)) {
        std::vector<torch::Tensor> rows;
        for (int64_t j = 0; j < n; ++j) {
          std::vector<torch::Tensor> cols;
          for (int64_t c = 0; c < m; ++c) cols.push_back((X[j] * dY[c]).sum(-1));
          rows.push_back(torch::stack(cols, -1));
        }
        auto g = torch::stack(rows, -2);
        out[0] = shared ? g.reshape({-1, n, m}).sum(0) : g;
      }
      auto dX = composed::mix_streams(W.transpose(-2, -1), dY);
      for (int64_t j = 0; j < n; ++j)
        if (ctx->needs_input_grad(1 + j)) out[1 + j] = dX[j];
      return out;
    }
    dY = contiguous(dY);
    X = contiguous(X);
    const auto Wc = W.contiguous();
    const stream_kernels::Mix s{X[0].numel() / std::max<int64_t>(d, 1), d, n, m, shared};
    variable_list dX(n);
    bool any_x = false;
    for (int64_t j = 0; j < n; ++j) {
      if (ctx->needs_input_grad(1 + j)) {
        dX[j] = torch::empty_like(X[0]);
        any_x = true;
      }
    }
    torch::Tensor dW;
    if (ctx->needs_input_grad(0)) dW = torch::empty({s.P, n, m}, W.options());
    AT_DISPATCH_FLOATING_TYPES(W.scalar_type(), "mix_streams_backward", [&] {
      auto dx = ptrs<scalar_t>(dX);
      stream_kernels::mix_backward<scalar_t>(s, cptrs<scalar_t>(X).data(), Wc.data_ptr<scalar_t>(), cptrs<scalar_t>(dY).data(),
                                             any_x ? dx.data() : nullptr, dW.defined() ? dW.data_ptr<scalar_t>() : nullptr);
    });
    if (dW.defined()) out[0] = weight_grad(dW, W, shared);
    for (int64_t j = 0; j < n; ++j) out[1 + j] = dX[j];
    return out;
  }
};

// Out_k = R_k + b_k y: inputs b, y, then R_0 .. R_{n-1}; outputs Out_0 .. Out_{n-1}.
struct AddScaledFunction : public torch::autograd::Function<AddScaledFunction> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& b, const torch::Tensor& y, at::TensorList streams) {
    ctx->set_materialize_grads(false);
    auto bc = b.contiguous(), yc = y.contiguous();
    const variable_list R = contiguous(streams.vec());
    const int64_t n = static_cast<int64_t>(R.size()), d = R[0].size(-1);
    const stream_kernels::Scaled s{R[0].numel() / std::max<int64_t>(d, 1), d, n, bc.dim() == 1};
    variable_list out;
    for (int64_t k = 0; k < n; ++k) out.push_back(torch::empty_like(R[0]));
    AT_DISPATCH_FLOATING_TYPES(yc.scalar_type(), "add_scaled", [&] {
      stream_kernels::add_scaled_forward<scalar_t>(s, cptrs<scalar_t>(R).data(), bc.data_ptr<scalar_t>(),
                                                   yc.data_ptr<scalar_t>(), ptrs<scalar_t>(out).data());
    });
    ctx->save_for_backward({b, y});
    ctx->saved_data["n"] = n;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list dOut) {
    const auto saved = ctx->get_saved_variables();
    const auto &b_in = saved[0], &y_in = saved[1];
    const int64_t n = ctx->saved_data["n"].toInt(), d = y_in.size(-1);
    const bool grad_mode = torch::GradMode::is_enabled();
    const auto b = grad_mode ? b_in : b_in.contiguous(), y = grad_mode ? y_in : y_in.contiguous();
    const bool shared = b.dim() == 1;
    variable_list out(2 + n);
    for (int64_t k = 0; k < n; ++k)
      if (ctx->needs_input_grad(2 + k)) out[2 + k] = dOut[k];
    if (grad_mode) {  // create_graph: the same formulas in differentiable ops
      torch::Tensor dy;
      std::vector<torch::Tensor> db;
      for (int64_t k = 0; k < n; ++k) {
        auto g = dOut[k].defined() ? dOut[k] : torch::zeros_like(y);
        auto bk = shared ? b[k] : b.select(-1, k).unsqueeze(-1);
        dy = dy.defined() ? dy + g * bk : g * bk;
        db.push_back((y * g).sum(-1));
      }
      auto g = torch::stack(db, -1);
      if (ctx->needs_input_grad(0)) out[0] = shared ? g.reshape({-1, n}).sum(0) : g;
      if (ctx->needs_input_grad(1)) out[1] = dy;
      return out;
    }
    dOut = contiguous(dOut);
    const stream_kernels::Scaled s{y.numel() / std::max<int64_t>(d, 1), d, n, shared};
    torch::Tensor dy, db;
    if (ctx->needs_input_grad(1)) dy = torch::empty_like(y);
    if (ctx->needs_input_grad(0)) db = torch::empty({s.P, n}, b.options());
    AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "add_scaled_backward", [&] {
      stream_kernels::add_scaled_backward<scalar_t>(s, b.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                                                    cptrs<scalar_t>(dOut).data(), dy.defined() ? dy.data_ptr<scalar_t>() : nullptr,
                                                    db.defined() ? db.data_ptr<scalar_t>() : nullptr);
    });
    if (db.defined()) out[0] = weight_grad(db, b, shared);
    out[1] = dy;
    return out;
  }
};

struct SinkhornFunction : public torch::autograd::Function<SinkhornFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, int64_t iters) {
    auto l = logits.contiguous();
    const int64_t n = l.size(-1);
    auto C = torch::empty_like(l);
    AT_DISPATCH_FLOATING_TYPES(l.scalar_type(), "sinkhorn", [&] {
      stream_kernels::sinkhorn_forward<scalar_t>(l.numel() / (n * n), n, iters, kSinkhornEps, l.data_ptr<scalar_t>(),
                                                 C.data_ptr<scalar_t>());
    });
    ctx->save_for_backward({logits});
    ctx->saved_data["iters"] = iters;
    return C;
  }

  static variable_list backward(AutogradContext* ctx, variable_list dC) {
    const auto l = ctx->get_saved_variables()[0];
    const int64_t iters = ctx->saved_data["iters"].toInt(), n = l.size(-1);
    if (torch::GradMode::is_enabled()) {  // create_graph: differentiate the composed iterations
      auto g = torch::autograd::grad({composed::sinkhorn(l, iters)}, {l}, {dC[0]}, true, true)[0];
      return {g, torch::Tensor()};
    }
    const auto lc = l.contiguous();
    auto g = dC[0].contiguous();
    auto dl = torch::empty_like(lc);
    AT_DISPATCH_FLOATING_TYPES(l.scalar_type(), "sinkhorn_backward", [&] {
      stream_kernels::sinkhorn_backward<scalar_t>(l.numel() / (n * n), n, iters, kSinkhornEps, lc.data_ptr<scalar_t>(),
                                                  g.data_ptr<scalar_t>(), dl.data_ptr<scalar_t>());
    });
    return {dl, torch::Tensor()};
  }
};

// z = rms_project(X, F, eps): inputs F, eps, then X_0 .. X_{n-1}.
struct RmsProjectFunction : public torch::autograd::Function<RmsProjectFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& F, double eps, at::TensorList streams) {
    const auto Fc = F.contiguous();
    const variable_list X = contiguous(streams.vec());
    const int64_t n = static_cast<int64_t>(X.size()), d = X[0].size(-1), k = Fc.size(0);
    const int64_t P = X[0].numel() / std::max<int64_t>(d, 1);
    auto sizes = X[0].sizes().vec();
    sizes.back() = k;
    auto z = torch::empty(sizes, X[0].options());
    auto r = torch::empty({P}, X[0].options());
    AT_DISPATCH_FLOATING_TYPES(Fc.scalar_type(), "rms_project", [&] {
      stream_kernels::rms_project_forward<scalar_t>(P, d, n, k, cptrs<scalar_t>(X).data(), Fc.data_ptr<scalar_t>(), eps,
                                                    z.data_ptr<scalar_t>(), r.data_ptr<scalar_t>());
    });
    variable_list saved{F, z, r};
    saved.insert(saved.end(), streams.begin(), streams.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["eps"] = eps;
    return z;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &F = saved[0], &z = saved[1], &r = saved[2];
    variable_list X(saved.begin() + 3, saved.end());
    const int64_t n = static_cast<int64_t>(X.size()), d = X[0].size(-1), k = F.size(0);
    const double eps = ctx->saved_data["eps"].toDouble(), N = static_cast<double>(n * d);
    // Gradients: F, eps (none), then the streams; needs_input_grad counts tensor inputs only (F is
    // 0, stream j is 1 + j).
    variable_list out(2 + n);
    if (!grads[0].defined()) return out;
    if (torch::GradMode::is_enabled()) {  // create_graph: the same formulas in differentiable ops
      torch::Tensor ss, a;
      for (int64_t j = 0; j < n; ++j) {
        auto part = torch::matmul(X[j], F.narrow(1, j * d, d).t());
        auto sq = X[j].pow(2).sum(-1, true);
        a = a.defined() ? a + part : part;
        ss = ss.defined() ? ss + sq : sq;
      }
      auto rr = torch::rsqrt(ss / N + eps);
      auto dz = grads[0];
      auto s = (dz * a * rr).sum(-1, true);
      std::vector<torch::Tensor> dF;
      for (int64_t j = 0; j < n; ++j) {
        if (ctx->needs_input_grad(1 + j))
          out[2 + j] = rr * torch::matmul(dz, F.narrow(1, j * d, d)) - s * rr * rr / N * X[j];
        dF.push_back(torch::matmul((dz * rr).reshape({-1, k}).t(), X[j].reshape({-1, d})));
      }
      if (ctx->needs_input_grad(0)) out[0] = torch::cat(dF, 1);
      return out;
    }
    X = contiguous(X);
    const auto Fc = F.contiguous();
    const auto dz = grads[0].contiguous();
    const int64_t P = X[0].numel() / std::max<int64_t>(d, 1);
    variable_list dX(n);
    bool any_x = false;
    for (int64_t j = 0; j < n; ++j) {
      if (ctx->needs_input_grad(1 + j)) {
        dX[j] = torch::empty_like(X[0]);
        any_x = true;
      }
    }
    torch::Tensor dF;
    if (ctx->needs_input_grad(0)) dF = torch::empty_like(Fc);
    AT_DISPATCH_FLOATING_TYPES(Fc.scalar_type(), "rms_project_backward", [&] {
      auto dx = ptrs<scalar_t>(dX);
      stream_kernels::rms_project_backward<scalar_t>(P, d, n, k, cptrs<scalar_t>(X).data(), Fc.data_ptr<scalar_t>(),
                                                     z.data_ptr<scalar_t>(), r.data_ptr<scalar_t>(), dz.data_ptr<scalar_t>(),
                                                     any_x ? dx.data() : nullptr,
                                                     dF.defined() ? dF.data_ptr<scalar_t>() : nullptr);
    });
    out[0] = dF;
    for (int64_t j = 0; j < n; ++j) out[2 + j] = dX[j];
    return out;
  }
};

// w[..., k] of a per-position (B, T, k) or shared (k) weight, shaped to multiply a (B, T, d) stream.
std::vector<torch::Tensor> factors(const torch::Tensor& w) {
  auto parts = w.unbind(-1);  // unbind's backward is one stack, not a zero-filled tensor per part
  if (w.dim() > 1) {
    for (auto& p : parts) p = p.unsqueeze(-1);
  }
  return parts;
}
}  // namespace

bool fused_stream_kernels() { return g_fused.load() && !env_off(); }
void set_fused_stream_kernels(bool on) { g_fused.store(on); }

namespace composed {

Streams mix_streams(const torch::Tensor& W, const Streams& X) {
  const size_t n = X.size();
  std::vector<std::vector<torch::Tensor>> w;  // w[j][c]
  for (const auto& row : W.unbind(-2)) w.push_back(factors(row));
  const size_t m = w.at(0).size();
  Streams Y(m);
  for (size_t c = 0; c < m; ++c) {
    Y[c] = X[0] * w[0][c];
    for (size_t j = 1; j < n; ++j) Y[c] = Y[c].addcmul(X[j], w[j][c]);
  }
  return Y;
}

torch::Tensor weighted_sum(const torch::Tensor& w, const Streams& X) {
  const auto f = factors(w);
  auto y = X[0] * f[0];
  for (size_t j = 1; j < X.size(); ++j) y = y.addcmul(X[j], f[j]);
  return y;
}

Streams add_scaled(const Streams& R, const torch::Tensor& b, const torch::Tensor& y) {
  const auto f = factors(b);
  Streams out(R.size());
  for (size_t k = 0; k < R.size(); ++k) out[k] = R[k].addcmul(y, f[k]);
  return out;
}

torch::Tensor rms_project(const Streams& X, const torch::Tensor& F, double eps) {
  const int64_t n = static_cast<int64_t>(X.size()), d = X[0].size(-1);
  torch::Tensor z, ss;
  for (int64_t j = 0; j < n; ++j) {
    auto part = torch::matmul(X[j], F.narrow(1, j * d, d).t());
    auto sq = X[j].pow(2).sum(-1, /*keepdim=*/true);
    z = z.defined() ? z + part : part;
    ss = ss.defined() ? ss + sq : sq;
  }
  return z * torch::rsqrt(ss / static_cast<double>(n * d) + eps);
}

torch::Tensor sinkhorn(const torch::Tensor& logits, int64_t iters) {
  auto C = torch::softmax(logits, -1) + kSinkhornEps;
  C = C / (C.sum(-2, true) + kSinkhornEps);
  for (int64_t t = 1; t < iters; ++t) {
    C = C / (C.sum(-1, true) + kSinkhornEps);
    C = C / (C.sum(-2, true) + kSinkhornEps);
  }
  return C;
}

}  // namespace composed

Streams mix_streams(const torch::Tensor& W, const Streams& X) {
  if (streams_apply(X) && W.dim() >= 2 && W.size(-2) == static_cast<int64_t>(X.size()) &&
      weight_form(W, X[0], {W.size(-2), W.size(-1)}) >= 0)
    return MixFunction::apply(W, at::TensorList(X));
  return composed::mix_streams(W, X);
}

torch::Tensor weighted_sum(const torch::Tensor& w, const Streams& X) {
  if (streams_apply(X) && w.dim() >= 1 && w.size(-1) == static_cast<int64_t>(X.size()) &&
      weight_form(w, X[0], {w.size(-1)}) >= 0)
    return MixFunction::apply(w.unsqueeze(-1), at::TensorList(X))[0];
  return composed::weighted_sum(w, X);
}

Streams add_scaled(const Streams& R, const torch::Tensor& b, const torch::Tensor& y) {
  if (streams_apply(R) && y.defined() && y.device() == R[0].device() && y.sizes() == R[0].sizes() &&
      c10::promoteTypes(y.scalar_type(), R[0].scalar_type()) == R[0].scalar_type() && b.dim() >= 1 &&
      b.size(-1) == static_cast<int64_t>(R.size()) && weight_form(b, R[0], {b.size(-1)}) >= 0) {
    // A lower-precision y (a bf16 sublayer output under autocast) is widened first, as the composed
    // addcmul's type promotion does; its gradient is cast back by autograd.
    return AddScaledFunction::apply(b, y.to(R[0].scalar_type()), at::TensorList(R));
  }
  return composed::add_scaled(R, b, y);
}

torch::Tensor sinkhorn(const torch::Tensor& logits, int64_t iters) {
  if (fused_stream_kernels() && cpu_real(logits) && logits.dim() >= 2 && logits.size(-1) == logits.size(-2) &&
      logits.size(-1) > 0 && iters >= 1)
    return SinkhornFunction::apply(logits, iters);
  return composed::sinkhorn(logits, iters);
}

torch::Tensor rms_project(const Streams& X, const torch::Tensor& F, double eps) {
  if (streams_apply(X) && F.dim() == 2 && F.device() == X[0].device() && F.scalar_type() == X[0].scalar_type() &&
      F.size(1) == static_cast<int64_t>(X.size()) * X[0].size(-1) && F.size(0) > 0)
    return RmsProjectFunction::apply(F, eps, at::TensorList(X));
  return composed::rms_project(X, F, eps);
}

torch::Tensor concat_streams(const Streams& X) { return torch::cat(X, -1); }

}  // namespace normlab
