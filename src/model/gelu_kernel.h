// The exact (erf) GELU for the bf16 CPU path: y = x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2,
// and its derivative dy/dx = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi). Inputs and
// outputs are bf16 (as raw 16-bit patterns); everything in between is fp32, and the results are
// rounded to bf16 the way LibTorch rounds (to nearest, ties to even; NaN stays NaN).
//
// Why it exists: under bf16 autocast the FFN's GELU runs on bf16 tensors, and LibTorch's bf16
// GELU and its backward took about a fifth of the `medium` benchmark step on a 2-core CPU (more
// than every norm of the model together). This is one pass over 16 lanes at a time on CPUs with
// AVX-512, 8 elsewhere (AVX2 or the baseline; the same operations per lane).
//
// erf: Abramowitz & Stegun 7.1.26, erf(z) = 1 - t (a1 + t (a2 + ... + t a5)) exp(-z^2),
// t = 1 / (1 + p z) for z >= 0, odd in z; absolute error at most 1.5e-7 in exact arithmetic, so
// GELU's absolute error is below 1e-7 |x| plus fp32 rounding; tested against std::erf in double.
// exp(-z^2) is reused for phi (z^2 = x^2 / 2). The fp32 entry points run the same arithmetic on
// float arrays, for the tests.
//
// Raw pointers on purpose (as attention_kernels.h): the dispatch and the autograd wrapper live in
// attention.cpp (ffn_gelu); this file includes only ATen/Parallel.h.
#pragma once

#include <cstdint>

namespace normlab::gelu_kernel {

// y[i] = gelu(x[i]); n elements, any alignment.
void forward_bf16(const uint16_t* x, uint16_t* y, int64_t n);
// dx[i] = dy[i] * gelu'(x[i]).
void backward_bf16(const uint16_t* x, const uint16_t* dy, uint16_t* dx, int64_t n);

void forward_f32(const float* x, float* y, int64_t n);
void backward_f32(const float* x, const float* dy, float* dx, int64_t n);

}  // namespace normlab::gelu_kernel
