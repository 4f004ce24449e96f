// The residual-stream entries (src/model/residual/) and the value residual against their
// equations written out as loops over positions, in double precision; their reductions (HC with
// one stream is its layout, AttnRes with zero queries is its layout, token and scalar value
// residual start as fixed); mHC's doubly stochastic mixing; finite-difference gradients of every
// parameter they add; exact tensor names; and the config rules of their scope.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "config/load.h"
#include "core/errors.h"
#include "model/roles.h"
#include "model/transformer.h"
#include "train/run_config.h"
#include "test_util.h"

namespace normlab {
namespace {

using Vec = std::vector<double>;

ModelConfig small_residual(const std::string& residual, int64_t L = 2, const std::string& layout = "pre") {
  ModelConfig m;
  m.vocab_size = 11;
  m.ctx = 4;
  m.d_model = 8;
  m.n_layers = L;
  m.n_heads = 2;
  m.d_ff = 16;
  m.layout = layout;
  m.residual.type = residual;
  resolve_model_config(m);
  return m;
}

Transformer build(const ModelConfig& m, bool dbl = true, uint64_t seed = 7) {
  torch::manual_seed(seed);
  Transformer t(m);
  InitConfig init;
  init_weights(t, init);
  if (dbl) t->to(torch::kDouble);
  return t;
}

// Moves every parameter of the residual entries away from its init, so that no term of an
// equation hides behind a zero, a one or an identity.
void perturb(Transformer& t, const std::vector<std::string>& fragments, double scale = 0.3, uint64_t seed = 3) {
  torch::NoGradGuard ng;
  torch::manual_seed(seed);
  for (auto& kv : t->named_parameters()) {
    for (const auto& f : fragments) {
      if (kv.key().find(f) != std::string::npos) {
        kv.value().add_(torch::randn_like(kv.value()) * scale);
        break;
      }
    }
  }
}

torch::Tensor tokens_for(const ModelConfig& m, int64_t B = 2) {
  torch::manual_seed(11);
  return torch::randint(0, m.vocab_size, {B, m.ctx}, torch::kLong);
}

torch::Tensor param(Transformer& t, const std::string& name) {
  for (auto& kv : t->named_parameters()) {
    if (kv.key() == name) return kv.value();
  }
  ADD_FAILURE() << "no parameter " << name;
  return torch::Tensor();
}

torch::Tensor embed(Transformer& t, const torch::Tensor& tokens) {
  auto x = t->tok_emb(tokens);
  if (t->pos_emb) x = x + t->pos_emb->weight.narrow(0, 0, tokens.size(1));
  return x;
}

// Per position values of a (B, T, d) tensor.
Vec at(const torch::Tensor& x, int64_t b, int64_t t) {
  auto r = x[b][t].contiguous();
  return Vec(r.data_ptr<double>(), r.data_ptr<double>() + r.numel());
}
Vec vec(const torch::Tensor& x) {
  auto c = x.detach().contiguous().to(torch::kDouble);
  return Vec(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}
double sigm(double v) { return 1.0 / (1.0 + std::exp(-v)); }
Vec rms(const Vec& x, const Vec& w, double eps) {
  double ms = 0;
  for (double v : x) ms += v * v;
  ms /= static_cast<double>(x.size());
  Vec out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] / std::sqrt(ms + eps) * w[i];
  return out;
}

// RefStreams as nested vectors: S[b][t][j] is stream j's d values at position (b, t).
using RefStreams = std::vector<std::vector<std::vector<Vec>>>;

torch::Tensor to_tensor(const std::vector<std::vector<Vec>>& x) {  // [b][t] -> (B, T, d)
  const int64_t B = x.size(), T = x[0].size(), d = x[0][0].size();
  auto out = torch::empty({B, T, d}, torch::kDouble);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < d; ++i) out[b][t][i] = x[b][t][i];
  return out;
}
std::vector<std::vector<Vec>> from_tensor(const torch::Tensor& x) {
  std::vector<std::vector<Vec>> out(x.size(0));
  for (int64_t b = 0; b < x.size(0); ++b)
    for (int64_t t = 0; t < x.size(1); ++t) out[b].push_back(at(x, b, t));
  return out;
}

// The hidden states the head reads, by the loop reference of one residual type: `mix` carries the
// streams through one sublayer, `finish` reduces them for the final norm.
torch::Tensor final_norm_of(Transformer& t, const torch::Tensor& x) { return t->final_norm ? t->final_norm->forward(x) : x; }

// The composite-gain statistics, computed here apart from add_residual_gain: P[b][p] is the
// product M_s ... M_0 of the stream-mixing matrices at one position; after each block the mean
// over positions of the max row sum of |P| (fwd) and of the max column sum (bwd).
using Mat = std::vector<Vec>;
struct Gains {
  std::vector<double> fwd, bwd;
};
Mat mat_mul(const Mat& a, const Mat& b) {
  const size_t n = a.size();
  Mat c(n, Vec(n, 0.0));
  for (size_t i = 0; i < n; ++i)
    for (size_t k = 0; k < n; ++k)
      for (size_t j = 0; j < n; ++j) c[i][j] += a[i][k] * b[k][j];
  return c;
}
Mat identity(int64_t n) {
  Mat m(n, Vec(n, 0.0));
  for (int64_t i = 0; i < n; ++i) m[i][i] = 1;
  return m;
}
void add_gains(Gains& g, const std::vector<std::vector<Mat>>& P) {
  double fwd = 0, bwd = 0;
  int64_t count = 0;
  for (const auto& row : P) {
    for (const Mat& m : row) {
      const size_t n = m.size();
      double rmax = 0, cmax = 0;
      for (size_t i = 0; i < n; ++i) {
        double r = 0, c = 0;
        for (size_t j = 0; j < n; ++j) {
          r += std::abs(m[i][j]);
          c += std::abs(m[j][i]);
        }
        rmax = std::max(rmax, r);
        cmax = std::max(cmax, c);
      }
      fwd += rmax;
      bwd += cmax;
      ++count;
    }
  }
  g.fwd.push_back(fwd / count);
  g.bwd.push_back(bwd / count);
}
// The model's res_gain_fwd / res_gain_bwd of its last forward (capture on) against g. The
// statistics are fp32: 1e-5 relative.
void expect_gains(Transformer& t, const Gains& g, const std::string& what, bool must_move = true) {
  const auto& fwd = t->stats().get("res_gain_fwd");
  const auto& bwd = t->stats().get("res_gain_bwd");
  ASSERT_EQ(fwd.size(), g.fwd.size()) << what;
  ASSERT_EQ(bwd.size(), g.bwd.size()) << what;
  bool moved = false;  // the perturbed mixing weights take the product away from gain 1
  for (size_t i = 0; i < g.fwd.size(); ++i) {
    EXPECT_NEAR(fwd[i].item<double>(), g.fwd[i], 1e-5 * g.fwd[i]) << what << " block " << i;
    EXPECT_NEAR(bwd[i].item<double>(), g.bwd[i], 1e-5 * g.bwd[i]) << what << " block " << i;
    moved = moved || std::abs(g.fwd[i] - 1) > 1e-2 || std::abs(g.bwd[i] - 1) > 1e-2;
  }
  if (must_move) {
    EXPECT_TRUE(moved) << what << ": every gain is 1, the check cannot see a wrong product";
  }
}

TEST(HcTest, EqualsItsEquationWrittenAsLoops) {
  for (bool dynamic : {true, false}) {
    ModelConfig m = small_residual("hc");
    m.residual.keys.set("residual.streams", int64_t{3});
    m.residual.keys.set("residual.dynamic", dynamic);
    auto t = build(m);
    perturb(t, {".hc"});
    const int64_t n = 3, d = m.d_model;
    const double eps = 1e-6;
    auto tokens = tokens_for(m);
    torch::NoGradGuard ng;
    t->set_capture(true);  // the composite gains of this forward, checked below
    auto got = t->hidden(tokens);

    auto e = embed(t, tokens);
    const int64_t B = e.size(0), T = e.size(1);
    RefStreams X(B, std::vector<std::vector<Vec>>(T));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t p = 0; p < T; ++p) X[b][p] = std::vector<Vec>(n, at(e, b, p));
    std::vector<std::vector<Mat>> P(B, std::vector<Mat>(T, identity(n)));
    Gains gains;
    for (int64_t s = 0; s < 2 * m.n_layers; ++s) {
      const std::string pre = "blocks." + std::to_string(s / 2) + ".hc" + std::to_string(s % 2 + 1) + ".";
      const Vec sa = vec(param(t, pre + "static_alpha")), sb = vec(param(t, pre + "static_beta"));
      Vec afn, bfn, nw;
      double as = 0, bs = 0;
      if (dynamic) {
        afn = vec(param(t, pre + "alpha_fn"));
        bfn = vec(param(t, pre + "beta_fn"));
        nw = vec(param(t, pre + "norm.weight"));
        as = vec(param(t, pre + "alpha_scale"))[0];
        bs = vec(param(t, pre + "beta_scale"))[0];
      }
      std::vector<std::vector<Vec>> Y0(B, std::vector<Vec>(T));
      std::vector<std::vector<std::vector<Vec>>> Y(B, std::vector<std::vector<Vec>>(T));
      std::vector<std::vector<Vec>> beta(B, std::vector<Vec>(T));
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t p = 0; p < T; ++p) {
          std::vector<Vec> A(n, Vec(n + 1));
          Vec be(n);
          for (int64_t j = 0; j < n; ++j) {
            Vec hb = dynamic ? rms(X[b][p][j], nw, eps) : Vec();
            for (int64_t c = 0; c <= n; ++c) {
              A[j][c] = sa[j * (n + 1) + c];
              if (dynamic) {
                double dot = 0;
                for (int64_t i = 0; i < d; ++i) dot += afn[c * d + i] * hb[i];
                A[j][c] += as * std::tanh(dot);
              }
            }
            be[j] = sb[j];
            if (dynamic) {
              double dot = 0;
              for (int64_t i = 0; i < d; ++i) dot += bfn[i] * hb[i];
              be[j] += bs * std::tanh(dot);
            }
          }
          Y[b][p] = std::vector<Vec>(n + 1, Vec(d, 0.0));
          for (int64_t c = 0; c <= n; ++c)
            for (int64_t j = 0; j < n; ++j)
              for (int64_t i = 0; i < d; ++i) Y[b][p][c][i] += A[j][c] * X[b][p][j][i];
          Y0[b][p] = Y[b][p][0];
          beta[b][p] = be;
          Mat M(n, Vec(n));  // X'_k = sum_j A[j, k+1] X_j + beta_k y: M[k][j] = A[j][k+1]
          for (int64_t k = 0; k < n; ++k)
            for (int64_t j = 0; j < n; ++j) M[k][j] = A[j][k + 1];
          P[b][p] = mat_mul(M, P[b][p]);
        }
      }
      if (s % 2 == 1) add_gains(gains, P);
      auto y = from_tensor(t->block(s / 2)->term(s % 2 + 1, to_tensor(Y0)));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t p = 0; p < T; ++p)
          for (int64_t k = 0; k < n; ++k)
            for (int64_t i = 0; i < d; ++i) X[b][p][k][i] = Y[b][p][k + 1][i] + beta[b][p][k] * y[b][p][i];
    }
    std::vector<std::vector<Vec>> x(B, std::vector<Vec>(T, Vec(d, 0.0)));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t p = 0; p < T; ++p)
        for (int64_t j = 0; j < n; ++j)
          for (int64_t i = 0; i < d; ++i) x[b][p][i] += X[b][p][j][i];
    auto want = final_norm_of(t, to_tensor(x));
    EXPECT_TRUE(torch::allclose(got, want, 1e-10, 1e-12)) << "dynamic " << dynamic << ": max diff "
                                                          << (got - want).abs().max().item<double>();
    expect_gains(t, gains, dynamic ? "hc dynamic" : "hc static");
  }
}

