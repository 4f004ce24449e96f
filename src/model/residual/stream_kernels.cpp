// See stream_kernels.h. Compiled with FMA contraction (CMakeLists.txt): in the AVX2 + FMA clone
// y + x * w is one fma, as in LibTorch's addcmul kernels.
#include "model/residual/stream_kernels.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/simd.h"

namespace normlab::stream_kernels {
namespace {

constexpr int64_t kLanes = 8;

// Enough work per task that at::parallel_for's fork is cheap next to it (~32k values).
int64_t grain(int64_t values_per_position) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(values_per_position, 1)); }

template <class T>
NORMLAB_ALWAYS_INLINE T dot(const T* __restrict a, const T* __restrict b, int64_t d) {
  T acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= d; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  double s = 0;
  for (int64_t l = 0; l < kLanes; ++l) s += acc[l];
  for (; i < d; ++i) s += static_cast<double>(a[i]) * b[i];
  return static_cast<T>(s);
}

// y = x w (first) or y = y + x w.
template <class T>
NORMLAB_ALWAYS_INLINE void scale_into(T* __restrict y, const T* __restrict x, T w, int64_t d, bool first) {
  if (first) {
    for (int64_t i = 0; i < d; ++i) y[i] = x[i] * w;
  } else {
    for (int64_t i = 0; i < d; ++i) y[i] = y[i] + x[i] * w;
  }
}

template <class T>
NORMLAB_ALWAYS_INLINE void mix_forward_rows(const Mix& s, const T* const* X, const T* W, T* const* Y, int64_t p0, int64_t p1) {
  const int64_t d = s.d, n = s.n, m = s.m;
  for (int64_t p = p0; p < p1; ++p) {
    const T* w = s.shared ? W : W + p * n * m;
    const int64_t at = p * d;
    for (int64_t c = 0; c < m; ++c)
      for (int64_t j = 0; j < n; ++j) scale_into(Y[c] + at, X[j] + at, w[j * m + c], d, j == 0);
  }
}

template <class T>
NORMLAB_ALWAYS_INLINE void mix_backward_rows(const Mix& s, const T* const* X, const T* W, const T* const* dY, T* const* dX,
                                             T* dW, int64_t p0, int64_t p1) {
  const int64_t d = s.d, n = s.n, m = s.m;
  for (int64_t p = p0; p < p1; ++p) {
    const T* w = s.shared ? W : W + p * n * m;
    const int64_t at = p * d;
    if (dX) {
      for (int64_t j = 0; j < n; ++j) {
        if (!dX[j]) continue;
        bool first = true;
        for (int64_t c = 0; c < m; ++c) {
          if (!dY[c]) continue;
          scale_into(dX[j] + at, dY[c] + at, w[j * m + c], d, first);
          first = false;
        }
        if (first) std::fill(dX[j] + at, dX[j] + at + d, T(0));
      }
    }
    if (dW) {
      T* g = dW + p * n * m;
      for (int64_t j = 0; j < n; ++j)
        for (int64_t c = 0; c < m; ++c) g[j * m + c] = dY[c] ? dot(X[j] + at, dY[c] + at, d) : T(0);
    }
  }
}

template <class T>
NORMLAB_ALWAYS_INLINE void add_scaled_forward_rows(const Scaled& s, const T* const* R, const T* b, const T* y, T* const* out,
                                                   int64_t p0, int64_t p1) {
  const int64_t d = s.d, n = s.n;
  for (int64_t p = p0; p < p1; ++p) {
    const T* bp = s.shared ? b : b + p * n;
    const int64_t at = p * d;
    const T* __restrict yr = y + at;
    for (int64_t k = 0; k < n; ++k) {
      const T* __restrict r = R[k] + at;
      T* __restrict o = out[k] + at;
      const T bk = bp[k];
      for (int64_t i = 0; i < d; ++i) o[i] = r[i] + yr[i] * bk;
    }
  }
}

