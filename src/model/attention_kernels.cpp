// Fused causal attention kernels; see attention_kernels.h for the contract.
#include "model/attention_kernels.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/simd.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define NORMLAB_BF16_KERNEL 1
// The bf16 loops are compiled for AVX512-BF16 only and called only where the CPU has it.
#define NORMLAB_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
// The AMX tile loops (matrix products of 16-row tiles), on CPUs with AMX-BF16 only.
#define NORMLAB_AMX_TARGET \
  __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#endif

namespace normlab::attention_kernels {
namespace {

using namespace simd;

// Score entries past the causal edge inside the last vector: finite (so 0 * pad stays 0) and
// far below any real score.
constexpr float kPad = -1e30f;

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Query rows are processed in tiles of kRows: every value loaded from the transposed keys (or
// from a row of v) feeds kRows independent accumulator chains, enough to keep both FMA ports
// busy instead of waiting on one chain's latency.
constexpr int64_t kRows = 4;

// s_r[j] = scale * sum_c a_r[c] * bt[c * ld + j] for r < kRows, j in [0, n8): a tile of scores
// (query rows against transposed keys, or do rows against transposed values). Vectorised along
// j, two vectors at a time: 8 accumulators, no horizontal sums.
NORMLAB_CPU_CLONES
void dot_tile(const float* const* a, const float* __restrict bt, int64_t ld, int64_t dh, int64_t n8,
              float scale, float* const* s) {
  int64_t j = 0;
  for (; j + 2 * kW <= n8; j += 2 * kW) {
    F8 acc[kRows][2] = {};
    for (int64_t c = 0; c < dh; ++c) {
      const F8 b0 = load8(bt + c * ld + j), b1 = load8(bt + c * ld + j + kW);
      for (int r = 0; r < kRows; ++r) {
        const float ar = a[r][c];
        acc[r][0] += ar * b0;
        acc[r][1] += ar * b1;
      }
    }
    for (int r = 0; r < kRows; ++r) {
      store8(s[r] + j, acc[r][0] * scale);
      store8(s[r] + j + kW, acc[r][1] * scale);
    }
  }
  if (j < n8) {
    F8 acc[kRows] = {};
    for (int64_t c = 0; c < dh; ++c) {
      const F8 b0 = load8(bt + c * ld + j);
      for (int r = 0; r < kRows; ++r) acc[r] += a[r][c] * b0;
    }
    for (int r = 0; r < kRows; ++r) store8(s[r] + j, acc[r] * scale);
  }
}

// out_r[c] = scale_r * sum_{i in [lo, hi)} w[r * w_row + i * w_idx] * rows[i * rstride + c] for
// r < kRows, c < dh: weighted sums of rows (p v, dS k, and with w_row = 1, w_idx = ld the
// column sums P^T do and dS^T q), 2 vectors of c at a time, 8 accumulators.
// With accumulate, out_r[c] += instead of =.
NORMLAB_CPU_CLONES
void weighted_tile(const float* __restrict w, int64_t w_row, int64_t w_idx,
                   const float* __restrict rows, int64_t rstride, int64_t lo, int64_t hi,
                   int64_t dh, const float* scale, float* const* out, bool accumulate = false) {
  int64_t c = 0;
  for (; c + 2 * kW <= dh; c += 2 * kW) {
    F8 acc[kRows][2] = {};
    for (int64_t i = lo; i < hi; ++i) {
      const float* row = rows + i * rstride + c;
      const F8 v0 = load8(row), v1 = load8(row + kW);
      for (int r = 0; r < kRows; ++r) {
        const float wr = w[r * w_row + i * w_idx];
        acc[r][0] += wr * v0;
        acc[r][1] += wr * v1;
      }
    }
    for (int r = 0; r < kRows; ++r) {
      F8 r0 = acc[r][0] * scale[r], r1 = acc[r][1] * scale[r];
      if (accumulate) {
        r0 += load8(out[r] + c);
        r1 += load8(out[r] + c + kW);
      }
      store8(out[r] + c, r0);
      store8(out[r] + c + kW, r1);
    }
  }
  if (c < dh) {
    F8 acc[kRows] = {};
    for (int64_t i = lo; i < hi; ++i) {
      const F8 v0 = load8(rows + i * rstride + c);
      for (int r = 0; r < kRows; ++r) acc[r] += w[r * w_row + i * w_idx] * v0;
    }
    for (int r = 0; r < kRows; ++r)
      store8(out[r] + c, accumulate ? load8(out[r] + c) + acc[r] * scale[r] : acc[r] * scale[r]);
  }
}

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

NORMLAB_CPU_CLONES
float softmax_row(float* __restrict s, int64_t n, int64_t n8, float* __restrict p, float* sum, float* plogit) {
  return softmax_row_v<F8>(s, n, n8, p, sum, plogit);
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

NORMLAB_CPU_CLONES
void probs_row(const float* __restrict s, int64_t n, int64_t n8, float lse, float* __restrict p) {
  probs_row_v<F8>(s, n, n8, lse, p);
}

// ds[j] = p[j] * (dp[j] - D) over [0, n8) (p is 0 in the pad, so ds is too).
template <class V>
NORMLAB_ALWAYS_INLINE void dscores_row_v(const float* __restrict p, const float* __restrict dp, float D, int64_t n8,
                                         float* __restrict ds) {
  constexpr int64_t kV = sizeof(V) / sizeof(float);
  const V d = D - V{};
  for (int64_t j = 0; j < n8; j += kV) storev(ds + j, loadv<V>(p + j) * (loadv<V>(dp + j) - d));
}

NORMLAB_CPU_CLONES
void dscores_row(const float* __restrict p, const float* __restrict dp, float D, int64_t n8, float* __restrict ds) {
  dscores_row_v<F8>(p, dp, D, n8, ds);
}

// Transposes T rows of dh contiguous floats (row stride `stride`) into bt[c * ld + j], zeroing
// the columns [T, ld).
void transpose_rows(const float* src, int64_t stride, int64_t T, int64_t dh, int64_t ld,
                    float* bt) {
  for (int64_t c = 0; c < dh; ++c) std::fill(bt + c * ld + T, bt + (c + 1) * ld, 0.0f);
  for (int64_t j = 0; j < T; ++j) {
    const float* row = src + j * stride;
    for (int64_t c = 0; c < dh; ++c) bt[c * ld + j] = row[c];
  }
}

float dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t c = 0; c < n; ++c) s += static_cast<double>(a[c]) * b[c];
  return static_cast<float>(s);
}

}  // namespace

void causal_attention_forward(const Shape& sh, const float* q, Strides qs, const float* k,
                              Strides ks, const float* v, Strides vs, float* o, float* lse,
                              double* stats) {
  const int64_t B = sh.B, T = sh.T, H = sh.H, dh = sh.dh, T8 = round_up(T, kW);
  const float scale = static_cast<float>(sh.scale);
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    // Scores and probabilities of one tile of query rows; a dummy output row for the tile rows
    // past T (they repeat the last real row's input, their results are dropped).
    std::vector<float> kt(dh * T8), s(kRows * T8), p(kRows * T8), dummy(dh);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / H, h = task % H;
      const float* qb = q + b * qs.b + h * qs.h;
      const float* vb = v + b * vs.b + h * vs.h;
      transpose_rows(k + b * ks.b + h * ks.h, ks.t, T, dh, T8, kt.data());
      double entropy = 0, sink = 0;
      float smax = -INFINITY;
      for (int64_t i0 = 0; i0 < T; i0 += kRows) {
        const int64_t rows = std::min(kRows, T - i0), N = i0 + rows, N8 = round_up(N, kW);
        const float* a[kRows];
        float *srow[kRows], *prow[kRows], *orow[kRows];
        float inv_sum[kRows];
        for (int r = 0; r < kRows; ++r) {
          const int64_t i = i0 + std::min<int64_t>(r, rows - 1);
          a[r] = qb + i * qs.t;
          srow[r] = s.data() + r * T8;
          prow[r] = p.data() + r * T8;
          orow[r] = r < rows ? o + ((b * T + i) * H + h) * dh : dummy.data();
        }
        dot_tile(a, kt.data(), T8, dh, N8, scale, srow);
        for (int r = 0; r < kRows; ++r) {
          const int64_t n = std::min(i0 + r, N - 1) + 1;  // keys 0 .. i visible to row i
          float sum = 0, plogit = 0;
          const float m = softmax_row(srow[r], n, N8, prow[r], &sum, stats ? &plogit : nullptr);
          inv_sum[r] = 1.0f / sum;
          if (r >= rows) continue;
          lse[(b * H + h) * T + i0 + r] = m + std::log(sum);
          if (stats) {
            // -sum p log p with p = e / sum and log p = (s - m) - log(sum)
            entropy += std::log(static_cast<double>(sum)) - static_cast<double>(plogit) / sum;
            smax = std::max(smax, m);
            if (i0 + r >= 1) sink += static_cast<double>(prow[r][0]) / sum;  // p(i -> 0)
          }
        }
        weighted_tile(p.data(), T8, 1, vb, vs.t, 0, N, dh, inv_sum, orow);
      }
      if (stats) {
        stats[3 * task] = entropy;
        stats[3 * task + 1] = smax;
        stats[3 * task + 2] = sink;
      }
    }
  });
}

