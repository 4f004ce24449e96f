// Row kernels for the fast RMSNorm / LayerNorm CPU paths; see cpu_kernels.h for the contract.
#include "model/norms/cpu_kernels.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/simd.h"

// NORMLAB_CPU_CLONES (an AVX2 + FMA and a baseline build of each row loop, picked per CPU) and
// NORMLAB_ALWAYS_INLINE come from core/simd.h.

namespace normlab::cpu_kernels {
namespace {

// Row reductions use explicit 4-wide double vectors (GCC/Clang vector extensions): the
// auto-vectoriser does not reorder a floating-point sum on its own (no -ffast-math), and one
// fixed summation order makes the AVX2 and the baseline clone agree bit for bit. Four vectors are
// in flight per step, 16 floats, enough to hide the add latency.
typedef float F4 __attribute__((vector_size(16)));
typedef double D4 __attribute__((vector_size(32)));
constexpr int64_t kStep = 16;

NORMLAB_ALWAYS_INLINE F4 load4(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof v);  // unaligned load
  return v;
}
// Spelled element by element: GCC 12 lowers __builtin_convertvector(F4 -> D4) to two halves
// through the stack, but this form to a single vcvtps2pd.
NORMLAB_ALWAYS_INLINE D4 widen(F4 v) {
  return D4{static_cast<double>(v[0]), static_cast<double>(v[1]), static_cast<double>(v[2]),
            static_cast<double>(v[3])};
}
NORMLAB_ALWAYS_INLINE F4 splat4(float v) { return F4{v, v, v, v}; }
NORMLAB_ALWAYS_INLINE D4 splat4d(double v) { return D4{v, v, v, v}; }
NORMLAB_ALWAYS_INLINE double hsum(D4 a, D4 b, D4 c, D4 d) {
  const D4 s = (a + b) + (c + d);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// Parameter-gradient sums are split into at most this many row blocks, each with its own double
// buffer. The split depends on `rows` only, so the sums (and training runs) are bitwise
// reproducible with any thread count.
constexpr int64_t kParamBlocks = 64;
// Within a block, parameter gradients are summed in float over this many rows at a time, then
// added to the block's double sums: the per-element update stays 8-wide float, and a float sum
// of 32 terms loses nothing that matters at 1e-6.
constexpr int64_t kFlushRows = 32;
// Below this many elements a parallel region costs more than it saves (ATen uses the same value).
constexpr int64_t kGrainElements = 32768;

NORMLAB_ALWAYS_INLINE double sum_squares(const float* __restrict x, int64_t n) {
  D4 a0 = {}, a1 = {}, a2 = {}, a3 = {};
  int64_t j = 0;
  for (; j + kStep <= n; j += kStep) {
    const D4 v0 = widen(load4(x + j)), v1 = widen(load4(x + j + 4));
    const D4 v2 = widen(load4(x + j + 8)), v3 = widen(load4(x + j + 12));
    a0 += v0 * v0;
    a1 += v1 * v1;
    a2 += v2 * v2;
    a3 += v3 * v3;
  }
  double s = hsum(a0, a1, a2, a3);
  for (; j < n; ++j) s += static_cast<double>(x[j]) * x[j];
  return s;
}

// Sums of (x - k) and (x - k)^2 with k the row's first element: shifting by a value of the row
// keeps E[x^2] - E[x]^2 free of cancellation when the mean is large against the spread.
NORMLAB_ALWAYS_INLINE void shifted_moments(const float* __restrict x, int64_t n, double k,
                                           double* s1_out, double* s2_out) {
  const D4 kv = splat4d(k);
  D4 a0 = {}, a1 = {}, a2 = {}, a3 = {}, q0 = {}, q1 = {}, q2 = {}, q3 = {};
  int64_t j = 0;
  for (; j + kStep <= n; j += kStep) {
    const D4 d0 = widen(load4(x + j)) - kv, d1 = widen(load4(x + j + 4)) - kv;
    const D4 d2 = widen(load4(x + j + 8)) - kv, d3 = widen(load4(x + j + 12)) - kv;
    a0 += d0;
    a1 += d1;
    a2 += d2;
    a3 += d3;
    q0 += d0 * d0;
    q1 += d1 * d1;
    q2 += d2 * d2;
    q3 += d3 * d3;
  }
  double s1 = hsum(a0, a1, a2, a3), s2 = hsum(q0, q1, q2, q3);
  for (; j < n; ++j) {
    const double d = x[j] - k;
    s1 += d;
    s2 += d * d;
  }
  *s1_out = s1;
  *s2_out = s2;
}

NORMLAB_CPU_CLONES
void rms_forward_rows(const float* __restrict x, const float* __restrict w, float* __restrict y,
                      float* __restrict rstd, int64_t begin, int64_t end, int64_t n, double eps) {
  for (int64_t i = begin; i < end; ++i) {
    const float* xr = x + i * n;
    float* yr = y + i * n;
    const float r = static_cast<float>(1.0 / std::sqrt(sum_squares(xr, n) / n + eps));
    rstd[i] = r;
    for (int64_t j = 0; j < n; ++j) yr[j] = xr[j] * r * w[j];
  }
}

NORMLAB_CPU_CLONES
void rms_backward_rows(const float* __restrict g, const float* __restrict x,
                       const float* __restrict w, const float* __restrict rstd,
                       float* __restrict dx, float* __restrict dw_acc, int64_t begin, int64_t end,
                       int64_t n) {
  for (int64_t i = begin; i < end; ++i) {
    const float* gr = g + i * n;
    const float* xr = x + i * n;
    float* dxr = dx + i * n;
    // dot = sum_j w_j g_j x_j
    D4 a0 = {}, a1 = {}, a2 = {}, a3 = {};
    int64_t j = 0;
    for (; j + kStep <= n; j += kStep) {
      a0 += widen(load4(w + j) * load4(gr + j)) * widen(load4(xr + j));
      a1 += widen(load4(w + j + 4) * load4(gr + j + 4)) * widen(load4(xr + j + 4));
      a2 += widen(load4(w + j + 8) * load4(gr + j + 8)) * widen(load4(xr + j + 8));
      a3 += widen(load4(w + j + 12) * load4(gr + j + 12)) * widen(load4(xr + j + 12));
    }
    double dot = hsum(a0, a1, a2, a3);
    for (; j < n; ++j) dot += static_cast<double>(w[j] * gr[j]) * xr[j];
    const double r = rstd[i];
    const float rf = rstd[i];
    const float c = static_cast<float>(r * r * r * dot / n);
    for (int64_t k = 0; k < n; ++k) {
      dxr[k] = rf * w[k] * gr[k] - c * xr[k];
      dw_acc[k] += gr[k] * xr[k] * rf;
    }
  }
}

NORMLAB_CPU_CLONES
void layer_forward_rows(const float* __restrict x, const float* __restrict w,
                        const float* __restrict b, float* __restrict y, float* __restrict mean,
                        float* __restrict rstd, int64_t begin, int64_t end, int64_t n, double eps) {
  for (int64_t i = begin; i < end; ++i) {
    const float* xr = x + i * n;
    float* yr = y + i * n;
    double s1, s2;
    const double k = xr[0];
    shifted_moments(xr, n, k, &s1, &s2);
    const double m = s1 / n;
    const double var = std::max(s2 / n - m * m, 0.0);
    const float mu = static_cast<float>(k + m);
    const float r = static_cast<float>(1.0 / std::sqrt(var + eps));
    mean[i] = mu;
    rstd[i] = r;
    if (b != nullptr) {
      for (int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - mu) * r * w[j] + b[j];
    } else {
      for (int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - mu) * r * w[j];
    }
  }
}

NORMLAB_CPU_CLONES
void layer_backward_rows(const float* __restrict g, const float* __restrict x,
                         const float* __restrict w, const float* __restrict mean,
                         const float* __restrict rstd, float* __restrict dx,
                         float* __restrict dw_acc, float* __restrict db_acc, int64_t begin,
                         int64_t end, int64_t n) {
  for (int64_t i = begin; i < end; ++i) {
    const float* gr = g + i * n;
    const float* xr = x + i * n;
    float* dxr = dx + i * n;
    const float mu = mean[i], r = rstd[i];
    // sum_h = sum_j h_j and sum_hx = sum_j h_j xhat_j = rstd * (sum_j h_j x_j - mean * sum_h),
    // h = g * w. A float product is exact in double, so the double sums keep the subtraction
    // accurate even when the mean is large against the spread.
    D4 h0 = {}, h1 = {}, h2 = {}, h3 = {}, p0 = {}, p1 = {}, p2 = {}, p3 = {};
    int64_t j = 0;
    for (; j + kStep <= n; j += kStep) {
      const D4 e0 = widen(load4(gr + j) * load4(w + j));
      const D4 e1 = widen(load4(gr + j + 4) * load4(w + j + 4));
      const D4 e2 = widen(load4(gr + j + 8) * load4(w + j + 8));
      const D4 e3 = widen(load4(gr + j + 12) * load4(w + j + 12));
      h0 += e0;
      h1 += e1;
      h2 += e2;
      h3 += e3;
      p0 += e0 * widen(load4(xr + j));
      p1 += e1 * widen(load4(xr + j + 4));
      p2 += e2 * widen(load4(xr + j + 8));
      p3 += e3 * widen(load4(xr + j + 12));
    }
    double sum_h = hsum(h0, h1, h2, h3), sum_hxr = hsum(p0, p1, p2, p3);
    for (; j < n; ++j) {
      const float h = gr[j] * w[j];
      sum_h += h;
      sum_hxr += static_cast<double>(h) * xr[j];
    }
    const double sum_hx = r * (sum_hxr - static_cast<double>(mu) * sum_h);
    const float c1 = static_cast<float>(sum_h / n), c2 = static_cast<float>(sum_hx / n);
    if (db_acc != nullptr) {
      for (int64_t k = 0; k < n; ++k) {
        const float xhat = (xr[k] - mu) * r;
        dxr[k] = r * (gr[k] * w[k] - c1 - xhat * c2);
        dw_acc[k] += gr[k] * xhat;
        db_acc[k] += gr[k];
      }
    } else {
      for (int64_t k = 0; k < n; ++k) {
        const float xhat = (xr[k] - mu) * r;
        dxr[k] = r * (gr[k] * w[k] - c1 - xhat * c2);
        dw_acc[k] += gr[k] * xhat;
      }
    }
  }
}

// total += partial; partial = 0.
NORMLAB_CPU_CLONES
void flush_partial(float* __restrict partial, double* __restrict total, int64_t n) {
  for (int64_t k = 0; k < n; ++k) total[k] += partial[k];
  std::fill(partial, partial + n, 0.0f);
}

// Runs rows(begin, end, float_sums...) over [begin, end) in groups of kFlushRows rows, flushing
// each of the float sums into its double total after every group.
template <typename Rows>
void in_flush_groups(int64_t begin, int64_t end, int64_t n, std::vector<float>& scratch,
                     std::initializer_list<double*> totals, const Rows& rows) {
  scratch.assign(n * totals.size(), 0.0f);
  for (int64_t i0 = begin; i0 < end; i0 += kFlushRows) {
    rows(i0, std::min(end, i0 + kFlushRows), scratch.data());
    int64_t t = 0;
    for (double* total : totals) flush_partial(scratch.data() + n * t++, total, n);
  }
}

int64_t row_grain(int64_t n) {
  return std::max<int64_t>(1, kGrainElements / std::max<int64_t>(n, 1));
}

// Runs body(block, row_begin, row_end) over the fixed row blocks, in parallel when worth it.
template <typename Body>
void for_each_row_block(int64_t rows, int64_t n, int64_t blocks, const Body& body) {
  const int64_t grain = rows * n < kGrainElements ? blocks : 1;
  at::parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) body(b, rows * b / blocks, rows * (b + 1) / blocks);
  });
}