template <class T>
NORMLAB_ALWAYS_INLINE void add_scaled_backward_rows(const Scaled& s, const T* b, const T* y, const T* const* dOut, T* dy, T* db,
                                                    int64_t p0, int64_t p1) {
  const int64_t d = s.d, n = s.n;
  for (int64_t p = p0; p < p1; ++p) {
    const T* bp = s.shared ? b : b + p * n;
    const int64_t at = p * d;
    if (dy) {
      bool first = true;
      for (int64_t k = 0; k < n; ++k) {
        if (!dOut[k]) continue;
        scale_into(dy + at, dOut[k] + at, bp[k], d, first);
        first = false;
      }
      if (first) std::fill(dy + at, dy + at + d, T(0));
    }
    if (db)
      for (int64_t k = 0; k < n; ++k) db[p * n + k] = dOut[k] ? dot(y + at, dOut[k] + at, d) : T(0);
  }
}

// The position loops, once per precision, each compiled for AVX2 + FMA and the baseline.
#define NORMLAB_STREAM_LOOPS(T, SUFFIX)                                                                          \
  NORMLAB_CPU_CLONES void mix_forward_##SUFFIX(const Mix& s, const T* const* X, const T* W, T* const* Y,       \
                                               int64_t p0, int64_t p1) {                                      \
    mix_forward_rows<T>(s, X, W, Y, p0, p1);                                                                   \
  }                                                                                                            \
  NORMLAB_CPU_CLONES void mix_backward_##SUFFIX(const Mix& s, const T* const* X, const T* W, const T* const* dY, \
                                                T* const* dX, T* dW, int64_t p0, int64_t p1) {                 \
    mix_backward_rows<T>(s, X, W, dY, dX, dW, p0, p1);                                                         \
  }                                                                                                            \
  NORMLAB_CPU_CLONES void add_scaled_forward_##SUFFIX(const Scaled& s, const T* const* R, const T* b, const T* y, \
                                                      T* const* out, int64_t p0, int64_t p1) {                 \
    add_scaled_forward_rows<T>(s, R, b, y, out, p0, p1);                                                       \
  }                                                                                                            \
  NORMLAB_CPU_CLONES void add_scaled_backward_##SUFFIX(const Scaled& s, const T* b, const T* y,                \
                                                       const T* const* dOut, T* dy, T* db, int64_t p0, int64_t p1) { \
    add_scaled_backward_rows<T>(s, b, y, dOut, dy, db, p0, p1);                                                \
  }
NORMLAB_STREAM_LOOPS(float, f32)
NORMLAB_STREAM_LOOPS(double, f64)
#undef NORMLAB_STREAM_LOOPS

void mix_forward_loop(const Mix& s, const float* const* X, const float* W, float* const* Y, int64_t p0, int64_t p1) {
  mix_forward_f32(s, X, W, Y, p0, p1);
}
void mix_forward_loop(const Mix& s, const double* const* X, const double* W, double* const* Y, int64_t p0, int64_t p1) {
  mix_forward_f64(s, X, W, Y, p0, p1);
}
void mix_backward_loop(const Mix& s, const float* const* X, const float* W, const float* const* dY, float* const* dX,
                       float* dW, int64_t p0, int64_t p1) {
  mix_backward_f32(s, X, W, dY, dX, dW, p0, p1);
}
void mix_backward_loop(const Mix& s, const double* const* X, const double* W, const double* const* dY, double* const* dX,
                       double* dW, int64_t p0, int64_t p1) {
  mix_backward_f64(s, X, W, dY, dX, dW, p0, p1);
}
void add_scaled_forward_loop(const Scaled& s, const float* const* R, const float* b, const float* y, float* const* out,
                             int64_t p0, int64_t p1) {
  add_scaled_forward_f32(s, R, b, y, out, p0, p1);
}
void add_scaled_forward_loop(const Scaled& s, const double* const* R, const double* b, const double* y, double* const* out,
                             int64_t p0, int64_t p1) {
  add_scaled_forward_f64(s, R, b, y, out, p0, p1);
}
void add_scaled_backward_loop(const Scaled& s, const float* b, const float* y, const float* const* dOut, float* dy,
                              float* db, int64_t p0, int64_t p1) {
  add_scaled_backward_f32(s, b, y, dOut, dy, db, p0, p1);
}
void add_scaled_backward_loop(const Scaled& s, const double* b, const double* y, const double* const* dOut, double* dy,
                              double* db, int64_t p0, int64_t p1) {
  add_scaled_backward_f64(s, b, y, dOut, dy, db, p0, p1);
}

// ---- Sinkhorn, one n x n matrix at a time ----

