// Row kernels behind the fast CPU paths of RMSNorm and LayerNorm (float32, contiguous memory).
// Each call walks the rows of an (rows, n) matrix; a row is read from memory once (its later
// passes hit the cache). Row reductions are accumulated in double; parameter gradients are summed
// in float over 32 rows at a time and then in double. The result matches the composed-op
// reference to ~2e-7 of the largest magnitude, whatever the size. Rows are spread over LibTorch's
// intra-op threads; the split of the parameter-gradient sums depends only on `rows`, so results do
// not change with the thread count.
//
// These are raw-pointer functions on purpose: the autograd wrappers live with their norms
// (rmsnorm.cpp, layernorm.cpp) and this file stays free of LibTorch headers beyond ATen/Parallel.
// Not a general kernel library: no strides, no half types, no CUDA.
#pragma once

#include <cstdint>

namespace normlab::cpu_kernels {

// RMSNorm, y = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps) per row.
// x, y: (rows, n); w: (n) (the effective weight, 1 + weight for rmsnorm_1p); rstd: (rows), out.
void rms_norm_forward(const float* x, const float* w, float* y, float* rstd, int64_t rows,
                      int64_t n, double eps);

// With g = dL/dy: dx_i = rstd * w_i * g_i - x_i * rstd^3 / n * sum_j w_j g_j x_j,
// dw_j = sum over rows of g_j * x_j * rstd. dx: (rows, n), dw: (n), both overwritten.
void rms_norm_backward(const float* g, const float* x, const float* w, const float* rstd, float* dx,
                       float* dw, int64_t rows, int64_t n);

// LayerNorm, y = (x - mean) * rstd * w + b with the biased variance, rstd = 1 / sqrt(var + eps).
// b may be null (no bias). mean, rstd: (rows), out.
void layer_norm_forward(const float* x, const float* w, const float* b, float* y, float* mean,
                        float* rstd, int64_t rows, int64_t n, double eps);

// With xhat = (x - mean) * rstd and h = g * w:
// dx = rstd * (h - mean(h) - xhat * mean(h * xhat)), dw = sum_rows g * xhat, db = sum_rows g.
// db may be null (no bias).
void layer_norm_backward(const float* g, const float* x, const float* w, const float* mean,
                         const float* rstd, float* dx, float* dw, float* db, int64_t rows,
                         int64_t n);

}  // namespace normlab::cpu_kernels