// With 1 Sinkhorn iteration C is column-normalised only, so the composite product's column sums
// move away from 1 and the gain check sees the order of the product.
TEST(MhcTest, EqualsItsEquationWrittenAsLoops) {
  for (const int64_t iters : {int64_t{5}, int64_t{1}}) {
  ModelConfig m = small_residual("mhc");
  m.residual.keys.set("residual.streams", int64_t{3});
  m.residual.keys.set("residual.sinkhorn_iters", iters);
  auto t = build(m);
  perturb(t, {".mhc", "mhc_head."}, 0.5);
  const int64_t n = 3, d = m.d_model, R = n * n + 2 * n;
  const double eps = 1e-6;
  auto tokens = tokens_for(m);
  torch::NoGradGuard ng;
  t->set_capture(true);  // the composite gains of this forward, checked below
  auto got = t->hidden(tokens);

  auto e = embed(t, tokens);
  const int64_t B = e.size(0), T = e.size(1);
  RefStreams X(B, std::vector<std::vector<Vec>>(T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p = 0; p < T; ++p) X[b][p] = std::vector<Vec>(n, at(e, b, p));
  std::vector<std::vector<Mat>> P(B, std::vector<Mat>(T, identity(n)));
  Gains gains;
  // z = fn xf / sqrt(mean(xf^2) + eps) at one position.
  auto project = [&](const Vec& fn, int64_t rows, const std::vector<Vec>& Xp) {
    Vec xf;
    for (const auto& s : Xp) xf.insert(xf.end(), s.begin(), s.end());
    double ms = 0;
    for (double v : xf) ms += v * v;
    ms /= static_cast<double>(xf.size());
    Vec z(rows, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (size_t q = 0; q < xf.size(); ++q) z[r] += fn[r * xf.size() + q] * xf[q];
      z[r] /= std::sqrt(ms + eps);
    }
    return z;
  };
  for (int64_t s = 0; s < 2 * m.n_layers; ++s) {
    const std::string pre = "blocks." + std::to_string(s / 2) + ".mhc" + std::to_string(s % 2 + 1) + ".";
    const Vec fn = vec(param(t, pre + "fn")), a = vec(param(t, pre + "scale")), bb = vec(param(t, pre + "base"));
    std::vector<std::vector<Vec>> U(B, std::vector<Vec>(T)), post(B, std::vector<Vec>(T));
    std::vector<std::vector<std::vector<Vec>>> C(B, std::vector<std::vector<Vec>>(T));
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t p = 0; p < T; ++p) {
        const Vec z = project(fn, R, X[b][p]);
        Vec pr(n), po(n);
        for (int64_t j = 0; j < n; ++j) {
          pr[j] = sigm(a[0] * z[j] + bb[j]) + eps;
          po[j] = 2 * sigm(a[1] * z[n + j] + bb[n + j]);
        }
        std::vector<Vec> c(n, Vec(n));
        for (int64_t i = 0; i < n; ++i) {
          double mx = -1e300, sum = 0;
          for (int64_t j = 0; j < n; ++j) mx = std::max(mx, a[2] * z[2 * n + i * n + j] + bb[2 * n + i * n + j]);
          for (int64_t j = 0; j < n; ++j) sum += std::exp(a[2] * z[2 * n + i * n + j] + bb[2 * n + i * n + j] - mx);
          for (int64_t j = 0; j < n; ++j)
            c[i][j] = std::exp(a[2] * z[2 * n + i * n + j] + bb[2 * n + i * n + j] - mx) / sum + eps;
        }
        auto cols = [&] {
          for (int64_t j = 0; j < n; ++j) {
            double sum = 0;
            for (int64_t i = 0; i < n; ++i) sum += c[i][j];
            for (int64_t i = 0; i < n; ++i) c[i][j] /= sum + eps;
          }
        };
        cols();
        for (int64_t it = 1; it < iters; ++it) {
          for (int64_t i = 0; i < n; ++i) {
            double sum = 0;
            for (int64_t j = 0; j < n; ++j) sum += c[i][j];
            for (int64_t j = 0; j < n; ++j) c[i][j] /= sum + eps;
          }
          cols();
        }
        Vec u(d, 0.0);
        for (int64_t j = 0; j < n; ++j)
          for (int64_t i = 0; i < d; ++i) u[i] += pr[j] * X[b][p][j][i];
        U[b][p] = u;
        post[b][p] = po;
        C[b][p] = c;
        Mat M(n, Vec(n));  // X'_j = post_j y + sum_i C[i][j] X_i: M[j][i] = C[i][j]
        for (int64_t j = 0; j < n; ++j)
          for (int64_t i = 0; i < n; ++i) M[j][i] = c[i][j];
        P[b][p] = mat_mul(M, P[b][p]);
      }
    }
    if (s % 2 == 1) add_gains(gains, P);
    auto y = from_tensor(t->block(s / 2)->term(s % 2 + 1, to_tensor(U)));
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t p = 0; p < T; ++p) {
        std::vector<Vec> nx(n, Vec(d, 0.0));
        for (int64_t j = 0; j < n; ++j)
          for (int64_t i = 0; i < d; ++i) {
            nx[j][i] = post[b][p][j] * y[b][p][i];
            for (int64_t q = 0; q < n; ++q) nx[j][i] += C[b][p][q][j] * X[b][p][q][i];
          }
        X[b][p] = nx;
      }
    }
  }
  const Vec hfn = vec(param(t, "mhc_head.fn")), hs = vec(param(t, "mhc_head.scale")), hb = vec(param(t, "mhc_head.base"));
  std::vector<std::vector<Vec>> x(B, std::vector<Vec>(T, Vec(d, 0.0)));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t p = 0; p < T; ++p) {
      const Vec z = project(hfn, n, X[b][p]);
      for (int64_t j = 0; j < n; ++j) {
        const double w = sigm(hs[0] * z[j] + hb[j]) + eps;
        for (int64_t i = 0; i < d; ++i) x[b][p][i] += w * X[b][p][j][i];
      }
    }
  }
  auto want = final_norm_of(t, to_tensor(x));
  EXPECT_TRUE(torch::allclose(got, want, 1e-10, 1e-12)) << "iters " << iters << ": max diff "
                                                        << (got - want).abs().max().item<double>();
  // 5 iterations: doubly stochastic to ~1e-3, every gain ~1 (the product's order is not visible).
  expect_gains(t, gains, "mhc, sinkhorn_iters " + std::to_string(iters), /*must_move=*/iters == 1);
  }
}

