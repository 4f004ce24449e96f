// Exact (erf) GELU for the CPU fast path of the FFN (float32, contiguous), forward and backward
// in one pass each. LibTorch 1.13's CPU gelu and gelu_backward were 7-11 ms of a 140 ms step of
// the tiny benchmark model on 2 cores; these are a few times faster at the same accuracy for
// training purposes (erf to ~1.5e-7 absolute, Abramowitz & Stegun 7.1.26, with the tail
// 1 - erf computed without cancellation). Raw pointers, as model/norms/cpu_kernels.h.
#pragma once

#include <cstdint>

namespace normlab::ffn_kernels {

// y = x * Phi(x) with Phi(x) = (1 + erf(x / sqrt(2))) / 2, n elements.
void gelu_forward(const float* x, float* y, int64_t n);

// dx = g * (Phi(x) + x * phi(x)) with phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
void gelu_backward(const float* g, const float* x, float* dx, int64_t n);

}  // namespace normlab::ffn_kernels
