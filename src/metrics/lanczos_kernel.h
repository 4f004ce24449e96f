// Lanczos with full reorthogonalisation on symmetric float matrices, for the largest eigenvalue of
// the weights' Gram matrices (metrics/probe.h, spectral_norms): the CPU fast path, in plain loops.
// Why it exists: the same iteration in LibTorch ops ran 48 steps of 4 batched matrix-vector
// products over 36 Grams, and LibTorch's CPU bmm dispatches each batch entry on its own (about
// 100 ms of a 330 ms full-diagnostics step at `small`). Here each matrix is one task of
// at::parallel_for and every product is one loop over 8 lanes (AVX2 clone and baseline).
//
// For each matrix: q_0 the given start vector; w = G q_j; alpha_j = q_j . w; w is orthogonalised
// against q_0 .. q_j twice (classical Gram-Schmidt, repeated); beta_j = |w|, q_{j+1} = w / beta_j.
// Products in fp32 with fp32 lanes, alpha and beta accumulated in double. Raw pointers on purpose
// (as attention_kernels.h); the dispatch and the tridiagonal eigenvalue live in probe.cpp.
#pragma once

#include <cstdint>

namespace normlab::lanczos_kernel {

// m matrices of n x n (row-major, contiguous, G + k * n * n), `steps` <= n steps each from the
// start vector q0 (n). alpha: m x steps; beta: m x (steps - 1), row k for matrix k.
void tridiagonal(const float* G, int64_t m, int64_t n, int64_t steps, const float* q0, double* alpha, double* beta);

}  // namespace normlab::lanczos_kernel