// AttnRes by its definition: sources [e, B_0 .. B_{m-1}] (+ the partial sum of the open group).
TEST(AttnResTest, EqualsItsEquationWrittenAsLoopsForFullAndBlockVariants) {
  for (int64_t S : {1, 2, 4}) {
    ModelConfig m = small_residual("attnres", 3);
    m.residual.keys.set("residual.attnres_block", S);
    auto t = build(m);
    perturb(t, {".attnres", "final_attnres."}, 0.5);
    const int64_t d = m.d_model, L2 = 2 * m.n_layers;
    const double eps = 1e-6;
    auto tokens = tokens_for(m);
    torch::NoGradGuard ng;
    auto got = t->hidden(tokens);

    auto e = embed(t, tokens);
    const int64_t B = e.size(0), T = e.size(1);
    std::vector<torch::Tensor> outs;  // o_s, (B, T, d)
    auto sources = [&](int64_t s) {
      std::vector<torch::Tensor> V = {e};
      const int64_t mm = s / S;
      for (int64_t g = 0; g < mm; ++g) {
        auto sum = outs[g * S];
        for (int64_t q = g * S + 1; q < (g + 1) * S; ++q) sum = sum + outs[q];
        V.push_back(sum);
      }
      if (s > mm * S) {
        auto sum = outs[mm * S];
        for (int64_t q = mm * S + 1; q < s; ++q) sum = sum + outs[q];
        V.push_back(sum);
      }
      return V;
    };
    auto attnres = [&](const std::string& pre, const std::vector<torch::Tensor>& V) {
      const Vec q = vec(param(t, pre + "query")), w = vec(param(t, pre + "norm.weight"));
      std::vector<std::vector<Vec>> h(B, std::vector<Vec>(T, Vec(d, 0.0)));
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t p = 0; p < T; ++p) {
          Vec logit(V.size());
          double mx = -1e300, sum = 0;
          for (size_t j = 0; j < V.size(); ++j) {
            const Vec k = rms(at(V[j], b, p), w, eps);
            logit[j] = 0;
            for (int64_t i = 0; i < d; ++i) logit[j] += q[i] * k[i];
            mx = std::max(mx, logit[j]);
          }
          for (double l : logit) sum += std::exp(l - mx);
          for (size_t j = 0; j < V.size(); ++j) {
            const Vec v = at(V[j], b, p);
            for (int64_t i = 0; i < d; ++i) h[b][p][i] += std::exp(logit[j] - mx) / sum * v[i];
          }
        }
      }
      return to_tensor(h);
    };
    for (int64_t s = 0; s < L2; ++s) {
      auto h = attnres("blocks." + std::to_string(s / 2) + ".attnres" + std::to_string(s % 2 + 1) + ".", sources(s));
      outs.push_back(t->block(s / 2)->term(s % 2 + 1, h));
    }
    auto want = final_norm_of(t, attnres("final_attnres.", sources(L2)));
    EXPECT_TRUE(torch::allclose(got, want, 1e-10, 1e-12)) << "S " << S << ": max diff "
                                                          << (got - want).abs().max().item<double>();
  }
}