// out[j] = sum over blocks of partial[b * n + j], summed in a fixed order.
void reduce_blocks(const std::vector<double>& partial, int64_t blocks, int64_t n, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    double s = 0;
    for (int64_t b = 0; b < blocks; ++b) s += partial[b * n + j];
    out[j] = static_cast<float>(s);
  }
}

}  // namespace

void rms_norm_forward(const float* x, const float* w, float* y, float* rstd, int64_t rows,
                      int64_t n, double eps) {
  at::parallel_for(0, rows, row_grain(n), [&](int64_t begin, int64_t end) {
    rms_forward_rows(x, w, y, rstd, begin, end, n, eps);
  });
}

void rms_norm_backward(const float* g, const float* x, const float* w, const float* rstd, float* dx,
                       float* dw, int64_t rows, int64_t n) {
  const int64_t blocks = std::min(rows, kParamBlocks);
  std::vector<double> dw_partial(blocks * n, 0.0);
  for_each_row_block(rows, n, blocks, [&](int64_t b, int64_t begin, int64_t end) {
    std::vector<float> scratch;
    in_flush_groups(begin, end, n, scratch, {dw_partial.data() + b * n},
                    [&](int64_t i0, int64_t i1, float* sums) {
                      rms_backward_rows(g, x, w, rstd, dx, sums, i0, i1, n);
                    });
  });
  reduce_blocks(dw_partial, blocks, n, dw);
}