// Keys per block of the backward. Its P and dS panels, (T4 - j0) x kKeys floats each, stay in a
// core's L2 cache where the whole (T, T) matrices did not: measured on the 2-core machine (one
// thread, B=2 T=1024 H=12 dh=64, the GPT-2-small shape) the backward went from 291-329 ms to
// 203-221 ms; at T = 256 it is the same within noise. For T <= kKeys there is one block and the
// arithmetic, and so every bit of the result, is the unblocked kernel's (the default config's
// T = 128 trains bit for bit as before).
constexpr int64_t kKeys = 128;

void causal_attention_backward(const Shape& sh, const float* q, Strides qs, const float* k,
                               Strides ks, const float* v, Strides vs, const float* o,
                               const float* lse, const float* d_o, float* dq, float* dk,
                               float* dv) {
  const int64_t B = sh.B, T = sh.T, H = sh.H, dh = sh.dh, T8 = round_up(T, kW);
  const int64_t T4 = round_up(T, kRows);
  const float scale = static_cast<float>(sh.scale);
  float scales[kRows];
  std::fill(scales, scales + kRows, scale);
  float ones[kRows];
  std::fill(ones, ones + kRows, 1.0f);
  const int64_t row = H * dh;  // stride between time steps of the contiguous (B, T, H, dh) tensors
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    // Per key block [j0, j1): panels of P and dS for the query rows i in [j0, T4) that see it,
    // row i - j0 holding the block's columns [0, n8) of its tile, zero past the causal edge (a
    // column tile reads no further for a real key); rows past T are zero so that a tile of rows
    // or columns never reads out of bounds.
    std::vector<float> kt(dh * T8), vt(dh * T8), s(kRows * kKeys), dp(kRows * kKeys);
    std::vector<float> P(T4 * kKeys), dS(T4 * kKeys), D(T), dummy(dh);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / H, h = task % H;
      const float* qb = q + b * qs.b + h * qs.h;
      const float* kb = k + b * ks.b + h * ks.h;
      const float* lseb = lse + (b * H + h) * T;
      const int64_t base = b * T * row + h * dh;  // (b, 0, h, 0) in the contiguous tensors
      transpose_rows(kb, ks.t, T, dh, T8, kt.data());
      transpose_rows(v + b * vs.b + h * vs.h, vs.t, T, dh, T8, vt.data());
      // D_i = sum_j P_ij dP_ij = do_i . o_i
      for (int64_t i = 0; i < T; ++i) D[i] = dot(d_o + base + i * row, o + base + i * row, dh);
      for (int64_t j0 = 0; j0 < T; j0 += kKeys) {
        const int64_t j1 = std::min(T, j0 + kKeys);
        for (int64_t i0 = j0; i0 < T; i0 += kRows) {
          const int64_t rows = std::min(kRows, T - i0), N = i0 + rows;
          const int64_t n8 = round_up(std::min(N, j1) - j0, kW);  // block columns this tile computes
          const float *a[kRows], *g[kRows];
          float *srow[kRows], *dprow[kRows], *dqrow[kRows];
          for (int r = 0; r < kRows; ++r) {
            const int64_t i = i0 + std::min<int64_t>(r, rows - 1);
            a[r] = qb + i * qs.t;
            g[r] = d_o + base + i * row;
            srow[r] = s.data() + r * kKeys;
            dprow[r] = dp.data() + r * kKeys;
            dqrow[r] = r < rows ? dq + base + i * row : dummy.data();
          }
          dot_tile(a, kt.data() + j0, T8, dh, n8, scale, srow);
          dot_tile(g, vt.data() + j0, T8, dh, n8, 1.0f, dprow);
          for (int r = 0; r < kRows; ++r) {
            const int64_t i = i0 + r;
            float* Pi = P.data() + (i - j0) * kKeys;
            float* dSi = dS.data() + (i - j0) * kKeys;
            if (r >= rows) {  // rows past T: zero, so column sums over them add nothing
              std::fill(Pi, Pi + kKeys, 0.0f);
              std::fill(dSi, dSi + kKeys, 0.0f);
              continue;
            }
            const int64_t n = std::min(i + 1, j1) - j0;  // block keys visible to row i
            probs_row(srow[r], n, n8, lseb[i], Pi);
            dscores_row(Pi, dprow[r], D[i], n8, dSi);
          }
          // dq_i (+)= scale * sum_{j in block, j <= i} dS_ij k_j; block 0 reaches every row first
          weighted_tile(dS.data() + (i0 - j0) * kKeys, kKeys, 1, kb + j0 * ks.t, ks.t, 0,
                        std::min(N, j1) - j0, dh, scales, dqrow, /*accumulate=*/j0 > 0);
        }
        for (int64_t jj = j0; jj < j1; jj += kRows) {
          // Columns jj .. jj+3 of the panels, summed over the rows i >= jj that see them:
          // dv_j = sum_i P_ij do_i, dk_j = scale * sum_i dS_ij q_i (panel row i - j0).
          const int64_t cols = std::min(kRows, j1 - jj);
          float *dvrow[kRows], *dkrow[kRows];
          for (int r = 0; r < kRows; ++r) {
            dvrow[r] = r < cols ? dv + base + (jj + r) * row : dummy.data();
            dkrow[r] = r < cols ? dk + base + (jj + r) * row : dummy.data();
          }
          weighted_tile(P.data() + (jj - j0), 1, kKeys, d_o + base + j0 * row, row, jj - j0,
                        T - j0, dh, ones, dvrow);
          weighted_tile(dS.data() + (jj - j0), 1, kKeys, qb + j0 * qs.t, qs.t, jj - j0, T - j0,
                        dh, scales, dkrow);
        }
      }
    }
  });
}

