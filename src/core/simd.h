// Small 8-lane float helpers (GCC/Clang vector extensions) and the function multi-versioning
// macro for the hand-written CPU kernels of the fast paths (model/attention_kernels*.cpp,
// model/norms/cpu_kernels.cpp, optim/adamw_kernel.cpp). Included only by such files, which are
// compiled outside the precompiled LibTorch header and with -fopenmp.
//
// The build targets baseline x86-64, while LibTorch's own kernels pick AVX2 at run time. To
// compete on equal terms the hot loops are compiled twice, for x86-64-v3 (AVX2 + FMA) and for
// the baseline, and the loader picks one per CPU (GCC function multi-versioning); an F8 is one
// AVX2 register there and two SSE halves in the baseline clone.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define NORMLAB_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define NORMLAB_CPU_CLONES
#endif
#define NORMLAB_ALWAYS_INLINE inline __attribute__((always_inline))

namespace normlab::simd {

typedef float F8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));
constexpr int64_t kW = 8;

NORMLAB_ALWAYS_INLINE F8 load8(const float* p) {
  F8 v;
  std::memcpy(&v, p, sizeof v);  // unaligned load
  return v;
}
NORMLAB_ALWAYS_INLINE void store8(float* p, F8 v) { std::memcpy(p, &v, sizeof v); }
// A scalar operand of a vector operation is broadcast (vbroadcastss); spelling the vector out
// element by element instead makes GCC 12 build it with a chain of inserts.
NORMLAB_ALWAYS_INLINE F8 splat(float x) { return x - F8{}; }
NORMLAB_ALWAYS_INLINE float hsum(F8 v) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}
NORMLAB_ALWAYS_INLINE float hmax(F8 v) {
  float m = v[0];
  for (int i = 1; i < 8; ++i) m = std::max(m, v[i]);
  return m;
}

// 16-lane twins for code compiled for AVX-512 (a function with an AVX-512 target attribute): the
// same operations per lane as the 8-lane ones, so each lane's result is the same function.
typedef float F16 __attribute__((vector_size(64)));
typedef int32_t I16 __attribute__((vector_size(64)));
NORMLAB_ALWAYS_INLINE float hsum(F16 v) {
  F8 lo, hi;
  std::memcpy(&lo, &v, sizeof lo);
  std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
  return hsum(lo) + hsum(hi);
}
NORMLAB_ALWAYS_INLINE float hmax(F16 v) {
  float m = v[0];
  for (int i = 1; i < 16; ++i) m = std::max(m, v[i]);
  return m;
}
// Unaligned load and store of one vector of either width.
template <class V>
NORMLAB_ALWAYS_INLINE V loadv(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
NORMLAB_ALWAYS_INLINE void storev(float* p, V v) {
  std::memcpy(p, &v, sizeof v);
}
template <class V> struct IntVec;
template <> struct IntVec<F8> { using type = I8; };
template <> struct IntVec<F16> { using type = I16; };

// exp(x) lane by lane, Cephes' expf (range reduction by ln 2, degree-6 polynomial, 2^n through
// the exponent bits): about 1 ulp on [-87, 88]. Inputs are clamped to that range, so inputs
// below -87 give ~1e-38 instead of 0 and callers that need an exact 0 must set it themselves.
template <class V>
NORMLAB_ALWAYS_INLINE V expv(V x) {
  using IV = typename IntVec<V>::type;
  const V lo = -87.0f - V{}, hi = 88.0f - V{};
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  const V magic = 12582912.0f - V{};  // 1.5 * 2^23: adding and subtracting it rounds to integer
  const V n = (x * 1.44269504088896341f + magic) - magic;
  const V r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  V p = 1.9875691500e-4f - V{};
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const V y = p * r * r + r + 1.0f;
  const IV bits = (__builtin_convertvector(n, IV) + 127) << 23;
  V pow2;
  std::memcpy(&pow2, &bits, sizeof pow2);
  return y * pow2;
}
NORMLAB_ALWAYS_INLINE F8 exp8(F8 x) { return expv(x); }

}  // namespace normlab::simd
