// See gelu_kernel.h for the formula, the erf approximation and the rounding.
#include "model/gelu_kernel.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>

#include "core/simd.h"

namespace normlab::gelu_kernel {
namespace {
using simd::F8;
using simd::I8;
using simd::kW;
using simd::splat;

typedef uint32_t U8 __attribute__((vector_size(32)));
typedef uint16_t H8 __attribute__((vector_size(16)));

// Below this many elements a parallel region costs more than it saves (ATen uses the same value).
constexpr int64_t kGrainElements = 32768;

// bf16 -> fp32: the 16 bits are the top half of the float.
NORMLAB_ALWAYS_INLINE F8 load_bf16(const uint16_t* p) {
  H8 h;
  std::memcpy(&h, p, sizeof h);
  const U8 bits = __builtin_convertvector(h, U8) << 16;
  F8 v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// fp32 -> bf16, round to nearest with ties to even, as LibTorch's .to(kBFloat16) of the same
// floats; NaN becomes the quiet NaN 0x7FC0 (as c10::BFloat16 does; ATen's vectorised casts give
// 0xFFFF, also a NaN).
NORMLAB_ALWAYS_INLINE void store_bf16(uint16_t* p, F8 v) {
  U8 bits;
  std::memcpy(&bits, &v, sizeof bits);
  const U8 rounded = (bits + (0x7FFFu + ((bits >> 16) & 1u))) >> 16;
  const U8 out = v != v ? U8{} + 0x7FC0u : rounded;
  const H8 h = __builtin_convertvector(out, H8);
  std::memcpy(p, &h, sizeof h);
}

constexpr float kSqrtHalf = 0.70710678118654752f;        // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;      // 1 / sqrt(2 pi)

// Phi(x) and exp(-x^2 / 2) for 8 lanes.
NORMLAB_ALWAYS_INLINE void phi_parts(F8 x, F8& Phi, F8& e) {
  const F8 z = (x < 0 ? -x : x) * kSqrtHalf;  // NaN stays NaN
  const F8 t = 1.0f / (z * 0.3275911f + 1.0f);
  F8 poly = splat(1.061405429f);
  poly = poly * t - 1.453152027f;
  poly = poly * t + 1.421413741f;
  poly = poly * t - 0.284496736f;
  poly = poly * t + 0.254829592f;
  poly = poly * t;
  const F8 z2 = z * z;
  e = simd::exp8(-z2);
  e = z2 > 87.0f ? F8{} : e;  // exp8 clamps at -87 (~1e-38); below that exp(-z^2) is 0 in fp32
  const F8 erf_abs = 1.0f - poly * e;
  const F8 half_erf = (x < 0 ? -erf_abs : erf_abs) * 0.5f;
  Phi = half_erf + 0.5f;
}

NORMLAB_ALWAYS_INLINE F8 gelu8(F8 x) {
  F8 Phi, e;
  phi_parts(x, Phi, e);
  return x * Phi;
}

NORMLAB_ALWAYS_INLINE F8 gelu_grad8(F8 x, F8 dy) {
  F8 Phi, e;
  phi_parts(x, Phi, e);
  return dy * (Phi + x * (e * kInvSqrt2Pi));
}

NORMLAB_ALWAYS_INLINE F8 load(const float* p) { return simd::load8(p); }
NORMLAB_ALWAYS_INLINE F8 load(const uint16_t* p) { return load_bf16(p); }
NORMLAB_ALWAYS_INLINE void store(float* p, F8 v) { simd::store8(p, v); }
NORMLAB_ALWAYS_INLINE void store(uint16_t* p, F8 v) { store_bf16(p, v); }

// out = gelu(x) (kGrad false, dy unused) or dy * gelu'(x) (kGrad true) over n elements of E
// (float or bf16 bits): full vectors, then the tail through zero-padded vectors.
template <bool kGrad, class E>
NORMLAB_ALWAYS_INLINE void gelu_range(const E* x, const E* dy, E* out, int64_t n) {
  auto one = [](const E* xp, const E* gp, E* op) {
    if constexpr (kGrad) store(op, gelu_grad8(load(xp), load(gp)));
    else store(op, gelu8(load(xp)));
  };
  int64_t i = 0;
  for (; i + kW <= n; i += kW) one(x + i, kGrad ? dy + i : nullptr, out + i);
  if (i < n) {
    E in[kW] = {}, g[kW] = {}, o[kW];
    std::copy(x + i, x + n, in);
    if (kGrad) std::copy(dy + i, dy + n, g);
    one(in, g, o);
    std::copy(o, o + (n - i), out + i);
  }
}

// One multi-versioned function per entry point (core/simd.h).
NORMLAB_CPU_CLONES void fwd_bf16_range(const uint16_t* x, uint16_t* y, int64_t n) { gelu_range<false>(x, x, y, n); }
NORMLAB_CPU_CLONES void bwd_bf16_range(const uint16_t* x, const uint16_t* dy, uint16_t* dx, int64_t n) {
  gelu_range<true>(x, dy, dx, n);
}
NORMLAB_CPU_CLONES void fwd_f32_range(const float* x, float* y, int64_t n) { gelu_range<false>(x, x, y, n); }
NORMLAB_CPU_CLONES void bwd_f32_range(const float* x, const float* dy, float* dx, int64_t n) {
  gelu_range<true>(x, dy, dx, n);
}

}  // namespace

void forward_bf16(const uint16_t* x, uint16_t* y, int64_t n) {
  at::parallel_for(0, n, kGrainElements, [&](int64_t b, int64_t e) { fwd_bf16_range(x + b, y + b, e - b); });
}

void backward_bf16(const uint16_t* x, const uint16_t* dy, uint16_t* dx, int64_t n) {
  at::parallel_for(0, n, kGrainElements,
                   [&](int64_t b, int64_t e) { bwd_bf16_range(x + b, dy + b, dx + b, e - b); });
}

void forward_f32(const float* x, float* y, int64_t n) {
  at::parallel_for(0, n, kGrainElements, [&](int64_t b, int64_t e) { fwd_f32_range(x + b, y + b, e - b); });
}

void backward_f32(const float* x, const float* dy, float* dx, int64_t n) {
  at::parallel_for(0, n, kGrainElements,
                   [&](int64_t b, int64_t e) { bwd_f32_range(x + b, dy + b, dx + b, e - b); });
}

}  // namespace normlab::gelu_kernel
