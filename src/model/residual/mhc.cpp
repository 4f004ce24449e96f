// mHC, manifold-constrained hyper-connections (DeepSeek; the form of DeepSeek-V4's released
// hc_pre / hc_post / hc_head). n streams as in HC; per sublayer and position, from the n*d stream
// values xf (stream-major) and z = fn xf / sqrt(mean(xf^2) + eps):
//   pre_j = sigmoid(a0 z_j + b_j) + eps,  post_j = 2 sigmoid(a1 z_{n+j} + b_{n+j}),
//   C = Sinkhorn(softmax_rows(a2 z_{2n..} + b_{2n..}) + eps): columns, then T-1 x (rows, columns),
//   u = sum_j pre_j X_j;  y = G_s(u);  X'_j = post_j y + sum_i C[i, j] X_i.
// The head mixes x = sum_j w_j X_j with w_j = sigmoid(scale (fn xf)_j / rms(xf) + base_j) + eps.
// C is positive and (near) doubly stochastic: the composite mixing stays bounded with depth.
#include <cmath>

#include <fmt/format.h>

#include "core/torch_compat.h"
#include "model/residual/n_streams.h"
#include "model/residual/residual.h"
#include "model/roles.h"
#include "model/transformer.h"

namespace normlab {

KeySpec streams_key();  // hc.cpp: hc and mhc share model.residual.streams

namespace {
constexpr double kEps = 1e-6;  // the method's own eps, not model.norm.eps

// z = fn xf / sqrt(mean(xf^2) + eps): the streams -> (B, T, rows of fn), xf never built.
torch::Tensor projected(const Streams& X, const torch::Tensor& fn) { return rms_project(X, fn.to(X[0].scalar_type()), kEps); }

class MhcImpl : public torch::nn::Module {
 public:
  MhcImpl(int64_t n, int64_t d, int64_t iters) : n_(n), iters_(iters) {
    fn = register_parameter("fn", torch::empty({n * n + 2 * n, n * d}));
    scale = register_parameter("scale", torch::full({3}, 0.01));
    base = register_parameter("base", torch::zeros({n * n + 2 * n}));
    declare_roles(*this, Role::kMixing);
  }

  struct Weights {
    torch::Tensor pre, post, C;  // (B, T, n), (B, T, n), (B, T, n, n)
  };
  Weights weights(const Streams& X) {
    NoAutocastGuard fp32;
    const int64_t n = n_;
    auto z = projected(X, fn);
    auto a = scale.to(z.scalar_type()), b = base.to(z.scalar_type());
    auto part = [&](int64_t at, int64_t len, int64_t ai) { return a[ai] * z.narrow(-1, at, len) + b.narrow(0, at, len); };
    Weights w;
    w.pre = torch::sigmoid(part(0, n, 0)) + kEps;
    w.post = 2.0 * torch::sigmoid(part(n, n, 1));
    auto logits = part(2 * n, n * n, 2).unflatten(-1, {n, n});  // row i: logits[..., i, :]
    w.C = sinkhorn(logits, iters_);
    return w;
  }

  torch::Tensor fn, scale, base;

 private:
  int64_t n_, iters_;
};
TORCH_MODULE(Mhc);

class MhcHeadImpl : public torch::nn::Module {
 public:
  MhcHeadImpl(int64_t n, int64_t d) {
    fn = register_parameter("fn", torch::empty({n, n * d}));
    scale = register_parameter("scale", torch::full({1}, 0.01));
    base = register_parameter("base", torch::zeros({n}));
    declare_roles(*this, Role::kMixing);
  }
  torch::Tensor weights(const Streams& X) {  // (B, T, n)
    NoAutocastGuard fp32;
    auto z = projected(X, fn);
    return torch::sigmoid(scale.to(z.scalar_type()) * z + base.to(z.scalar_type())) + kEps;
  }
  torch::Tensor fn, scale, base;
};
TORCH_MODULE(MhcHead);

class MhcStream : public NStreamCarrier {
 public:
  MhcStream(std::vector<Mhc> subs, MhcHead head, int64_t n)
      : NStreamCarrier(n), subs_(std::move(subs)), head_(std::move(head)) {}

  void sublayer(int64_t s, const SublayerTerm& G) override {
    auto w = subs_[s]->weights(X_);
    // Column 0 reads the sublayer input u = sum_j pre_j X_j, columns 1..n the mixed streams
    // sum_i C[i, j] X_i; X'_j = mixed_j + post_j y (the mixing matrix for P: M[j, i] = C[i, j]).
    step(torch::cat({w.pre.unsqueeze(-1), w.C}, -1), w.post, G);
  }
  torch::Tensor finish() override {
    auto x = weighted_sum(head_->weights(X_), X_);
    X_.clear();
    return x;
  }

 private:
  std::vector<Mhc> subs_;
  MhcHead head_;
};
}  // namespace

// The most Sinkhorn iterations a config may ask for.
constexpr int64_t kMaxSinkhornIters = 1000;

ResidualType mhc_residual() {
  ResidualType t;
  t.name = "mhc";
  t.equation = "u = sum pre_j X_j; y = G(u); X'_j = post_j y + sum_i C[i,j] X_i, C Sinkhorn-normalised";
  t.keys = {streams_key(),
            {"sinkhorn_iters", KeyKind::kInteger, int64_t{20}, "Sinkhorn iterations T of the mixing matrix", {},
             [](const KeyValue& v, const ModelConfig&) {
               const int64_t n = std::get<int64_t>(v);
               return n >= 1 && n <= kMaxSinkhornIters
                          ? std::string()
                          : fmt::format("must be in [1, {}] (the paper uses 20; each one is a pass over every "
                                        "position's mixing matrix)", kMaxSinkhornIters);
             }}};
  t.make_terms = [](TransformerImpl& model, const ModelConfig& m) -> std::unique_ptr<TermStream> {
    const int64_t n = m.residual.keys.integer("residual.streams");
    const int64_t iters = m.residual.keys.integer("residual.sinkhorn_iters");
    // Role mixing: scale and base keep their constructor values through init; fn is drawn.
    std::vector<Mhc> subs;
    register_per_sublayer(model, "mhc", [&](int64_t, int) {
      subs.emplace_back(n, m.d_model, iters);
      model.draw_after_the_others(subs.back()->fn);
      return subs.back().ptr();
    });
    MhcHead head(n, m.d_model);
    model.register_module("mhc_head", head.ptr());
    model.draw_after_the_others(head->fn);
    return std::make_unique<MhcStream>(std::move(subs), head, n);
  };
  t.cost = [](const ModelConfig& m) {
    const double n = static_cast<double>(m.residual.keys.integer("residual.streams")), d = m.d_model;
    const double per_sublayer = (n * n + 2 * n) * (n * d + 1) + 3;  // fn, base, scale
    return ResidualCost{2 * m.n_layers * per_sublayer + n * (n * d + 1) + 1, 3 * n + n * n / d};
  };
  return t;
}

}  // namespace normlab