TEST(HcTest, OneStreamAtInitIsItsLayoutAndMoreStreamsCarryTheLayoutsStream) {
  for (const char* layout : {"pre", "sandwich", "lns"}) {
    auto plain = build(small_residual("add", 3, layout));
    ModelConfig m = small_residual("hc", 3, layout);
    m.residual.keys.set("residual.streams", int64_t{1});
    auto hc = build(m);  // HC's parameters keep their constructor init: the other draws are the same
    auto tokens = tokens_for(m);
    torch::NoGradGuard ng;
    auto want = plain->forward(tokens);
    EXPECT_TRUE(torch::equal(hc->forward(tokens), want)) << layout;
  }
  // n = 3: every stream is the layout's stream and the final norm sees 3x it, which an rmsnorm with
  // a negligible eps does not see.
  ModelConfig a = small_residual("add", 3), m = small_residual("hc", 3);
  for (ModelConfig* c : {&a, &m}) {
    c->norm.type = "rmsnorm";
    c->norm.eps = 1e-30;
  }
  m.residual.keys.set("residual.streams", int64_t{3});
  auto plain = build(a);
  auto tokens = tokens_for(m);
  torch::NoGradGuard ng;
  auto want = plain->forward(tokens);
  EXPECT_TRUE(torch::allclose(build(m)->forward(tokens), want, 1e-12, 1e-12));
  m.residual.keys.set("residual.dynamic", false);
  EXPECT_TRUE(torch::allclose(build(m)->forward(tokens), want, 1e-12, 1e-12)) << "static";
}