// c[i, :] = softmax(l[i, :]) + eps (the probabilities also to p when given).
template <class T>
void softmax_rows(const T* l, int64_t n, T eps, T* c, T* p) {
  for (int64_t i = 0; i < n; ++i) {
    const T* li = l + i * n;
    T mx = li[0];
    for (int64_t k = 1; k < n; ++k) mx = std::max(mx, li[k]);
    T sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      c[i * n + k] = std::exp(li[k] - mx);
      sum += c[i * n + k];
    }
    const T inv = T(1) / sum;
    for (int64_t k = 0; k < n; ++k) {
      const T pk = c[i * n + k] * inv;
      if (p) p[i * n + k] = pk;
      c[i * n + k] = pk + eps;
    }
  }
}

// Normalisation k of the sequence: columns first, then rows and columns alternately.
bool by_rows(int64_t k) { return k % 2 == 1; }

// c /= (sum + eps) along rows (each row by its sum) or columns.
template <class T>
void normalise(T* c, int64_t n, T eps, bool rows) {
  for (int64_t a = 0; a < n; ++a) {
    T sum = 0;
    for (int64_t b = 0; b < n; ++b) sum += rows ? c[a * n + b] : c[b * n + a];
    const T den = sum + eps;
    for (int64_t b = 0; b < n; ++b) (rows ? c[a * n + b] : c[b * n + a]) /= den;
  }
}

// g (the gradient of out = in / (sum + eps)) -> the gradient of in, in place.
template <class T>
void normalise_backward(const T* in, T* g, int64_t n, T eps, bool rows) {
  for (int64_t a = 0; a < n; ++a) {
    T sum = 0, gi = 0;
    for (int64_t b = 0; b < n; ++b) {
      const int64_t at = rows ? a * n + b : b * n + a;
      sum += in[at];
      gi += g[at] * in[at];
    }
    const T den = sum + eps, t = gi / den;
    for (int64_t b = 0; b < n; ++b) {
      const int64_t at = rows ? a * n + b : b * n + a;
      g[at] = (g[at] - t) / den;
    }
  }
}

template <class T>
NORMLAB_ALWAYS_INLINE void rms_project_rows(int64_t d, int64_t n, int64_t k, const T* const* X, const T* F, double eps, T* z,
                                            T* r, int64_t p0, int64_t p1) {
  const int64_t nd = n * d;
  for (int64_t p = p0; p < p1; ++p) {
    double ss = 0;
    for (int64_t j = 0; j < n; ++j) ss += dot(X[j] + p * d, X[j] + p * d, d);
    const T rp = static_cast<T>(1.0 / std::sqrt(ss / static_cast<double>(nd) + eps));
    r[p] = rp;
    for (int64_t c = 0; c < k; ++c) {
      double a = 0;
      for (int64_t j = 0; j < n; ++j) a += dot(F + c * nd + j * d, X[j] + p * d, d);
      z[p * k + c] = static_cast<T>(a) * rp;
    }
  }
}

// dF_chunk (k x n*d) += sum over [p0, p1) of r dz_c x; dX written per position.
template <class T>
NORMLAB_ALWAYS_INLINE void rms_project_backward_rows(int64_t d, int64_t n, int64_t k, const T* const* X, const T* F, const T* z,
                                                     const T* r, const T* dz, T* const* dX, T* dF, int64_t p0, int64_t p1) {
  const int64_t nd = n * d;
  for (int64_t p = p0; p < p1; ++p) {
    const T rp = r[p];
    T s = 0;  // sum_c dz_c z_c
    for (int64_t c = 0; c < k; ++c) s += dz[p * k + c] * z[p * k + c];
    const T shrink = s * rp * rp / static_cast<T>(nd);
    for (int64_t j = 0; j < n; ++j) {
      const T* __restrict x = X[j] + p * d;
      if (dX && dX[j]) {
        T* __restrict o = dX[j] + p * d;
        for (int64_t i = 0; i < d; ++i) o[i] = -shrink * x[i];
        for (int64_t c = 0; c < k; ++c) {
          const T w = rp * dz[p * k + c];
          const T* __restrict f = F + c * nd + j * d;
          for (int64_t i = 0; i < d; ++i) o[i] += w * f[i];
        }
      }
      if (dF) {
        for (int64_t c = 0; c < k; ++c) {
          const T w = rp * dz[p * k + c];
          T* __restrict g = dF + c * nd + j * d;
          for (int64_t i = 0; i < d; ++i) g[i] += w * x[i];
        }
      }
    }
  }
}