// ---- bf16 (AVX512-BF16) ---------------------------------------------------------------------
//
// Operand layouts for vdpbf16ps, which adds a[2l] b[2l] + a[2l+1] b[2l+1] into fp32 lane l: the
// A side is one pair of bf16 values broadcast to every lane (two neighbours of a row of q, do,
// p or dS, or two rows of one column of the P / dS panels); the B side holds, per lane, the
// matching pair of the other operand:
//   c-pairs  X[c2 * ld + j] = (x_j[2 c2], x_j[2 c2 + 1])       lanes along keys j (q.k, do.v)
//   r-pairs  X[j2 * dh + c] = (x_{2 j2}[c], x_{2 j2 + 1}[c])   lanes along channels c (p v, ...)
// A pair is one 32-bit word, its first element in the low half (little endian).

#ifdef NORMLAB_BF16_KERNEL
namespace {

constexpr int64_t kL = 16;  // fp32 lanes of one zmm register
// Rows per tile: 16 accumulator registers (two vectors per row), enough independent vdpbf16ps
// chains to cover the instruction's latency. Even, as the panels' row pairs need.
constexpr int64_t kRowsB = 8;

uint32_t word(const uint16_t* p) {
  uint32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

NORMLAB_BF16_TARGET inline __m512 dp(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(a), reinterpret_cast<__m512bh>(b));
}

// 16 floats rounded to bf16 (nearest even), zero-extended to 32-bit lanes. (The maskz forms of
// the zero-extension and the shift below: GCC 12's unmasked ones read an "undefined" register
// that -Wmaybe-uninitialized reports.)
NORMLAB_BF16_TARGET inline __m512i bf16_lanes(__m512 x) {
  return _mm512_maskz_cvtepu16_epi32(0xFFFF, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x)));
}

// n floats (a multiple of 16) rounded to bf16 into dst.
NORMLAB_BF16_TARGET void store_bf16(const float* src, int64_t n, uint16_t* dst) {
  for (int64_t i = 0; i < n; i += kL)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i))));
}

// The fp32 row helpers in 16 lanes (the kernels' driver loops are not compiled for AVX-512).
NORMLAB_BF16_TARGET float softmax_row16(float* __restrict s, int64_t n, int64_t n16, float* __restrict p, float* sum,
                                        float* plogit) {
  return softmax_row_v<F16>(s, n, n16, p, sum, plogit);
}
NORMLAB_BF16_TARGET void probs_row16(const float* __restrict s, int64_t n, int64_t n16, float lse, float* __restrict p) {
  probs_row_v<F16>(s, n, n16, lse, p);
}
NORMLAB_BF16_TARGET void dscores_row16(const float* __restrict p, const float* __restrict dp, float D, int64_t n16,
                                       float* __restrict ds) {
  dscores_row_v<F16>(p, dp, D, n16, ds);
}

// c-pairs of T rows of dh bf16 values (row stride `stride`, even), zero for j in [T, ld): 16 rows at
// a time by one 32-bit gather per channel pair. (The maskz / mask forms of gathers, conversions and
// shifts here and below: GCC 12's unmasked ones read an "undefined" register that
// -Wmaybe-uninitialized reports.)
NORMLAB_BF16_TARGET
void pack_cpairs(const uint16_t* src, int64_t stride, int64_t T, int64_t dh, int64_t ld, uint32_t* dst) {
  const int64_t c2n = dh / 2;
  for (int64_t c2 = 0; c2 < c2n; ++c2) std::fill(dst + c2 * ld + T, dst + (c2 + 1) * ld, 0u);
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(static_cast<int>(stride / 2)));
  int64_t j = 0;
  for (; j + kL <= T; j += kL)
    for (int64_t c2 = 0; c2 < c2n; ++c2)
      _mm512_storeu_si512(dst + c2 * ld + j, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), 0xFFFF, idx,
                                                                         src + j * stride + 2 * c2, 4));
  for (; j < T; ++j) {
    const uint16_t* row = src + j * stride;
    for (int64_t c2 = 0; c2 < c2n; ++c2) dst[c2 * ld + j] = word(row + 2 * c2);
  }
}

// 16 bf16 values zero-extended to 32-bit lanes.
NORMLAB_BF16_TARGET inline __m512i widen16(const uint16_t* p) {
  return _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// r-pairs of T rows (row stride `stride`) for j2 < n2, rows at or past T zero; dh a multiple of 16.
NORMLAB_BF16_TARGET
void pack_rpairs(const uint16_t* src, int64_t stride, int64_t T, int64_t dh, int64_t n2, uint32_t* dst) {
  for (int64_t j2 = 0; j2 < n2; ++j2) {
    const uint16_t* r0 = 2 * j2 < T ? src + 2 * j2 * stride : nullptr;
    const uint16_t* r1 = 2 * j2 + 1 < T ? src + (2 * j2 + 1) * stride : nullptr;
    uint32_t* out = dst + j2 * dh;
    for (int64_t c = 0; c < dh; c += kL) {
      const __m512i lo = r0 ? widen16(r0 + c) : _mm512_setzero_si512();
      const __m512i hi = r1 ? widen16(r1 + c) : _mm512_setzero_si512();
      _mm512_storeu_si512(out + c, _mm512_or_si512(lo, _mm512_maskz_slli_epi32(0xFFFF, hi, 16)));
    }
  }
}

// sum_c a[c] b[c] over dh bf16 values (a multiple of 16), in fp32.
NORMLAB_BF16_TARGET float dot_bf16(const uint16_t* a, const uint16_t* b, int64_t dh) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t c = 0; c < dh; c += kL) {
    const __m512 x = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, widen16(a + c), 16));
    const __m512 y = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, widen16(b + c), 16));
    acc = _mm512_fmadd_ps(x, y, acc);
  }
  alignas(64) float lanes[kL];
  _mm512_store_ps(lanes, acc);
  float sum = 0;
  for (float x : lanes) sum += x;
  return sum;
}

