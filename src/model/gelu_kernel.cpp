// See gelu_kernel.h for the formula, the erf approximation and the rounding.
#include "model/gelu_kernel.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>

#include "core/simd.h"

namespace normlab::gelu_kernel {
namespace {
using simd::F16;
using simd::F8;

typedef uint32_t U8 __attribute__((vector_size(32)));
typedef uint16_t H8 __attribute__((vector_size(16)));
typedef uint32_t U16 __attribute__((vector_size(64)));
typedef uint16_t H16 __attribute__((vector_size(32)));

// The vector types of one width: 8 lanes (AVX2 or SSE) or 16 (AVX-512).
template <class V> struct Lanes;
template <> struct Lanes<F8> {
  using U = U8;
  using H = H8;
  static constexpr int64_t n = 8;
};
template <> struct Lanes<F16> {
  using U = U16;
  using H = H16;
  static constexpr int64_t n = 16;
};

// The AVX-512 entry points: compiled for AVX-512 and called only where the CPU has it.
#if defined(__x86_64__) && defined(__GNUC__)
#define NORMLAB_GELU_AVX512 1
#define NORMLAB_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#endif

// Below this many elements a parallel region costs more than it saves (ATen uses the same value).
constexpr int64_t kGrainElements = 32768;

template <class V>
NORMLAB_ALWAYS_INLINE V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);  // unaligned load
  return v;
}

// bf16 -> fp32: the 16 bits are the top half of the float.
template <class V>
NORMLAB_ALWAYS_INLINE V load(const uint16_t* p) {
  typename Lanes<V>::H h;
  std::memcpy(&h, p, sizeof h);
  const typename Lanes<V>::U bits = __builtin_convertvector(h, typename Lanes<V>::U) << 16;
  V v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

template <class V>
NORMLAB_ALWAYS_INLINE void store(float* p, V v) {
  std::memcpy(p, &v, sizeof v);
}

// fp32 -> bf16, round to nearest with ties to even, as LibTorch's .to(kBFloat16) of the same
// floats; NaN becomes the quiet NaN 0x7FC0 (as c10::BFloat16 does; ATen's vectorised casts give
// 0xFFFF, also a NaN).
template <class V>
NORMLAB_ALWAYS_INLINE void store(uint16_t* p, V v) {
  using U = typename Lanes<V>::U;
  U bits;
  std::memcpy(&bits, &v, sizeof bits);
  const U rounded = (bits + (0x7FFFu + ((bits >> 16) & 1u))) >> 16;
  const U out = v != v ? U{} + 0x7FC0u : rounded;
  const typename Lanes<V>::H h = __builtin_convertvector(out, typename Lanes<V>::H);
  std::memcpy(p, &h, sizeof h);
}

constexpr float kSqrtHalf = 0.70710678118654752f;        // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;      // 1 / sqrt(2 pi)

// Phi(x) and exp(-x^2 / 2) lane by lane.
template <class V>
NORMLAB_ALWAYS_INLINE void phi_parts(V x, V& Phi, V& e) {
  const V z = (x < 0 ? -x : x) * kSqrtHalf;  // NaN stays NaN
  const V t = 1.0f / (z * 0.3275911f + 1.0f);
  V poly = 1.061405429f - V{};
  poly = poly * t - 1.453152027f;
  poly = poly * t + 1.421413741f;
  poly = poly * t - 0.284496736f;
  poly = poly * t + 0.254829592f;
  poly = poly * t;
  const V z2 = z * z;
  e = simd::expv(-z2);
  e = z2 > 87.0f ? V{} : e;  // expv clamps at -87 (~1e-38); below that exp(-z^2) is 0 in fp32
  const V erf_abs = 1.0f - poly * e;
  const V half_erf = (x < 0 ? -erf_abs : erf_abs) * 0.5f;
  Phi = half_erf + 0.5f;
}

// out = gelu(x) (kGrad false, dy unused) or dy * gelu'(x) (kGrad true) over n elements of E
// (float or bf16 bits) in vectors V: full vectors, then the tail through zero-padded vectors.
template <bool kGrad, class V, class E>
NORMLAB_ALWAYS_INLINE void gelu_range(const E* x, const E* dy, E* out, int64_t n) {
  constexpr int64_t kW = Lanes<V>::n;
  auto one = [](const E* xp, const E* gp, E* op) {
    V Phi, e;
    const V xv = load<V>(xp);
    phi_parts(xv, Phi, e);
    if constexpr (kGrad) store(op, load<V>(gp) * (Phi + xv * (e * kInvSqrt2Pi)));
    else store(op, xv * Phi);
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

// One multi-versioned function per entry point (core/simd.h), and a 16-lane one for AVX-512.
template <bool kGrad, class E>
NORMLAB_CPU_CLONES void range8(const E* x, const E* dy, E* out, int64_t n) {
  gelu_range<kGrad, F8>(x, dy, out, n);
}

#ifdef NORMLAB_GELU_AVX512
template <bool kGrad, class E>
NORMLAB_AVX512_TARGET void range16(const E* x, const E* dy, E* out, int64_t n) {
  gelu_range<kGrad, F16>(x, dy, out, n);
}

bool have_avx512() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return ok;
}
#endif

template <bool kGrad, class E>
void run(const E* x, const E* dy, E* out, int64_t n) {
  at::parallel_for(0, n, kGrainElements, [&](int64_t b, int64_t e) {
#ifdef NORMLAB_GELU_AVX512
    if (have_avx512()) return range16<kGrad>(x + b, dy + b, out + b, e - b);
#endif
    range8<kGrad>(x + b, dy + b, out + b, e - b);
  });
}

}  // namespace

void forward_bf16(const uint16_t* x, uint16_t* y, int64_t n) { run<false>(x, x, y, n); }

void backward_bf16(const uint16_t* x, const uint16_t* dy, uint16_t* dx, int64_t n) { run<true>(x, dy, dx, n); }

void forward_f32(const float* x, float* y, int64_t n) { run<false>(x, x, y, n); }

void backward_f32(const float* x, const float* dy, float* dx, int64_t n) { run<true>(x, dy, dx, n); }

}  // namespace normlab::gelu_kernel