NORMLAB_CPU_CLONES void rms_project_f32(int64_t d, int64_t n, int64_t k, const float* const* X, const float* F, double eps,
                                        float* z, float* r, int64_t p0, int64_t p1) {
  rms_project_rows(d, n, k, X, F, eps, z, r, p0, p1);
}
NORMLAB_CPU_CLONES void rms_project_f64(int64_t d, int64_t n, int64_t k, const double* const* X, const double* F, double eps,
                                        double* z, double* r, int64_t p0, int64_t p1) {
  rms_project_rows(d, n, k, X, F, eps, z, r, p0, p1);
}
NORMLAB_CPU_CLONES void rms_project_backward_f32(int64_t d, int64_t n, int64_t k, const float* const* X, const float* F,
                                                 const float* z, const float* r, const float* dz, float* const* dX,
                                                 float* dF, int64_t p0, int64_t p1) {
  rms_project_backward_rows(d, n, k, X, F, z, r, dz, dX, dF, p0, p1);
}
NORMLAB_CPU_CLONES void rms_project_backward_f64(int64_t d, int64_t n, int64_t k, const double* const* X, const double* F,
                                                 const double* z, const double* r, const double* dz, double* const* dX,
                                                 double* dF, int64_t p0, int64_t p1) {
  rms_project_backward_rows(d, n, k, X, F, z, r, dz, dX, dF, p0, p1);
}
void rms_project_loop(int64_t d, int64_t n, int64_t k, const float* const* X, const float* F, double eps, float* z, float* r,
                      int64_t p0, int64_t p1) {
  rms_project_f32(d, n, k, X, F, eps, z, r, p0, p1);
}
void rms_project_loop(int64_t d, int64_t n, int64_t k, const double* const* X, const double* F, double eps, double* z,
                      double* r, int64_t p0, int64_t p1) {
  rms_project_f64(d, n, k, X, F, eps, z, r, p0, p1);
}
void rms_project_backward_loop(int64_t d, int64_t n, int64_t k, const float* const* X, const float* F, const float* z,
                               const float* r, const float* dz, float* const* dX, float* dF, int64_t p0, int64_t p1) {
  rms_project_backward_f32(d, n, k, X, F, z, r, dz, dX, dF, p0, p1);
}
void rms_project_backward_loop(int64_t d, int64_t n, int64_t k, const double* const* X, const double* F, const double* z,
                               const double* r, const double* dz, double* const* dX, double* dF, int64_t p0, int64_t p1) {
  rms_project_backward_f64(d, n, k, X, F, z, r, dz, dX, dF, p0, p1);
}

// The weight gradient's position chunks: fixed, so its sum does not depend on the thread count.
constexpr int64_t kWeightChunks = 16;

}  // namespace

template <class T>
void rms_project_forward(int64_t P, int64_t d, int64_t n, int64_t k, const T* const* X, const T* F, double eps, T* z, T* r) {
  at::parallel_for(0, P, grain(n * d * (k + 1)),
                   [&](int64_t p0, int64_t p1) { rms_project_loop(d, n, k, X, F, eps, z, r, p0, p1); });
}

template <class T>
void rms_project_backward(int64_t P, int64_t d, int64_t n, int64_t k, const T* const* X, const T* F, const T* z, const T* r,
                          const T* dz, T* const* dX, T* dF) {
  const int64_t chunks = std::min<int64_t>(kWeightChunks, std::max<int64_t>(P, 1)), fk = k * n * d;
  const int64_t per = (P + chunks - 1) / chunks;
  std::vector<T> partial(dF ? static_cast<size_t>(chunks * fk) : 0, T(0));
  at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t p0 = c * per, p1 = std::min(P, p0 + per);
      if (p0 < p1)
        rms_project_backward_loop(d, n, k, X, F, z, r, dz, dX, dF ? partial.data() + c * fk : nullptr, p0, p1);
    }
  });
  if (dF) {
    std::fill(dF, dF + fk, T(0));
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t i = 0; i < fk; ++i) dF[i] += partial[c * fk + i];
  }
}

template <class T>
void mix_forward(const Mix& s, const T* const* X, const T* W, T* const* Y) {
  at::parallel_for(0, s.P, grain(s.d * (s.n + s.m)), [&](int64_t p0, int64_t p1) { mix_forward_loop(s, X, W, Y, p0, p1); });
}