TEST(AttnResTest, ZeroQueriesWithScaleInvariantNormsStartAsTheLayout) {
  // Uniform weights make h_s the mean of the sources, x_s / (number of sources); Na and the final
  // norm do not see the scale (eps 1e-30 makes rmsnorm scale-invariant to rounding).
  for (int64_t S : {1, 2}) {
    ModelConfig a = small_residual("add", 3), r = small_residual("attnres", 3);
    for (ModelConfig* m : {&a, &r}) {
      m->norm.type = "rmsnorm";
      m->norm.eps = 1e-30;
    }
    r.residual.keys.set("residual.attnres_block", S);
    auto plain = build(a), ar = build(r);
    auto tokens = tokens_for(a);
    torch::NoGradGuard ng;
    auto want = plain->forward(tokens);
    EXPECT_TRUE(torch::allclose(ar->forward(tokens), want, 1e-12, 1e-12)) << "S " << S;
  }
}

TEST(MhcTest, MixingMatrixIsPositiveAndDoublyStochastic) {
  torch::manual_seed(5);
  for (int64_t n : {2, 4, 6}) {
    auto logits = torch::randn({64, n, n}, torch::kDouble);  // logits of order 1
    auto C = sinkhorn(logits, 20);
    EXPECT_GT(C.min().item<double>(), 0.0);
    // Columns are normalised last: their sums end ~1e-6 below 1 (the eps); rows get there with T.
    EXPECT_LT((C.sum(-2) - 1).abs().max().item<double>(), 1e-5) << n;
    EXPECT_LT((C.sum(-1) - 1).abs().max().item<double>(), 1e-4) << n;
    // One iteration normalises the columns only: rows are not yet there.
    auto C1 = sinkhorn(logits, 1);
    EXPECT_LT((C1.sum(-2) - 1).abs().max().item<double>(), 1e-5);
    EXPECT_GT((C1.sum(-1) - 1).abs().max().item<double>(), 1e-3);
  }
}

TEST(ValueResidualTest, TokenAndScalarStartAsFixed) {
  std::map<std::string, torch::Tensor> logits;
  for (const std::string v : {"none", "fixed", "scalar", "token"}) {
    ModelConfig m = small_residual("add", 3);
    m.value_residual = v;
    auto t = build(m);
    torch::NoGradGuard ng;
    logits[v] = t->forward(tokens_for(m));
  }
  EXPECT_TRUE(torch::equal(logits["scalar"], logits["fixed"]));
  EXPECT_TRUE(torch::allclose(logits["token"], logits["fixed"], 1e-12, 1e-12));
  EXPECT_FALSE(torch::allclose(logits["none"], logits["fixed"], 1e-6, 1e-6));
}

// One attention sublayer by hand (no bias, RoPE or QK-norm; H heads): the raw values x Wv^T,
// mixed with v0 as `mode` says when v0 is defined, then the composed reference attention and
// out_proj.
torch::Tensor attention_by_hand(Attention& a, const torch::Tensor& x, const torch::Tensor& v0, std::string mode,
                                int64_t H) {
  const int64_t B = x.size(0), T = x.size(1), d = x.size(2), dh = d / H;
  auto raw = torch::matmul(x, a->v_proj->weight.t());
  auto mixed = raw.clone();
  if (v0.defined()) {
    const auto params = a->named_parameters();
    const double lam = mode == "scalar" ? params["vres_lambda"].item<double>() : 0.5;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t h = 0; h < H; ++h) {
          double g = 0;  // token: g = sigmoid(x . Wg[h] + bg[h])
          if (mode == "token") {
            g = params["vres_gate.bias"][h].item<double>();
            for (int64_t i = 0; i < d; ++i) g += x[b][t][i].item<double>() * params["vres_gate.weight"][h][i].item<double>();
            g = sigm(g);
          }
          for (int64_t i = h * dh; i < (h + 1) * dh; ++i) {
            const double v = raw[b][t][i].item<double>(), s = v0[b][t][i].item<double>();
            mixed[b][t][i] = mode == "token" ? g * v + (1 - g) * s : (1 - lam) * v + lam * s;
          }
        }
      }
    }
  }
  auto heads = [&](const torch::Tensor& z) { return z.view({B, T, H, dh}); };
  auto q = heads(torch::matmul(x, a->q_proj->weight.t())), k = heads(torch::matmul(x, a->k_proj->weight.t()));
  auto ctx = causal_attention_reference(q, k, heads(mixed), 0, nullptr).reshape({B, T, d});
  return torch::matmul(ctx, a->out_proj->weight.t());
}

