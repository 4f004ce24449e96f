// See lanczos_kernel.h.
#include "metrics/lanczos_kernel.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/simd.h"

namespace normlab::lanczos_kernel {
namespace {
using simd::F8;
using simd::kW;

// a . b over n floats, fp32 lanes, the lanes summed in double.
NORMLAB_CPU_CLONES double dot(const float* a, const float* b, int64_t n) {
  F8 acc{};
  int64_t i = 0;
  for (; i + kW <= n; i += kW) acc += simd::load8(a + i) * simd::load8(b + i);
  double s = 0;
  for (int l = 0; l < kW; ++l) s += acc[l];
  for (; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// y -= c x over n floats.
NORMLAB_CPU_CLONES void axpy(float* y, const float* x, float c, int64_t n) {
  const F8 cv = simd::splat(c);
  int64_t i = 0;
  for (; i + kW <= n; i += kW) simd::store8(y + i, simd::load8(y + i) - cv * simd::load8(x + i));
  for (; i < n; ++i) y[i] -= c * x[i];
}

void one_matrix(const float* G, int64_t n, int64_t steps, const float* q0, double* alpha, double* beta) {
  std::vector<float> Q(static_cast<size_t>(steps * n)), w(static_cast<size_t>(n));
  std::copy(q0, q0 + n, Q.begin());
  for (int64_t j = 0; j < steps; ++j) {
    const float* q = Q.data() + j * n;
    for (int64_t r = 0; r < n; ++r) w[r] = static_cast<float>(dot(G + r * n, q, n));
    alpha[j] = dot(w.data(), q, n);
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t t = 0; t <= j; ++t) {
        const float* qt = Q.data() + t * n;
        axpy(w.data(), qt, static_cast<float>(dot(qt, w.data(), n)), n);
      }
    }
    if (j + 1 == steps) break;
    const double b = std::sqrt(dot(w.data(), w.data(), n));
    beta[j] = b;
    const float inv = static_cast<float>(1.0 / std::max(b, 1e-30));
    float* next = Q.data() + (j + 1) * n;
    for (int64_t r = 0; r < n; ++r) next[r] = w[r] * inv;
  }
}
}  // namespace

void tridiagonal(const float* G, int64_t m, int64_t n, int64_t steps, const float* q0, double* alpha, double* beta) {
  at::parallel_for(0, m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k)
      one_matrix(G + k * n * n, n, steps, q0, alpha + k * steps, beta + k * std::max<int64_t>(steps - 1, 1));
  });
}

}  // namespace normlab::lanczos_kernel