// s_r[j] = scale * sum_c a_r[c] x_j[c] for r < kRowsB, j in [0, n16): a_r bf16 rows, bt c-pairs
// (leading dimension ld). 8 accumulators of 16 lanes.
NORMLAB_BF16_TARGET
void dot_tile_bf16(const uint16_t* const* a, const uint32_t* bt, int64_t ld, int64_t dh, int64_t n16, float scale,
                   float* const* s) {
  const int64_t c2n = dh / 2;
  const __m512 sc = _mm512_set1_ps(scale);
  int64_t j = 0;
  for (; j + 2 * kL <= n16; j += 2 * kL) {
    __m512 acc[kRowsB][2];
    for (int r = 0; r < kRowsB; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t c2 = 0; c2 < c2n; ++c2) {
      const __m512i b0 = _mm512_loadu_si512(bt + c2 * ld + j), b1 = _mm512_loadu_si512(bt + c2 * ld + j + kL);
      for (int r = 0; r < kRowsB; ++r) {
        const __m512i ar = _mm512_set1_epi32(static_cast<int>(word(a[r] + 2 * c2)));
        acc[r][0] = dp(acc[r][0], ar, b0);
        acc[r][1] = dp(acc[r][1], ar, b1);
      }
    }
    for (int r = 0; r < kRowsB; ++r) {
      _mm512_storeu_ps(s[r] + j, _mm512_mul_ps(acc[r][0], sc));
      _mm512_storeu_ps(s[r] + j + kL, _mm512_mul_ps(acc[r][1], sc));
    }
  }
  if (j < n16) {
    __m512 acc[kRowsB];
    for (int r = 0; r < kRowsB; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t c2 = 0; c2 < c2n; ++c2) {
      const __m512i b0 = _mm512_loadu_si512(bt + c2 * ld + j);
      for (int r = 0; r < kRowsB; ++r)
        acc[r] = dp(acc[r], _mm512_set1_epi32(static_cast<int>(word(a[r] + 2 * c2))), b0);
    }
    for (int r = 0; r < kRowsB; ++r) _mm512_storeu_ps(s[r] + j, _mm512_mul_ps(acc[r], sc));
  }
}

// out_r[c] (+)= scale_r * sum_{i2 in [lo2, hi2)} w_r(i2) . x_{i2}[c] for r < kRowsB, c < dh: the
// weight pair w_r(i2) is the word at w + 2 * (r * w_row + i2 * w_idx) (bf16 units), x r-pairs.
NORMLAB_BF16_TARGET
void weighted_tile_bf16(const uint16_t* w, int64_t w_row, int64_t w_idx, const uint32_t* x, int64_t dh, int64_t lo2,
                        int64_t hi2, const float* scale, float* const* out, bool accumulate) {
  int64_t c = 0;
  for (; c + 2 * kL <= dh; c += 2 * kL) {
    __m512 acc[kRowsB][2];
    for (int r = 0; r < kRowsB; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t i2 = lo2; i2 < hi2; ++i2) {
      const __m512i b0 = _mm512_loadu_si512(x + i2 * dh + c), b1 = _mm512_loadu_si512(x + i2 * dh + c + kL);
      for (int r = 0; r < kRowsB; ++r) {
        const __m512i ar = _mm512_set1_epi32(static_cast<int>(word(w + 2 * (r * w_row + i2 * w_idx))));
        acc[r][0] = dp(acc[r][0], ar, b0);
        acc[r][1] = dp(acc[r][1], ar, b1);
      }
    }
    for (int r = 0; r < kRowsB; ++r) {
      const __m512 sr = _mm512_set1_ps(scale[r]);
      __m512 r0 = _mm512_mul_ps(acc[r][0], sr), r1 = _mm512_mul_ps(acc[r][1], sr);
      if (accumulate) {
        r0 = _mm512_add_ps(r0, _mm512_loadu_ps(out[r] + c));
        r1 = _mm512_add_ps(r1, _mm512_loadu_ps(out[r] + c + kL));
      }
      _mm512_storeu_ps(out[r] + c, r0);
      _mm512_storeu_ps(out[r] + c + kL, r1);
    }
  }
  if (c < dh) {
    __m512 acc[kRowsB];
    for (int r = 0; r < kRowsB; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t i2 = lo2; i2 < hi2; ++i2) {
      const __m512i b0 = _mm512_loadu_si512(x + i2 * dh + c);
      for (int r = 0; r < kRowsB; ++r)
        acc[r] = dp(acc[r], _mm512_set1_epi32(static_cast<int>(word(w + 2 * (r * w_row + i2 * w_idx)))), b0);
    }
    for (int r = 0; r < kRowsB; ++r) {
      __m512 res = _mm512_mul_ps(acc[r], _mm512_set1_ps(scale[r]));
      if (accumulate) res = _mm512_add_ps(res, _mm512_loadu_ps(out[r] + c));
      _mm512_storeu_ps(out[r] + c, res);
    }
  }
}

// Two fp32 rows (row0, row1) of one column-pair panel row: panel[jl] = (bf16(row0[jl]),
// bf16(row1[jl])) for jl < n16, zero up to `width`.
NORMLAB_BF16_TARGET
void store_column_pairs(const float* row0, const float* row1, int64_t n16, int64_t width, uint32_t* panel) {
  int64_t jl = 0;
  for (; jl < n16; jl += kL) {
    const __m512i lo = bf16_lanes(_mm512_loadu_ps(row0 + jl)), hi = bf16_lanes(_mm512_loadu_ps(row1 + jl));
    _mm512_storeu_si512(panel + jl, _mm512_or_si512(lo, _mm512_maskz_slli_epi32(0xFFFF, hi, 16)));
  }
  std::fill(panel + jl, panel + width, 0u);
}

// ---- AMX: the same products on the tile unit ------------------------------------------------
//
// One tdpbf16ps multiplies a 16 x 32 bf16 tile by a 32 x 16 one (given as 16 rows of 16 pairs: the
// c-pair and r-pair layouts above, and the P / dS column-pair panels, are exactly that) into a
// 16 x 16 fp32 tile: 8192 multiply-adds an instruction. Tiles: 0-3 results, 4 and 5 operands.
// Where it runs: head sizes a multiple of 32 (the products over channels go in chunks of 32).

constexpr int64_t kTile = 16;

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

std::atomic<bool> g_amx_allowed{true};