// The attention sublayer of a mixing block, by hand: raw values mixed with V_0 as the mode says,
// then the composed reference attention and out_proj.
TEST(ValueResidualTest, MixingBlockEqualsItsEquationWrittenAsLoops) {
  for (const std::string mode : {"fixed", "scalar", "token"}) {
    AttentionOptions o;
    o.d_model = 8;
    o.n_heads = 2;
    o.ctx = 4;
    o.value_residual = find_value_residual(mode);
    o.value_role = ValueRole::kMix;
    auto source = std::make_shared<ValueSource>();
    o.value_source = source;
    torch::manual_seed(2);
    Attention a(o);
    a->to(torch::kDouble);
    {
      torch::NoGradGuard ng;
      for (auto& p : a->parameters()) p.copy_(torch::randn_like(p) * 0.5);
    }
    auto x = torch::randn({2, 4, 8}, torch::kDouble), v0 = torch::randn({2, 4, 8}, torch::kDouble);
    source->put(v0);
    a->set_fast_path(false);
    torch::NoGradGuard ng;
    auto got = a->forward(x);
    auto want = attention_by_hand(a, x, v0, mode, 2);
    EXPECT_TRUE(torch::allclose(got, want, 1e-12, 1e-12)) << mode;
  }
}

// The whole model, each mode by its formula: Pre-LN blocks written out, block 0's raw values
// (its norm1 output times its v_proj) mixed into every later block's, with lambda and the token
// gate moved away from their init. A source taken from the wrong block, a mode that mixes the
// wrong way round or a block 0 that mixes with itself fails here.
TEST(ValueResidualTest, EveryModeInTheModelIsItsFormulaOnBlockZerosRawValues) {
  std::map<std::string, torch::Tensor> hidden;
  for (const std::string mode : {"none", "fixed", "scalar", "token"}) {
    ModelConfig m = small_residual("add", 3);
    m.value_residual = mode;
    auto t = build(m);
    perturb(t, {"vres_"}, 0.5);
    auto tokens = tokens_for(m);
    torch::NoGradGuard ng;
    for (int64_t i = 0; i < m.n_layers; ++i) t->block(i)->attention()->set_fast_path(false);
    auto got = t->hidden(tokens);

    auto x = embed(t, tokens);
    torch::Tensor v0;
    for (int64_t i = 0; i < m.n_layers; ++i) {
      Block& b = t->block(i);
      auto a_in = b->norm("norm1", x);
      x = x + attention_by_hand(b->attention(), a_in, i == 0 ? torch::Tensor() : v0, mode, m.n_heads);
      if (i == 0 && mode != "none") v0 = torch::matmul(a_in, b->attention()->v_proj->weight.t());
      x = x + b->ffn(b->norm("norm2", x));
    }
    auto want = final_norm_of(t, x);
    EXPECT_TRUE(torch::allclose(got, want, 1e-10, 1e-12))
        << mode << ": max diff " << (got - want).abs().max().item<double>();
    hidden[mode] = got;
  }
  // Every mode is a different model from the others at these weights.
  for (auto a = hidden.begin(); a != hidden.end(); ++a)
    for (auto b = std::next(a); b != hidden.end(); ++b)
      EXPECT_FALSE(torch::allclose(a->second, b->second, 1e-6, 1e-6)) << a->first << " vs " << b->first;
}

