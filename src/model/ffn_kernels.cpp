// GELU kernels for the FFN fast path; see ffn_kernels.h.
#include "model/ffn_kernels.h"

#include <ATen/Parallel.h>

#include "model/simd.h"

namespace normlab::ffn_kernels {
namespace {

using namespace simd;

// Below this many elements a parallel region costs more than it saves (ATen's grain size).
constexpr int64_t kGrain = 32768;

// Phi(x) and phi(x) for 8 lanes. With a = |x| / sqrt(2), A&S 7.1.26 gives
// erfc(a) = t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-a^2), t = 1 / (1 + p a), so
// Phi(x) = 1 - erfc(a) / 2 for x >= 0 and erfc(a) / 2 for x < 0: the small side of the cdf is
// the product itself, never 1 minus something close to 1.
NORMLAB_ALWAYS_INLINE void cdf_pdf(F8 x, F8* cdf, F8* pdf) {
  const F8 z = x * 0.70710678118654752f;
  const F8 a = z < 0.0f ? -z : z;
  const F8 t = 1.0f / (a * 0.3275911f + 1.0f);
  F8 poly = t * 1.061405429f - 1.453152027f;
  poly = poly * t + 1.421413741f;
  poly = poly * t - 0.284496736f;
  poly = poly * t + 0.254829592f;
  poly = poly * t;
  const F8 e = exp8(-(a * a));  // exp(-x^2 / 2)
  const F8 half_tail = 0.5f * poly * e;
  *cdf = x < 0.0f ? half_tail : 1.0f - half_tail;
  *pdf = e * 0.39894228040143268f;  // 1 / sqrt(2 pi)
}

NORMLAB_CPU_CLONES
void forward_range(const float* __restrict x, float* __restrict y, int64_t n) {
  int64_t i = 0;
  for (; i + kW <= n; i += kW) {
    F8 cdf, pdf;
    const F8 v = load8(x + i);
    cdf_pdf(v, &cdf, &pdf);
    store8(y + i, v * cdf);
  }
  if (i < n) {  // tail: through a zero-padded vector
    float buf[kW] = {}, out[kW];
    std::copy(x + i, x + n, buf);
    F8 cdf, pdf;
    const F8 v = load8(buf);
    cdf_pdf(v, &cdf, &pdf);
    store8(out, v * cdf);
    std::copy(out, out + (n - i), y + i);
  }
}

NORMLAB_CPU_CLONES
void backward_range(const float* __restrict g, const float* __restrict x, float* __restrict dx,
                    int64_t n) {
  int64_t i = 0;
  for (; i + kW <= n; i += kW) {
    F8 cdf, pdf;
    const F8 v = load8(x + i);
    cdf_pdf(v, &cdf, &pdf);
    store8(dx + i, load8(g + i) * (cdf + v * pdf));
  }
  if (i < n) {
    float gb[kW] = {}, xb[kW] = {}, out[kW];
    std::copy(g + i, g + n, gb);
    std::copy(x + i, x + n, xb);
    F8 cdf, pdf;
    const F8 v = load8(xb);
    cdf_pdf(v, &cdf, &pdf);
    store8(out, load8(gb) * (cdf + v * pdf));
    std::copy(out, out + (n - i), dx + i);
  }
}

// Chunks start at multiples of 8 so that only the last one has a tail.
template <typename Body>
void for_each_chunk(int64_t n, const Body& body) {
  const int64_t vectors = (n + kW - 1) / kW;
  at::parallel_for(0, vectors, kGrain / kW, [&](int64_t v0, int64_t v1) {
    const int64_t begin = v0 * kW, end = std::min(n, v1 * kW);
    body(begin, end - begin);
  });
}

}  // namespace

void gelu_forward(const float* x, float* y, int64_t n) {
  for_each_chunk(n, [&](int64_t begin, int64_t len) { forward_range(x + begin, y + begin, len); });
}

void gelu_backward(const float* g, const float* x, float* dx, int64_t n) {
  for_each_chunk(n, [&](int64_t begin, int64_t len) {
    backward_range(g + begin, x + begin, dx + begin, len);
  });
}

}  // namespace normlab::ffn_kernels
