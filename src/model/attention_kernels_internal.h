// Internal to the attention kernels, shared by their three files: attention_kernels.cpp (fp32,
// any CPU), attention_kernels_bf16.cpp (AVX512-BF16) and attention_kernels_amx.cpp (AMX-BF16). The
// target attributes, shared constants, the fp32 row templates, and the bf16 helpers and AMX entry
// points one file calls in another. Included only by those three (CMakeLists.txt: -fopenmp, no PCH).
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/simd.h"
#include "model/attention_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define NORMLAB_BF16_KERNEL 1
// The bf16 loops are compiled for AVX512-BF16 only and called only where the CPU has it.
#define NORMLAB_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
// The AMX tile loops (matrix products of 16-row tiles), on CPUs with AMX-BF16 only.
#define NORMLAB_AMX_TARGET \
  __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#endif

namespace normlab::attention_kernels::detail {

using namespace simd;

// Score entries past the causal edge inside the last vector: finite (so 0 * pad stays 0) and
// far below any real score.
constexpr float kPad = -1e30f;

inline int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Keys per block of the backward. Its P and dS panels, (T4 - j0) x kKeys floats each, stay in a
// core's L2 cache where the whole (T, T) matrices did not: measured on the 2-core machine (one
// thread, B=2 T=1024 H=12 dh=64, the GPT-2-small shape) the backward went from 291-329 ms to
// 203-221 ms; at T = 256 it is the same within noise. For T <= kKeys there is one block and the
// arithmetic, and so every bit of the result, is the unblocked kernel's (the default config's
// T = 128 trains bit for bit as before).
constexpr int64_t kKeys = 128;

// Softmax of one causal row in place: s[0, n) holds scores, s[n, n8) is set to the pad (which
// may span whole vectors: the bf16 kernels round n up to 16). n8 is a multiple of the lanes of V.
// p[j] = exp(s[j] - m) for j < n, 0 after; returns m (the row max) and sets *sum = sum_j p[j].
// With want_entropy, *plogit = sum_j p[j] * (s[j] - m). The row helpers are templates over the
// vector width: 8 lanes in the fp32 kernel's multi-versioned functions, 16 inlined into the
// AVX-512 bf16 loops (the same operations per lane).
template <class V>
NORMLAB_ALWAYS_INLINE float softmax_row_v(float* __restrict s, int64_t n, int64_t n8, float* __restrict p, float* sum,
                                          float* plogit) {
  constexpr int64_t kV = sizeof(V) / sizeof(float);
  for (int64_t j = n; j < n8; ++j) s[j] = kPad;
  V mv = kPad - V{};
  for (int64_t j = 0; j < n8; j += kV) {
    const V x = loadv<V>(s + j);
    mv = x > mv ? x : mv;
  }
  const float m = hmax(mv);
  const V ms = m - V{};
  V acc = {}, pl = {};
  for (int64_t j = 0; j < n8; j += kV) {
    const V z = loadv<V>(s + j) - ms;
    V e = expv(z);
    if (j + kV > n) {
      for (int64_t t = std::max<int64_t>(n - j, 0); t < kV; ++t) e[t] = 0.0f;
    }
    storev(p + j, e);
    acc += e;
    pl += e * z;
  }
  *sum = hsum(acc);
  if (plogit) *plogit = hsum(pl);
  return m;
}

// p[j] = exp(s[j] - lse) for j < n, 0 in [n, n8) (whole vectors of it in the bf16 kernels).
template <class V>
NORMLAB_ALWAYS_INLINE void probs_row_v(const float* __restrict s, int64_t n, int64_t n8, float lse, float* __restrict p) {
  constexpr int64_t kV = sizeof(V) / sizeof(float);
  const V l = lse - V{};
  for (int64_t j = 0; j < n8; j += kV) {
    V e = expv(loadv<V>(s + j) - l);
    if (j + kV > n) {
      for (int64_t t = std::max<int64_t>(n - j, 0); t < kV; ++t) e[t] = 0.0f;
    }
    storev(p + j, e);
  }
}

// ds[j] = p[j] * (dp[j] - D) over [0, n8) (p is 0 in the pad, so ds is too).
template <class V>
NORMLAB_ALWAYS_INLINE void dscores_row_v(const float* __restrict p, const float* __restrict dp, float D, int64_t n8,
                                         float* __restrict ds) {
  constexpr int64_t kV = sizeof(V) / sizeof(float);
  const V d = D - V{};
  for (int64_t j = 0; j < n8; j += kV) storev(ds + j, loadv<V>(p + j) * (loadv<V>(dp + j) - d));
}

#ifdef NORMLAB_BF16_KERNEL
constexpr int64_t kL = 16;  // fp32 lanes of one zmm register

// The bf16 helpers the vdpbf16ps loops and the AMX loops both call, defined in
// attention_kernels_bf16.cpp (where their comments and the c-pair / r-pair layouts are).
NORMLAB_BF16_TARGET void store_bf16(const float* src, int64_t n, uint16_t* dst);
NORMLAB_BF16_TARGET float softmax_row16(float* __restrict s, int64_t n, int64_t n16, float* __restrict p, float* sum,
                                        float* plogit);
NORMLAB_BF16_TARGET void probs_row16(const float* __restrict s, int64_t n, int64_t n16, float lse, float* __restrict p);
NORMLAB_BF16_TARGET void dscores_row16(const float* __restrict p, const float* __restrict dp, float D, int64_t n16,
                                       float* __restrict ds);
NORMLAB_BF16_TARGET
void pack_cpairs(const uint16_t* src, int64_t stride, int64_t T, int64_t dh, int64_t ld, uint32_t* dst);
NORMLAB_BF16_TARGET
void pack_rpairs(const uint16_t* src, int64_t stride, int64_t T, int64_t dh, int64_t n2, uint32_t* dst);
NORMLAB_BF16_TARGET float dot_bf16(const uint16_t* a, const uint16_t* b, int64_t dh);
NORMLAB_BF16_TARGET
void store_column_pairs(const float* row0, const float* row1, int64_t n16, int64_t width, uint32_t* panel);

// The AMX loops, defined in attention_kernels_amx.cpp: use_amx(dh) says whether the bf16 entry
// points hand their call to forward_amx / backward_amx (same arguments as theirs).
bool use_amx(int64_t dh);
void forward_amx(const Shape& sh, const uint16_t* q, Strides qs, const uint16_t* k, Strides ks, const uint16_t* v,
                 Strides vs, uint16_t* o, float* lse, double* stats);
void backward_amx(const Shape& sh, const uint16_t* q, Strides qs, const uint16_t* k, Strides ks, const uint16_t* v,
                  Strides vs, const uint16_t* o, const float* lse, const uint16_t* d_o, uint16_t* dq, uint16_t* dk,
                  uint16_t* dv);
#endif

}  // namespace normlab::attention_kernels::detail