bool amx_usable() {
  // Linux hands out the tile state only on request (once per process).
  static const bool ok = [] {
    if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16")) return false;
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

// Six tiles of 16 rows x 64 bytes. A static object: GCC 12 drops the stores into a local config
// before ldtilecfg reads it (seen: rows and column widths left zero, then SIGILL on the first tile op).
const TileConfig& tile_config() {
  static const TileConfig cfg = [] {
    TileConfig c;
    for (int t = 0; t < 6; ++t) {
      c.rows[t] = 16;
      c.colsb[t] = 64;
    }
    return c;
  }();
  return cfg;
}

NORMLAB_AMX_TARGET void tiles_begin() { _tile_loadconfig(&tile_config()); }
NORMLAB_AMX_TARGET void tiles_end() { _tile_release(); }

// C_t (16 x 16 fp32 at c + 16 t, row stride ldc floats) (+)= A . B_t for t < nt (nt <= 4): A is 16
// rows of bf16 (row stride lda elements), 32 * kc of them per row; B_t's 16 pair-rows of chunk k
// start at b + k * 16 * ldb + 16 t (words, row stride ldb words).
#define NORMLAB_AMX_STEP(T)                                  \
  if (nt > T) {                                              \
    _tile_loadd(5, b + k * 16 * ldb + 16 * T, ldb * 4);      \
    _tile_dpbf16ps(T, 4, 5);                                 \
  }
#define NORMLAB_AMX_INIT(T) \
  if (nt > T) {             \
    if (accumulate)         \
      _tile_loadd(T, c + 16 * T, ldc * 4); \
    else                    \
      _tile_zero(T);        \
  }
#define NORMLAB_AMX_STORE(T) \
  if (nt > T) _tile_stored(T, c + 16 * T, ldc * 4);
NORMLAB_AMX_TARGET
void amx_rows(const uint16_t* a, int64_t lda, const uint32_t* b, int64_t ldb, int64_t kc, float* c, int64_t ldc, int nt,
              bool accumulate) {
  NORMLAB_AMX_INIT(0) NORMLAB_AMX_INIT(1) NORMLAB_AMX_INIT(2) NORMLAB_AMX_INIT(3)
  for (int64_t k = 0; k < kc; ++k) {
    _tile_loadd(4, a + k * 32, lda * 2);
    NORMLAB_AMX_STEP(0) NORMLAB_AMX_STEP(1) NORMLAB_AMX_STEP(2) NORMLAB_AMX_STEP(3)
  }
  NORMLAB_AMX_STORE(0) NORMLAB_AMX_STORE(1) NORMLAB_AMX_STORE(2) NORMLAB_AMX_STORE(3)
}
#undef NORMLAB_AMX_STEP

// The other sharing: C_t (16 x 16 at c + 16 t * ldc) = A_t . B for t < nt, A_t the 16 rows at
// a + 16 t * lda, B one operand (chunk k at b + k * 16 * ldb).
#define NORMLAB_AMX_STEP(T)                                          \
  if (nt > T) {                                                      \
    _tile_loadd(4, a + 16 * T * lda + k * 32, lda * 2);              \
    _tile_dpbf16ps(T, 4, 5);                                         \
  }
#undef NORMLAB_AMX_INIT
#undef NORMLAB_AMX_STORE
#define NORMLAB_AMX_INIT(T) \
  if (nt > T) _tile_zero(T);
#define NORMLAB_AMX_STORE(T) \
  if (nt > T) _tile_stored(T, c + 16 * T * ldc, ldc * 4);
NORMLAB_AMX_TARGET
void amx_cols(const uint16_t* a, int64_t lda, const uint32_t* b, int64_t ldb, int64_t k0, int64_t k1, float* c,
              int64_t ldc, int nt) {
  NORMLAB_AMX_INIT(0) NORMLAB_AMX_INIT(1) NORMLAB_AMX_INIT(2) NORMLAB_AMX_INIT(3)
  for (int64_t k = k0; k < k1; ++k) {
    _tile_loadd(5, b + k * 16 * ldb, ldb * 4);
    NORMLAB_AMX_STEP(0) NORMLAB_AMX_STEP(1) NORMLAB_AMX_STEP(2) NORMLAB_AMX_STEP(3)
  }
  NORMLAB_AMX_STORE(0) NORMLAB_AMX_STORE(1) NORMLAB_AMX_STORE(2) NORMLAB_AMX_STORE(3)
}
#undef NORMLAB_AMX_STEP
#undef NORMLAB_AMX_INIT
#undef NORMLAB_AMX_STORE

// Transposes T rows of dh bf16 values (row stride `stride`, even) into dst[c * ld + i], zero for
// i in [T, ld): 16 rows at a time, one 32-bit gather giving channels c and c + 1.
NORMLAB_BF16_TARGET
void transpose_bf16(const uint16_t* src, int64_t stride, int64_t T, int64_t dh, int64_t ld, uint16_t* dst) {
  for (int64_t c = 0; c < dh; ++c) std::fill(dst + c * ld + T, dst + (c + 1) * ld, uint16_t{0});
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(static_cast<int>(stride / 2)));
  int64_t i = 0;
  for (; i + kL <= T; i += kL)
    for (int64_t c = 0; c < dh; c += 2) {
      const __m512i w = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), 0xFFFF, idx, src + i * stride + c, 4);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c * ld + i), _mm512_maskz_cvtepi32_epi16(0xFFFF, w));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (c + 1) * ld + i),
                          _mm512_maskz_cvtepi32_epi16(0xFFFF, _mm512_maskz_srli_epi32(0xFFFF, w, 16)));
    }
  for (; i < T; ++i)
    for (int64_t c = 0; c < dh; ++c) dst[c * ld + i] = src[i * stride + c];
}

// 16 rows of dh bf16 values starting at row i0 (row stride `stride`), as one tile operand: in place
// when all 16 exist, else copied into pad (16 x dh, zero rows past T). Returns the rows and sets *ld.
const uint16_t* tile_rows(const uint16_t* base, int64_t stride, int64_t i0, int64_t T, int64_t dh, uint16_t* pad,
                          int64_t* ld) {
  if (i0 + kTile <= T) {
    *ld = stride;
    return base + i0 * stride;
  }
  std::fill(pad, pad + kTile * dh, uint16_t{0});
  for (int64_t r = 0; r < T - i0; ++r) std::copy(base + (i0 + r) * stride, base + (i0 + r) * stride + dh, pad + r * dh);
  *ld = dh;
  return pad;
}

NORMLAB_BF16_TARGET void scale_rows(float* s, int64_t rows, int64_t ld, int64_t n16, float scale) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n16; j += kL) _mm512_storeu_ps(s + r * ld + j, _mm512_mul_ps(_mm512_loadu_ps(s + r * ld + j), sc));
}

// Row r of the keys from nt result tiles of 16 channels x 16 keys (tile t at ct + 256 t): the
// channels 16 t + x of key r, times sc, rounded to bf16 into out.
NORMLAB_BF16_TARGET void store_key_row(const float* ct, int64_t r, int nt, float sc, uint16_t* out) {
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(static_cast<int>(kTile)));
  for (int t = 0; t < nt; ++t) {
    const __m512 col = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xFFFF, idx, ct + t * kTile * kTile + r, 4);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + t * kTile),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_mul_ps(col, _mm512_set1_ps(sc)))));
  }
}