template <class T>
void mix_backward(const Mix& s, const T* const* X, const T* W, const T* const* dY, T* const* dX, T* dW) {
  at::parallel_for(0, s.P, grain(s.d * 2 * (s.n + s.m)),
                   [&](int64_t p0, int64_t p1) { mix_backward_loop(s, X, W, dY, dX, dW, p0, p1); });
}

template <class T>
void add_scaled_forward(const Scaled& s, const T* const* R, const T* b, const T* y, T* const* out) {
  at::parallel_for(0, s.P, grain(s.d * (2 * s.n + 1)),
                   [&](int64_t p0, int64_t p1) { add_scaled_forward_loop(s, R, b, y, out, p0, p1); });
}

template <class T>
void add_scaled_backward(const Scaled& s, const T* b, const T* y, const T* const* dOut, T* dy, T* db) {
  at::parallel_for(0, s.P, grain(s.d * (s.n + 2)),
                   [&](int64_t p0, int64_t p1) { add_scaled_backward_loop(s, b, y, dOut, dy, db, p0, p1); });
}

template <class T>
void sinkhorn_forward(int64_t P, int64_t n, int64_t iters, double eps, const T* logits, T* C) {
  const T e = static_cast<T>(eps);
  at::parallel_for(0, P, grain(n * n * 2 * iters), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      T* c = C + p * n * n;
      softmax_rows(logits + p * n * n, n, e, c, static_cast<T*>(nullptr));
      for (int64_t k = 0; k < 2 * iters - 1; ++k) normalise(c, n, e, by_rows(k));
    }
  });
}

template <class T>
void sinkhorn_backward(int64_t P, int64_t n, int64_t iters, double eps, const T* logits, const T* dC, T* dlogits) {
  const T e = static_cast<T>(eps);
  const int64_t K = 2 * iters - 1, nn = n * n;
  at::parallel_for(0, P, grain(nn * 4 * iters), [&](int64_t p0, int64_t p1) {
    // prob: the softmax; in[k]: the input of normalisation k.
    std::vector<T> prob(nn), in(static_cast<size_t>(K * nn)), c(nn);
    for (int64_t p = p0; p < p1; ++p) {
      softmax_rows(logits + p * nn, n, e, c.data(), prob.data());
      for (int64_t k = 0; k < K; ++k) {
        std::copy(c.begin(), c.end(), in.begin() + k * nn);
        normalise(c.data(), n, e, by_rows(k));
      }
      T* g = dlogits + p * nn;
      std::copy(dC + p * nn, dC + (p + 1) * nn, g);
      for (int64_t k = K - 1; k >= 0; --k) normalise_backward(in.data() + k * nn, g, n, e, by_rows(k));
      for (int64_t i = 0; i < n; ++i) {  // softmax: dl = p (g - sum_k g_k p_k); the + eps passes g
        T gp = 0;
        for (int64_t k = 0; k < n; ++k) gp += g[i * n + k] * prob[i * n + k];
        for (int64_t k = 0; k < n; ++k) g[i * n + k] = prob[i * n + k] * (g[i * n + k] - gp);
      }
    }
  });
}

#define NORMLAB_INSTANTIATE(T)                                                                                    \
  template void mix_forward<T>(const Mix&, const T* const*, const T*, T* const*);                                \
  template void mix_backward<T>(const Mix&, const T* const*, const T*, const T* const*, T* const*, T*);          \
  template void add_scaled_forward<T>(const Scaled&, const T* const*, const T*, const T*, T* const*);            \
  template void add_scaled_backward<T>(const Scaled&, const T*, const T*, const T* const*, T*, T*);              \
  template void rms_project_forward<T>(int64_t, int64_t, int64_t, int64_t, const T* const*, const T*, double, T*, T*); \
  template void rms_project_backward<T>(int64_t, int64_t, int64_t, int64_t, const T* const*, const T*, const T*,     \
                                        const T*, const T*, T* const*, T*);                                          \
  template void sinkhorn_forward<T>(int64_t, int64_t, int64_t, double, const T*, T*);                            \
  template void sinkhorn_backward<T>(int64_t, int64_t, int64_t, double, const T*, const T*, T*);
NORMLAB_INSTANTIATE(float)
NORMLAB_INSTANTIATE(double)
#undef NORMLAB_INSTANTIATE

}  // namespace normlab::stream_kernels