// d loss / d p of every parameter an entry adds (a few entries each) against central differences.
void expect_gradients_match(Transformer& t, const std::vector<std::string>& fragments, const std::string& what) {
  auto tokens = tokens_for(t->config());
  torch::manual_seed(9);
  auto probe = torch::randn({tokens.size(0), tokens.size(1), t->config().vocab_size}, torch::kDouble);
  auto loss_of = [&] { return (t->forward(tokens) * probe).sum(); };
  t->zero_grad();
  loss_of().backward();
  int checked = 0;
  for (auto& kv : t->named_parameters()) {
    bool ours = false;
    for (const auto& f : fragments) ours = ours || kv.key().find(f) != std::string::npos;
    if (!ours) continue;
    auto p = kv.value();
    auto g = p.grad();
    ASSERT_TRUE(g.defined()) << what << ": " << kv.key() << " gets no gradient";
    auto flat = p.view({-1});
    for (int64_t idx : {int64_t{0}, flat.numel() / 2, flat.numel() - 1}) {
      const double h = 1e-6, old = flat[idx].item<double>();
      double up, down;
      {
        torch::NoGradGuard ng;
        flat[idx] = old + h;
        up = loss_of().item<double>();
        flat[idx] = old - h;
        down = loss_of().item<double>();
        flat[idx] = old;
      }
      const double fd = (up - down) / (2 * h), ad = g.view({-1})[idx].item<double>();
      EXPECT_NEAR(ad, fd, 1e-6 * std::max(1.0, std::abs(fd))) << what << ": " << kv.key() << "[" << idx << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 0) << what;
}

TEST(ResidualGradientTest, EveryAddedParameterMatchesFiniteDifferences) {
  {
    ModelConfig m = small_residual("hc");
    m.residual.keys.set("residual.streams", int64_t{3});
    auto t = build(m);
    perturb(t, {".hc"});
    expect_gradients_match(t, {".hc"}, "hc");
  }
  {
    ModelConfig m = small_residual("mhc");
    m.residual.keys.set("residual.streams", int64_t{2});
    m.residual.keys.set("residual.sinkhorn_iters", int64_t{4});
    auto t = build(m);
    perturb(t, {".mhc", "mhc_head."}, 0.5);
    expect_gradients_match(t, {".mhc", "mhc_head."}, "mhc");
  }
  for (int64_t S : {1, 2}) {
    ModelConfig m = small_residual("attnres");
    m.residual.keys.set("residual.attnres_block", S);
    auto t = build(m);
    perturb(t, {".attnres", "final_attnres."}, 0.5);
    expect_gradients_match(t, {".attnres", "final_attnres."}, "attnres S=" + std::to_string(S));
  }
  for (const std::string v : {"scalar", "token"}) {
    ModelConfig m = small_residual("hc", 3);
    m.value_residual = v;
    auto t = build(m);
    perturb(t, {"vres_", ".hc"});
    expect_gradients_match(t, {"vres_", "blocks.0.attn.v_proj"}, "value residual " + v);
  }
}

std::set<std::string> names_of(Transformer& t, const std::string& fragment) {
  std::set<std::string> out;
  for (auto& kv : t->named_parameters()) {
    if (kv.key().find(fragment) != std::string::npos) out.insert(kv.key() + " " + c10::str(kv.value().sizes()));
  }
  return out;
}

TEST(ResidualNamesTest, ExactTensorNamesAndShapes) {
  ModelConfig m = small_residual("hc");
  m.residual.keys.set("residual.streams", int64_t{3});
  auto hc = build(m, false);
  EXPECT_EQ(names_of(hc, "blocks.1.hc2."),
            (std::set<std::string>{"blocks.1.hc2.static_alpha [3, 4]", "blocks.1.hc2.static_beta [3]",
                                   "blocks.1.hc2.norm.weight [8]", "blocks.1.hc2.alpha_fn [4, 8]",
                                   "blocks.1.hc2.beta_fn [8]", "blocks.1.hc2.alpha_scale [1]",
                                   "blocks.1.hc2.beta_scale [1]"}));
  m.residual.keys.set("residual.dynamic", false);
  auto st = build(m, false);
  EXPECT_EQ(names_of(st, "blocks.0.hc1."),
            (std::set<std::string>{"blocks.0.hc1.static_alpha [3, 4]", "blocks.0.hc1.static_beta [3]"}));
  // Init: one-hot column 0 at row s mod n, identity after it.
  auto a = param(st, "blocks.1.hc2.static_alpha");  // s = 3: row 0
  auto want = torch::zeros({3, 4});
  want[0][0] = 1;
  want.narrow(1, 1, 3).copy_(torch::eye(3));
  EXPECT_TRUE(torch::equal(a, want));

  ModelConfig mm = small_residual("mhc");
  mm.residual.keys.set("residual.streams", int64_t{2});
  auto mhc = build(mm, false);
  EXPECT_EQ(names_of(mhc, "mhc"), (std::set<std::string>{
                                      "blocks.0.mhc1.fn [8, 16]", "blocks.0.mhc1.scale [3]", "blocks.0.mhc1.base [8]",
                                      "blocks.0.mhc2.fn [8, 16]", "blocks.0.mhc2.scale [3]", "blocks.0.mhc2.base [8]",
                                      "blocks.1.mhc1.fn [8, 16]", "blocks.1.mhc1.scale [3]", "blocks.1.mhc1.base [8]",
                                      "blocks.1.mhc2.fn [8, 16]", "blocks.1.mhc2.scale [3]", "blocks.1.mhc2.base [8]",
                                      "mhc_head.fn [2, 16]", "mhc_head.scale [1]", "mhc_head.base [2]"}));
  EXPECT_TRUE(torch::equal(param(mhc, "blocks.0.mhc1.scale"), torch::full({3}, 0.01)));
  EXPECT_TRUE(torch::equal(param(mhc, "mhc_head.base"), torch::zeros({2})));
  const double fn_std = param(mhc, "blocks.1.mhc2.fn").std().item<double>();
  EXPECT_GT(fn_std, 0.01);  // drawn as a Linear weight, N(0, 0.02)
  EXPECT_LT(fn_std, 0.03);

  auto ar = build(small_residual("attnres"), false);
  EXPECT_EQ(names_of(ar, "attnres"), (std::set<std::string>{
                                         "blocks.0.attnres1.query [8]", "blocks.0.attnres1.norm.weight [8]",
                                         "blocks.0.attnres2.query [8]", "blocks.0.attnres2.norm.weight [8]",
                                         "blocks.1.attnres1.query [8]", "blocks.1.attnres1.norm.weight [8]",
                                         "blocks.1.attnres2.query [8]", "blocks.1.attnres2.norm.weight [8]",
                                         "final_attnres.query [8]", "final_attnres.norm.weight [8]"}));

  ModelConfig v = small_residual("add", 3);
  v.value_residual = "token";
  auto tok = build(v, false);
  EXPECT_EQ(names_of(tok, "vres"), (std::set<std::string>{
                                       "blocks.1.attn.vres_gate.weight [2, 8]", "blocks.1.attn.vres_gate.bias [2]",
                                       "blocks.2.attn.vres_gate.weight [2, 8]", "blocks.2.attn.vres_gate.bias [2]"}));
  EXPECT_EQ(param(tok, "blocks.2.attn.vres_gate.weight").abs().sum().item<double>(), 0.0);
  v.value_residual = "scalar";
  auto sc = build(v, false);
  EXPECT_EQ(names_of(sc, "vres"), (std::set<std::string>{"blocks.1.attn.vres_lambda [1]", "blocks.2.attn.vres_lambda [1]"}));
}

TEST(ResidualNamesTest, ASeedGivesEveryMethodTheSameWeightsForTheTensorsItSharesWithAdd) {
  std::map<std::string, torch::Tensor> plain;
  auto a = build(small_residual("add", 3), false);
  for (auto& kv : a->named_parameters()) plain[kv.key()] = kv.value();
  for (const char* type : {"hc", "mhc", "attnres"}) {
    for (const std::string v : {"none", "token", "scalar"}) {
      ModelConfig m = small_residual(type, 3);
      m.value_residual = v;
      auto t = build(m, false);
      int shared = 0;
      for (auto& kv : t->named_parameters()) {
        auto it = plain.find(kv.key());
        if (it == plain.end()) continue;
        ++shared;
        EXPECT_TRUE(torch::equal(kv.value(), it->second)) << type << " " << v << ": " << kv.key();
      }
      EXPECT_EQ(shared, static_cast<int>(plain.size()));
    }
  }
}

TEST(ResidualNamesTest, NoTensorOfAStreamMethodIsWeightDecayed) {
  ModelConfig m = small_residual("mhc");
  m.value_residual = "token";
  auto t = build(m, false);
  for (auto& kv : t->named_parameters()) {
    const std::string& n = kv.key();
    const bool ours = n.find("mhc") != std::string::npos || n.find("vres") != std::string::npos;
    const auto role = role_of(kv.value());
    ASSERT_TRUE(role.has_value()) << n;
    EXPECT_EQ(*role == Role::kMixing, ours) << n;
    if (ours) {
      EXPECT_FALSE(role_decays(*role)) << n;
    }
  }
}

TEST(ResidualDiagnosticsTest, GainIsOneForOneStreamAndBoundedForMhc) {
  for (const char* type : {"hc", "mhc"}) {
    ModelConfig m = small_residual(type, 4);
    auto t = build(m, false);
    t->set_capture(true);
    torch::NoGradGuard ng;
    t->forward(tokens_for(m));
    const auto& fwd = t->stats().get("res_gain_fwd");
    const auto& bwd = t->stats().get("res_gain_bwd");
    ASSERT_EQ(fwd.size(), 4u) << type;
    ASSERT_EQ(bwd.size(), 4u) << type;
    for (size_t i = 0; i < 4; ++i) {
      if (std::string(type) == "hc") {
        // At init each M_s is the identity on the n streams: gain 1.
        EXPECT_NEAR(fwd[i].item<double>(), 1.0, 1e-6);
      } else {
        // C doubly stochastic: the product's row and column sums stay ~1 however deep.
        EXPECT_NEAR(fwd[i].item<double>(), 1.0, 1e-3);
        EXPECT_NEAR(bwd[i].item<double>(), 1.0, 1e-3);
      }
    }
    EXPECT_EQ(t->stats().get("act_rms").size(), 5u);
  }
}

TEST(ResidualConfigTest, EveryScopeRuleIsOneLineNamingTheKey) {
  struct Case {
    std::vector<std::string> set;
    std::string key, text;
  };
  const std::vector<Case> cases = {
      {{"model.residual.type=hc", "model.layout=post"}, "model.residual.type", "layout post is not additive"},
      {{"model.residual.type=mhc", "model.layout=deepnorm"}, "model.residual.type", "layout deepnorm is not additive"},
      {{"model.residual.type=attnres", "model.layout=mix"}, "model.residual.type", "layout mix is not additive"},
      {{"model.residual.type=hc", "model.layout=hybrid"}, "model.residual.type", "not additive"},
      {{"model.residual.type=hc", "model.layout=normformer", "model.normformer.resid_scale=ffn"},
       "model.residual.type", "normformer with resid_scale ffn is not additive"},
      {{"model.residual.type=hc2"}, "model.residual.type", "'hc2' is not a registered residual type"},
      {{"model.residual.streams=2"}, "model.residual.streams", "belongs to residual hc, mhc (model.residual.type is add)"},
      {{"model.residual.type=attnres", "model.residual.streams=2"}, "model.residual.streams", "belongs to residual hc, mhc"},
      {{"model.residual.type=mhc", "model.residual.dynamic=false"}, "model.residual.dynamic", "belongs to residual hc"},
      {{"model.residual.type=hc", "model.residual.sinkhorn_iters=3"}, "model.residual.sinkhorn_iters", "belongs to residual mhc"},
      {{"model.residual.attnres_block=2"}, "model.residual.attnres_block", "belongs to residual attnres"},
      {{"model.residual.type=attnres", "model.residual.attnres_block=3"}, "model.residual.attnres_block",
       "must be 1 or even in [2, 2 * n_layers = 8]"},
      {{"model.residual.type=attnres", "model.residual.attnres_block=10"}, "model.residual.attnres_block", "must be 1 or even"},
      {{"model.residual.type=hc", "model.residual.streams=0"}, "model.residual.streams", "must be >= 1"},
      {{"model.residual.type=mhc", "model.residual.sinkhorn_iters=0"}, "model.residual.sinkhorn_iters", "must be in [1, 1000]"},
      {{"model.value_residual=scalar", "model.n_layers=1"}, "model.value_residual", "n_layers 1 has none"},
      {{"model.value_residual=gated"}, "model.value_residual", "none, fixed, scalar, token"},
  };
  for (const auto& c : cases) {
    const auto p = testing::config_problems("", c.set);
    std::string all;
    for (const auto& s : c.set) all += s + " ";
    ASSERT_EQ(p.size(), 1u) << all << (p.empty() ? "" : p[0]);
    EXPECT_NE(p[0].find(c.key), std::string::npos) << p[0];
    EXPECT_NE(p[0].find(c.text), std::string::npos) << p[0];
    EXPECT_EQ(p[0].find('\n'), std::string::npos) << p[0];
  }
  for (const char* layout : {"pre", "sandwich", "normformer", "reordered", "subln", "lns"}) {
    for (const char* type : {"hc", "mhc", "attnres"}) {
      EXPECT_TRUE(testing::config_problems("", {std::string("model.layout=") + layout, std::string("model.residual.type=") + type}).empty())
          << layout << " " << type;
    }
  }
}

}  // namespace
}  // namespace normlab
