// Small 8-lane float helpers (GCC/Clang vector extensions) and the function multi-versioning
// macro for the hand-written CPU kernels of the fast paths (model/attention_kernels.cpp,
// model/norms/cpu_kernels.cpp, train/adamw_kernel.cpp). Included only by such files, which are
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

// exp(x) for 8 lanes, Cephes' expf (range reduction by ln 2, degree-6 polynomial, 2^n through
// the exponent bits): about 1 ulp on [-87, 88]. Inputs are clamped to that range, so inputs
// below -87 give ~1e-38 instead of 0 and callers that need an exact 0 must set it themselves.
NORMLAB_ALWAYS_INLINE F8 exp8(F8 x) {
  const F8 lo = splat(-87.0f), hi = splat(88.0f);
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  const F8 magic = splat(12582912.0f);  // 1.5 * 2^23: adding and subtracting it rounds to integer
  const F8 n = (x * 1.44269504088896341f + magic) - magic;
  const F8 r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  F8 p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const F8 y = p * r * r + r + 1.0f;
  const I8 bits = (__builtin_convertvector(n, I8) + 127) << 23;
  F8 pow2;
  std::memcpy(&pow2, &bits, sizeof pow2);
  return y * pow2;
}

}  // namespace normlab::simd