void forward_amx(const Shape& sh, const uint16_t* q, Strides qs, const uint16_t* k, Strides ks, const uint16_t* v,
                 Strides vs, uint16_t* o, float* lse, double* stats) {
  const int64_t B = sh.B, T = sh.T, H = sh.H, dh = sh.dh, T16 = round_up(T, kL), T32 = round_up(T, 32);
  const float scale = static_cast<float>(sh.scale);
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    tiles_begin();
    std::vector<uint32_t> kt(dh / 2 * T16), vr(T32 / 2 * dh);
    std::vector<float> s(kTile * T16), p(kTile * T16), of(kTile * dh);
    std::vector<uint16_t> p16(kTile * T32), pad(kTile * dh);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / H, h = task % H;
      const uint16_t* qb = q + b * qs.b + h * qs.h;
      pack_cpairs(k + b * ks.b + h * ks.h, ks.t, T, dh, T16, kt.data());
      pack_rpairs(v + b * vs.b + h * vs.h, vs.t, T, dh, T32 / 2, vr.data());
      double entropy = 0, sink = 0;
      float smax = -INFINITY;
      for (int64_t i0 = 0; i0 < T; i0 += kTile) {
        const int64_t rows = std::min(kTile, T - i0), N = i0 + rows, N16 = round_up(N, kL), N32 = round_up(N, 32);
        int64_t lda = 0;
        const uint16_t* a = tile_rows(qb, qs.t, i0, T, dh, pad.data(), &lda);
        for (int64_t j = 0; j < N16; j += 4 * kTile)
          amx_rows(a, lda, kt.data() + j, T16, dh / 32, s.data() + j, T16, static_cast<int>(std::min<int64_t>(4, (N16 - j) / kTile)),
                   false);
        scale_rows(s.data(), rows, T16, N16, scale);
        float inv_sum[kTile];
        for (int64_t r = 0; r < kTile; ++r) {
          uint16_t* prow16 = p16.data() + r * T32;
          if (r >= rows) {
            std::fill(prow16, prow16 + N32, uint16_t{0});
            inv_sum[r] = 0;
            continue;
          }
          float sum = 0, plogit = 0;
          float* srow = s.data() + r * T16;
          float* prow = p.data() + r * T16;
          const float m = softmax_row16(srow, i0 + r + 1, N16, prow, &sum, stats ? &plogit : nullptr);
          inv_sum[r] = 1.0f / sum;
          store_bf16(prow, N16, prow16);
          std::fill(prow16 + N16, prow16 + N32, uint16_t{0});
          lse[(b * H + h) * T + i0 + r] = m + std::log(sum);
          if (stats) {
            entropy += std::log(static_cast<double>(sum)) - static_cast<double>(plogit) / sum;
            smax = std::max(smax, m);
            if (i0 + r >= 1) sink += static_cast<double>(prow[0]) / sum;
          }
        }
        for (int64_t c0 = 0; c0 < dh; c0 += 4 * kTile)
          amx_rows(p16.data(), T32, vr.data() + c0, dh, N32 / 32, of.data() + c0, dh,
                   static_cast<int>(std::min<int64_t>(4, (dh - c0) / kTile)), false);
        for (int64_t r = 0; r < rows; ++r) {
          scale_rows(of.data() + r * dh, 1, dh, dh, inv_sum[r]);
          store_bf16(of.data() + r * dh, dh, o + ((b * T + i0 + r) * H + h) * dh);
        }
      }
      if (stats) {
        stats[3 * task] = entropy;
        stats[3 * task + 1] = smax;
        stats[3 * task + 2] = sink;
      }
    }
    tiles_end();
  });
}

void backward_amx(const Shape& sh, const uint16_t* q, Strides qs, const uint16_t* k, Strides ks, const uint16_t* v,
                  Strides vs, const uint16_t* o, const float* lse, const uint16_t* d_o, uint16_t* dq, uint16_t* dk,
                  uint16_t* dv) {
  const int64_t B = sh.B, T = sh.T, H = sh.H, dh = sh.dh, T16 = round_up(T, kL), T32 = round_up(T, 32);
  const float scale = static_cast<float>(sh.scale);
  const int64_t row = H * dh;
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    tiles_begin();
    // kt, vt: c-pairs of k and v (scores, dP); kr: r-pairs of k (dq); qT, gT: q and do transposed
    // (channels x positions; the A side of dK^T = q^T dS and dV^T = do^T P). Panels: the block's P
    // and dS as column pairs, pair row (i - j0) / 2, zero past the causal edge and past T.
    std::vector<uint32_t> kt(dh / 2 * T16), vt(dh / 2 * T16), kr(T32 / 2 * dh);
    std::vector<uint16_t> qT(dh * T32), gT(dh * T32), dS16(kTile * kKeys), padq(kTile * dh), padg(kTile * dh);
    std::vector<float> s(kTile * kKeys), dpv(kTile * kKeys), P(kTile * kKeys), dS(kTile * kKeys);
    std::vector<uint32_t> Pc(T32 / 2 * kKeys), dSc(T32 / 2 * kKeys);
    std::vector<float> dqf(T16 * dh), D(T), ct(4 * kTile * kTile);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / H, h = task % H;
      const uint16_t* qb = q + b * qs.b + h * qs.h;
      const uint16_t* kb = k + b * ks.b + h * ks.h;
      const uint16_t* gb = d_o + b * T * row + h * dh;
      const float* lseb = lse + (b * H + h) * T;
      const int64_t base = b * T * row + h * dh;
      pack_cpairs(kb, ks.t, T, dh, T16, kt.data());
      pack_cpairs(v + b * vs.b + h * vs.h, vs.t, T, dh, T16, vt.data());
      pack_rpairs(kb, ks.t, T, dh, T32 / 2, kr.data());
      transpose_bf16(qb, qs.t, T, dh, T32, qT.data());
      transpose_bf16(gb, row, T, dh, T32, gT.data());
      for (int64_t i = 0; i < T; ++i) D[i] = dot_bf16(d_o + base + i * row, o + base + i * row, dh);
      std::fill(dqf.begin(), dqf.end(), 0.0f);
      for (int64_t j0 = 0; j0 < T; j0 += kKeys) {
        const int64_t j1 = std::min(T, j0 + kKeys);
        std::fill(Pc.begin(), Pc.end(), 0u);
        std::fill(dSc.begin(), dSc.end(), 0u);
        for (int64_t i0 = j0; i0 < T; i0 += kTile) {
          const int64_t rows = std::min(kTile, T - i0), N = i0 + rows;
          const int64_t n16 = round_up(std::min(N, j1) - j0, kL), n32 = round_up(n16, 32);
          int64_t lda = 0, ldg = 0;
          const uint16_t* a = tile_rows(qb, qs.t, i0, T, dh, padq.data(), &lda);
          const uint16_t* g = tile_rows(gb, row, i0, T, dh, padg.data(), &ldg);
          for (int64_t j = 0; j < n16; j += 4 * kTile) {
            const int nt = static_cast<int>(std::min<int64_t>(4, (n16 - j) / kTile));
            amx_rows(a, lda, kt.data() + j0 + j, T16, dh / 32, s.data() + j, kKeys, nt, false);
            amx_rows(g, ldg, vt.data() + j0 + j, T16, dh / 32, dpv.data() + j, kKeys, nt, false);
          }
          scale_rows(s.data(), rows, kKeys, n16, scale);
          for (int64_t r = 0; r < kTile; ++r) {
            float* Pi = P.data() + r * kKeys;
            float* dSi = dS.data() + r * kKeys;
            if (r >= rows) {
              std::fill(Pi, Pi + n16, 0.0f);
              std::fill(dSi, dSi + n16, 0.0f);
            } else {
              const int64_t i = i0 + r;
              probs_row16(s.data() + r * kKeys, std::min(i + 1, j1) - j0, n16, lseb[i], Pi);
              dscores_row16(Pi, dpv.data() + r * kKeys, D[i], n16, dSi);
            }
            store_bf16(dSi, n16, dS16.data() + r * kKeys);
            std::fill(dS16.data() + r * kKeys + n16, dS16.data() + r * kKeys + n32, uint16_t{0});
          }
          for (int64_t r = 0; r < kTile; r += 2) {
            const int64_t pr = (i0 - j0 + r) / 2;
            store_column_pairs(P.data() + r * kKeys, P.data() + (r + 1) * kKeys, n16, kKeys, Pc.data() + pr * kKeys);
            store_column_pairs(dS.data() + r * kKeys, dS.data() + (r + 1) * kKeys, n16, kKeys, dSc.data() + pr * kKeys);
          }
          // dq_i += dS_i. k over the block (scaled at the end)
          for (int64_t c0 = 0; c0 < dh; c0 += 4 * kTile)
            amx_rows(dS16.data(), kKeys, kr.data() + j0 / 2 * dh + c0, dh, n32 / 32, dqf.data() + i0 * dh + c0, dh,
                     static_cast<int>(std::min<int64_t>(4, (dh - c0) / kTile)), true);
        }
        // dV^T[c, j] = sum_i do_i[c] P_ij and dK^T[c, j] = scale * sum_i q_i[c] dS_ij for the key
        // tiles of the block; the sums start at the 32-row chunk holding row jj (rows before the
        // diagonal are zero in the panels) and end at T rounded up to 32 (zero rows past T).
        const int64_t kend = (T32 - j0) / 32;
        for (int64_t jj = j0; jj < j1; jj += kTile) {
          const int64_t cols = std::min(kTile, j1 - jj), kbeg = (jj - j0) / 32;
          for (int which = 0; which < 2; ++which) {
            const uint16_t* A = which == 0 ? gT.data() : qT.data();
            const uint32_t* panel = (which == 0 ? Pc.data() : dSc.data()) + (jj - j0);
            uint16_t* out = which == 0 ? dv : dk;
            const float sc = which == 0 ? 1.0f : scale;
            for (int64_t c0 = 0; c0 < dh; c0 += 4 * kTile) {
              const int nt = static_cast<int>(std::min<int64_t>(4, (dh - c0) / kTile));
              amx_cols(A + c0 * T32 + j0, T32, panel, kKeys, kbeg, kend, ct.data(), kTile, nt);
              // ct holds nt tiles of 16 channels x 16 keys: write key rows jj + r, channels c0 + 16t + x
              for (int64_t r = 0; r < cols; ++r) store_key_row(ct.data(), r, nt, sc, out + base + (jj + r) * row + c0);
            }
          }
        }
      }
      for (int64_t i = 0; i < T; ++i) {
        scale_rows(dqf.data() + i * dh, 1, dh, dh, scale);
        store_bf16(dqf.data() + i * dh, dh, dq + base + i * row);
      }
    }
    tiles_end();
  });
}

