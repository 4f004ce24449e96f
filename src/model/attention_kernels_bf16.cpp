// The bf16 fused causal attention kernel on CPUs with AVX512-BF16 (contract in attention_kernels.h):
// its vdpbf16ps loops, the bf16 helpers the AMX loops share, and the entry points, which hand the
// call to the AMX loops (attention_kernels_amx.cpp) where use_amx(dh). Called only where
// bf16_kernel_available(); builds without x86-64 AVX-512 get the stubs at the end.
#include "model/attention_kernels.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/system.h"
#include "model/attention_kernels_internal.h"

namespace normlab::attention_kernels {

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

using namespace simd;
using namespace detail;

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

// 16 bf16 values zero-extended to 32-bit lanes.
NORMLAB_BF16_TARGET inline __m512i widen16(const uint16_t* p) {
  return _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

}  // namespace

namespace detail {

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

}  // namespace detail

namespace {

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

}  // namespace

bool bf16_kernel_available() { return cpu_has_avx512_bf16(); }

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
