// Hyper-connections (Zhu et al. 2024; the algorithm of lucidrains/hyper-connections). n streams
// X_0 .. X_{n-1}, all the embedding at the start, replace the stream. Sublayer s, per position:
//   A = static_alpha [n, n+1] (+ alpha_scale * tanh(alpha_fn Hb_j) on row j when dynamic)
//   beta = static_beta [n]    (+ beta_scale * tanh(beta_fn . Hb_j) when dynamic), Hb_j = rmsnorm(X_j)
//   Y_c = sum_j A[j, c] X_j;  y = G_s(Y_0);  X'_k = Y_{k+1} + beta_k * y
// and x = sum_j X_j goes to the final norm. Init: static_alpha[:, 0] one-hot at row s mod n,
// static_alpha[:, 1:] = I, static_beta = 1, alpha_fn = beta_fn = 0, scales 0.01: every stream
// starts as the layout's stream.

#include "core/torch_compat.h"
#include "model/norms/norm.h"
#include "model/residual/n_streams.h"
#include "model/residual/residual.h"
#include "model/roles.h"
#include "model/transformer.h"

namespace normlab {
namespace {

class HcImpl : public torch::nn::Module {
 public:
  HcImpl(int64_t n, int64_t d, int64_t s, bool dynamic, const NormOptions& no) : n_(n), dynamic_(dynamic), eps_(no.eps) {
    auto a = torch::zeros({n, n + 1});
    a.index_put_({s % n, 0}, 1.0);
    a.narrow(1, 1, n).copy_(torch::eye(n));
    static_alpha = register_parameter("static_alpha", a);
    static_beta = register_parameter("static_beta", torch::ones({n}));
    if (dynamic) {
      norm = register_module("norm", make_norm("rmsnorm", no));
      norm_gain_ = norm->named_parameters(/*recurse=*/false)["weight"];  // a handle, looked up once
      alpha_fn = register_parameter("alpha_fn", torch::zeros({n + 1, d}));
      beta_fn = register_parameter("beta_fn", torch::zeros({d}));
      alpha_scale = register_parameter("alpha_scale", torch::full({1}, 0.01));
      beta_scale = register_parameter("beta_scale", torch::full({1}, 0.01));
    }
    declare_roles(*this, Role::kMixing);  // its norm's weight included
  }

  // The streams -> A (B, T, n, n+1) and beta (B, T, n), or the static (n, n+1) and (n), in the
  // streams' precision (fp32 or double).
  // Dynamic: Hb_j = rmsnorm(X_j) = g * X_j / sqrt(mean(X_j^2) + eps) (g the norm's weight), so
  // alpha_fn Hb_j = r_j (alpha_fn * g) X_j with r_j = 1 / sqrt(mean(X_j^2) + eps), and the same
  // for beta_fn: one rms_project per stream on the stream itself (a fused pass forward and one
  // backward), alpha_fn's n+1 rows and beta_fn as one (n+2, d) matrix, and no stacked or
  // normalised copy of the n streams (which cost ~10 passes over n (B, T, d) per sublayer).
  std::pair<torch::Tensor, torch::Tensor> weights(const Streams& X) {
    NoAutocastGuard fp32;
    const auto dt = X[0].scalar_type();
    auto A = static_alpha.to(dt), beta = static_beta.to(dt);
    if (!dynamic_) return {A, beta};
    auto F = (torch::cat({alpha_fn, beta_fn.unsqueeze(0)}) * norm_gain_).to(dt);  // (n+2, d)
    std::vector<torch::Tensor> z;
    for (const auto& x : X) z.push_back(rms_project({x}, F, eps_));  // r_j (alpha_fn * g | beta_fn * g) X_j
    auto Z = torch::stack(z, -2);  // (B, T, n, n+2)
    A = A + alpha_scale * torch::tanh(Z.narrow(-1, 0, n_ + 1));
    beta = beta + beta_scale * torch::tanh(Z.select(-1, n_ + 1));
    return {A, beta};
  }

  torch::Tensor static_alpha, static_beta, alpha_fn, beta_fn, alpha_scale, beta_scale;
  NormPtr norm;

 private:
  torch::Tensor norm_gain_;  // norm's weight g
  int64_t n_;
  bool dynamic_;
  double eps_;
};
TORCH_MODULE(Hc);

class HcStream : public NStreamCarrier {
 public:
  HcStream(std::vector<Hc> subs, int64_t n) : NStreamCarrier(n), subs_(std::move(subs)) {}

  void sublayer(int64_t s, const SublayerTerm& G) override {
    auto [A, beta] = subs_[s]->weights(X_);
    step(A, beta, G);  // X'_k = (A^T X)_{k+1} + beta_k G((A^T X)_0)
  }
  torch::Tensor finish() override {
    auto x = X_[0];
    for (int64_t j = 1; j < n_; ++j) x = x + X_[j];
    X_.clear();
    return x;
  }

 private:
  std::vector<Hc> subs_;
};

std::string check_at_least_one(const KeyValue& v, const ModelConfig&) {
  return std::get<int64_t>(v) >= 1 ? "" : "must be >= 1";
}
}  // namespace

KeySpec streams_key() {
  return {"streams", KeyKind::kInteger, int64_t{4}, "number of residual streams n", {}, check_at_least_one};
}

ResidualType hc_residual() {
  ResidualType t;
  t.name = "hc";
  t.equation = "Y = A^T X; y = G(Y_0); X' = Y_{1..n} + beta y (n streams)";
  t.keys = {streams_key(),
            {"dynamic", KeyKind::kBoolean, true, "input-dependent alpha and beta (false: static HC)"}};
  t.make_terms = [](TransformerImpl& model, const ModelConfig& m) -> std::unique_ptr<TermStream> {
    const int64_t n = m.residual.keys.integer("residual.streams");
    const bool dynamic = m.residual.keys.boolean("residual.dynamic");
    NormOptions no;
    no.size = m.d_model;
    no.eps = norm_eps(m, "rmsnorm");
    std::vector<Hc> subs;  // role mixing: they keep these constructor values through init
    register_per_sublayer(model, "hc", [&](int64_t i, int k) {
      subs.emplace_back(n, m.d_model, 2 * i + k - 1, dynamic, no);
      return subs.back().ptr();
    });
    return std::make_unique<HcStream>(std::move(subs), n);
  };
  t.cost = [](const ModelConfig& m) {
    const double n = static_cast<double>(m.residual.keys.integer("residual.streams")), d = m.d_model;
    const double per_sublayer = n * (n + 1) + n + (n + 1) * d + d + 2 + d;  // alpha, beta, their maps, norm
    return ResidualCost{2 * m.n_layers * per_sublayer, 3 * n};
  };
  return t;
}

}  // namespace normlab