bool use_amx(int64_t dh) { return dh % 32 == 0 && g_amx_allowed.load() && amx_usable(); }

}  // namespace

bool amx_available() { return amx_usable(); }
void set_amx_allowed(bool allowed) { g_amx_allowed = allowed; }

bool bf16_kernel_available() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                         __builtin_cpu_supports("avx512bf16");
  return ok;
}

void causal_attention_forward_bf16(const Shape& sh, const uint16_t* q, Strides qs, const uint16_t* k, Strides ks,
                                   const uint16_t* v, Strides vs, uint16_t* o, float* lse, double* stats) {
  if (use_amx(sh.dh)) return forward_amx(sh, q, qs, k, ks, v, vs, o, lse, stats);
  const int64_t B = sh.B, T = sh.T, H = sh.H, dh = sh.dh, T16 = round_up(T, kL), T2 = T16 / 2;
  const float scale = static_cast<float>(sh.scale);
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<uint32_t> kt(dh / 2 * T16), vr(T2 * dh);
    std::vector<float> s(kRowsB * T16), p(kRowsB * T16), of(kRowsB * dh);
    std::vector<uint16_t> p16(kRowsB * T16);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / H, h = task % H;
      const uint16_t* qb = q + b * qs.b + h * qs.h;
      pack_cpairs(k + b * ks.b + h * ks.h, ks.t, T, dh, T16, kt.data());
      pack_rpairs(v + b * vs.b + h * vs.h, vs.t, T, dh, T2, vr.data());
      double entropy = 0, sink = 0;
      float smax = -INFINITY;
      for (int64_t i0 = 0; i0 < T; i0 += kRowsB) {
        const int64_t rows = std::min(kRowsB, T - i0), N = i0 + rows, N16 = round_up(N, kL);
        const uint16_t* a[kRowsB];
        float *srow[kRowsB], *prow[kRowsB], *orow[kRowsB];
        float inv_sum[kRowsB];
        for (int r = 0; r < kRowsB; ++r) {
          a[r] = qb + (i0 + std::min<int64_t>(r, rows - 1)) * qs.t;
          srow[r] = s.data() + r * T16;
          prow[r] = p.data() + r * T16;
          orow[r] = of.data() + r * dh;
        }
        dot_tile_bf16(a, kt.data(), T16, dh, N16, scale, srow);
        for (int r = 0; r < kRowsB; ++r) {
          const int64_t n = std::min(i0 + r, N - 1) + 1;  // keys 0 .. i visible to row i
          float sum = 0, plogit = 0;
          const float m = softmax_row16(srow[r], n, N16, prow[r], &sum, stats ? &plogit : nullptr);
          inv_sum[r] = 1.0f / sum;
          store_bf16(prow[r], N16, p16.data() + r * T16);
          if (r >= rows) continue;
          lse[(b * H + h) * T + i0 + r] = m + std::log(sum);
          if (stats) {
            entropy += std::log(static_cast<double>(sum)) - static_cast<double>(plogit) / sum;
            smax = std::max(smax, m);
            if (i0 + r >= 1) sink += static_cast<double>(prow[r][0]) / sum;
          }
        }
        weighted_tile_bf16(p16.data(), T16 / 2, 1, vr.data(), dh, 0, N16 / 2, inv_sum, orow, false);
        for (int r = 0; r < rows; ++r) store_bf16(orow[r], dh, o + ((b * T + i0 + r) * H + h) * dh);
      }
      if (stats) {
        stats[3 * task] = entropy;
        stats[3 * task + 1] = smax;
        stats[3 * task + 2] = sink;
      }
    }
  });
}

