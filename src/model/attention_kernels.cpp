// The fp32 fused causal attention kernel (contract in attention_kernels.h): forward and blocked
// backward over 8-lane vectors, its hot loops compiled twice (x86-64-v3 and the baseline, one
// picked per CPU at load time, core/simd.h), so it runs on every CPU. The bf16 kernel is in
// attention_kernels_bf16.cpp (AVX512-BF16) and attention_kernels_amx.cpp (AMX tiles).
#include "model/attention_kernels.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/attention_kernels_internal.h"

namespace normlab::attention_kernels {
namespace {

using namespace simd;
using namespace detail;

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

// The row helpers (templates in attention_kernels_internal.h) in 8 lanes, multi-versioned.
NORMLAB_CPU_CLONES
float softmax_row(float* __restrict s, int64_t n, int64_t n8, float* __restrict p, float* sum, float* plogit) {
  return softmax_row_v<F8>(s, n, n8, p, sum, plogit);
}

NORMLAB_CPU_CLONES
void probs_row(const float* __restrict s, int64_t n, int64_t n8, float lse, float* __restrict p) {
  probs_row_v<F8>(s, n, n8, lse, p);
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

// The backward walks the keys in blocks of kKeys (attention_kernels_internal.h, with why).

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

}  // namespace normlab::attention_kernels