void layer_norm_forward(const float* x, const float* w, const float* b, float* y, float* mean,
                        float* rstd, int64_t rows, int64_t n, double eps) {
  at::parallel_for(0, rows, row_grain(n), [&](int64_t begin, int64_t end) {
    layer_forward_rows(x, w, b, y, mean, rstd, begin, end, n, eps);
  });
}

void layer_norm_backward(const float* g, const float* x, const float* w, const float* mean,
                         const float* rstd, float* dx, float* dw, float* db, int64_t rows,
                         int64_t n) {
  const int64_t blocks = std::min(rows, kParamBlocks);
  std::vector<double> dw_partial(blocks * n, 0.0);
  std::vector<double> db_partial(db != nullptr ? blocks * n : 0, 0.0);
  for_each_row_block(rows, n, blocks, [&](int64_t b, int64_t begin, int64_t end) {
    std::vector<float> scratch;
    if (db != nullptr) {
      in_flush_groups(begin, end, n, scratch,
                      {dw_partial.data() + b * n, db_partial.data() + b * n},
                      [&](int64_t i0, int64_t i1, float* sums) {
                        layer_backward_rows(g, x, w, mean, rstd, dx, sums, sums + n, i0, i1, n);
                      });
    } else {
      in_flush_groups(begin, end, n, scratch, {dw_partial.data() + b * n},
                      [&](int64_t i0, int64_t i1, float* sums) {
                        layer_backward_rows(g, x, w, mean, rstd, dx, sums, nullptr, i0, i1, n);
                      });
    }
  });
  reduce_blocks(dw_partial, blocks, n, dw);
  if (db != nullptr) reduce_blocks(db_partial, blocks, n, db);
}

}  // namespace normlab::cpu_kernels