void causal_attention_backward_bf16(const Shape& sh, const uint16_t* q, Strides qs, const uint16_t* k, Strides ks,
                                    const uint16_t* v, Strides vs, const uint16_t* o, const float* lse,
                                    const uint16_t* d_o, uint16_t* dq, uint16_t* dk, uint16_t* dv) {
  if (use_amx(sh.dh)) return backward_amx(sh, q, qs, k, ks, v, vs, o, lse, d_o, dq, dk, dv);
  const int64_t B = sh.B, T = sh.T, H = sh.H, dh = sh.dh, T16 = round_up(T, kL), T2 = T16 / 2;
  const int64_t T4 = round_up(T, kRowsB);  // even: kRowsB is
  const float scale = static_cast<float>(sh.scale);
  float scales[kRowsB], ones[kRowsB];
  std::fill(scales, scales + kRowsB, scale);
  std::fill(ones, ones + kRowsB, 1.0f);
  const int64_t row = H * dh;  // time stride of the contiguous (B, T, H, dh) tensors
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    // kt, vt: c-pairs of k and v (scores, dP); kr, qr, gr: r-pairs of k, q, do (dq, dk, dv).
    // Per key block: the tile's fp32 rows of P and dS, dS in bf16 by rows (the A side of dq),
    // and the block's P and dS panels as column pairs (rows i, i+1 of one column: the A side of
    // dk and dv), panel row (i - j0) / 2, zero past the causal edge and past T.
    std::vector<uint32_t> kt(dh / 2 * T16), vt(dh / 2 * T16), kr(T2 * dh), qr(T2 * dh), gr(T2 * dh);
    std::vector<float> s(kRowsB * kKeys), dpv(kRowsB * kKeys), P(kRowsB * kKeys, 0.0f), dS(kRowsB * kKeys, 0.0f);
    std::vector<uint16_t> dS16(kRowsB * kKeys);
    std::vector<uint32_t> Pc(T4 / 2 * kKeys), dSc(T4 / 2 * kKeys);
    std::vector<float> dqf(T * dh), D(T), tmp(kRowsB * dh), dummy(dh);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / H, h = task % H;
      const uint16_t* qb = q + b * qs.b + h * qs.h;
      const uint16_t* kb = k + b * ks.b + h * ks.h;
      const float* lseb = lse + (b * H + h) * T;
      const int64_t base = b * T * row + h * dh;
      pack_cpairs(kb, ks.t, T, dh, T16, kt.data());
      pack_cpairs(v + b * vs.b + h * vs.h, vs.t, T, dh, T16, vt.data());
      pack_rpairs(kb, ks.t, T, dh, T2, kr.data());
      pack_rpairs(qb, qs.t, T, dh, T2, qr.data());
      pack_rpairs(d_o + base, row, T, dh, T2, gr.data());
      for (int64_t i = 0; i < T; ++i) D[i] = dot_bf16(d_o + base + i * row, o + base + i * row, dh);  // do_i . o_i
      std::fill(dqf.begin(), dqf.end(), 0.0f);
      for (int64_t j0 = 0; j0 < T; j0 += kKeys) {
        const int64_t j1 = std::min(T, j0 + kKeys);
        for (int64_t i0 = j0; i0 < T; i0 += kRowsB) {
          const int64_t rows = std::min(kRowsB, T - i0), N = i0 + rows;
          const int64_t n16 = round_up(std::min(N, j1) - j0, kL);
          const uint16_t *a[kRowsB], *g[kRowsB];
          float *srow[kRowsB], *dprow[kRowsB], *dqrow[kRowsB];
          for (int r = 0; r < kRowsB; ++r) {
            const int64_t i = i0 + std::min<int64_t>(r, rows - 1);
            a[r] = qb + i * qs.t;
            g[r] = d_o + base + i * row;
            srow[r] = s.data() + r * kKeys;
            dprow[r] = dpv.data() + r * kKeys;
            dqrow[r] = r < rows ? dqf.data() + (i0 + r) * dh : dummy.data();
          }
          dot_tile_bf16(a, kt.data() + j0, T16, dh, n16, scale, srow);
          dot_tile_bf16(g, vt.data() + j0, T16, dh, n16, 1.0f, dprow);
          for (int r = 0; r < kRowsB; ++r) {
            float* Pi = P.data() + r * kKeys;
            float* dSi = dS.data() + r * kKeys;
            if (r >= rows) {  // rows past T: zero in the panels, so column sums over them add nothing
              std::fill(Pi, Pi + n16, 0.0f);
              std::fill(dSi, dSi + n16, 0.0f);
            } else {
              const int64_t i = i0 + r;
              probs_row16(srow[r], std::min(i + 1, j1) - j0, n16, lseb[i], Pi);
              dscores_row16(Pi, dprow[r], D[i], n16, dSi);
            }
            store_bf16(dSi, n16, dS16.data() + r * kKeys);
          }
          for (int r = 0; r < kRowsB; r += 2) {
            const int64_t pr = (i0 - j0 + r) / 2;
            store_column_pairs(P.data() + r * kKeys, P.data() + (r + 1) * kKeys, n16, kKeys, Pc.data() + pr * kKeys);
            store_column_pairs(dS.data() + r * kKeys, dS.data() + (r + 1) * kKeys, n16, kKeys,
                               dSc.data() + pr * kKeys);
          }
          // dq_i += scale * sum_{j in block, j <= i} dS_ij k_j
          weighted_tile_bf16(dS16.data(), kKeys / 2, 1, kr.data() + j0 / 2 * dh, dh, 0, n16 / 2, scales, dqrow,
                             /*accumulate=*/true);
        }
        const int64_t hi2 = (T4 - j0) / 2;  // panel row pairs of this block
        for (int64_t jj = j0; jj < j1; jj += kRowsB) {
          // dv_j = sum_{i >= j} P_ij do_i, dk_j = scale * sum_{i >= j} dS_ij q_i for the columns
          // jj .. jj+3; rows before jj contribute zeros, so the sums start at the pair of jj.
          const int64_t cols = std::min(kRowsB, j1 - jj), lo2 = (jj - j0) / 2;
          float* trow[kRowsB];
          for (int r = 0; r < kRowsB; ++r) trow[r] = tmp.data() + r * dh;
          const auto* pw = reinterpret_cast<const uint16_t*>(Pc.data() + (jj - j0));
          weighted_tile_bf16(pw, 1, kKeys, gr.data() + j0 / 2 * dh, dh, lo2, hi2, ones, trow, false);
          for (int r = 0; r < cols; ++r) store_bf16(trow[r], dh, dv + base + (jj + r) * row);
          const auto* sw = reinterpret_cast<const uint16_t*>(dSc.data() + (jj - j0));
          weighted_tile_bf16(sw, 1, kKeys, qr.data() + j0 / 2 * dh, dh, lo2, hi2, scales, trow, false);
          for (int r = 0; r < cols; ++r) store_bf16(trow[r], dh, dk + base + (jj + r) * row);
        }
      }
      for (int64_t i = 0; i < T; ++i) store_bf16(dqf.data() + i * dh, dh, dq + base + i * row);
    }
  });
}

#else  // no AVX512-BF16 build: the dispatch never calls these

bool bf16_kernel_available() { return false; }
bool amx_available() { return false; }
void set_amx_allowed(bool) {}

void causal_attention_forward_bf16(const Shape&, const uint16_t*, Strides, const uint16_t*, Strides, const uint16_t*,
                                   Strides, uint16_t*, float*, double*) {
  std::abort();
}

void causal_attention_backward_bf16(const Shape&, const uint16_t*, Strides, const uint16_t*, Strides,
                                    const uint16_t*, Strides, const uint16_t*, const float*, const uint16_t*,
                                    uint16_t*, uint16_t*, uint16_t*) {
  std::abort();
}

#endif

}  // namespace normlab::attention_kernels
