// The fused CPU loops of the stream methods (HC, mHC, AttnRes's weighted sum): each op is one pass
// over the positions that reads its inputs once and writes its outputs once, forward and backward.
// Why it exists: composed of LibTorch ops, mixing n = 4 streams into n + 1 costs 20 multiply-adds
// over (B, T, d) per sublayer, each a full pass over memory, twice that in the backward plus a
// reduction per weight; Sinkhorn's 20 iterations are ~120 small ops per sublayer forward and
// backward on (B, T, n, n). At `small` that made HC 1.47x and mHC 1.98x the plain stream
// (scripts/BENCHMARKS.md). The dispatch, the autograd functions and the composed reference they are
// held to live in streams.cpp; this file includes only ATen/Parallel.h. Raw pointers on purpose (as
// attention_kernels.h).
//
// Layout: P positions; stream j's row at position p is X[j] + p * d (d contiguous values). Weights
// are per position (W + p * n * m, row-major n x m) or one n x m matrix for all (`shared`).
// Order of operations: Y_c = X_0 w_0c, then Y_c = Y_c + X_j w_jc for j = 1 .. n-1, and
// Out_k = R_k + y b_k, the compiler contracting each multiply-add into one fma on a CPU with FMA
// in an optimised build (GCC contracts from -O2; the -O1 sanitizer build does not). Where LibTorch's
// addcmul kernels are contracted the same way (the development machine), the forward equals the
// composed ops (mul then addcmul) bit for bit; elsewhere it differs by rounding.
// Reductions (weight gradients) sum 8 lanes in T and the lanes in double.
#pragma once

#include <cstdint>

namespace normlab::stream_kernels {

struct Mix {
  int64_t P, d, n, m;
  bool shared;  // one n x m matrix for every position
};

// Y_c = sum_j W[j, c] X_j, c = 0 .. m-1.
template <class T>
void mix_forward(const Mix& s, const T* const* X, const T* W, T* const* Y);
// dX_j = sum_c W[j, c] dY_c; dW[p, j, c] = <X_j, dY_c> at position p (P x n x m, per position
// even when W is shared: the caller sums). dY[c] null: a zero gradient. dX null: not wanted (then
// dX[j] may be null for a stream that needs none); dW null: not wanted.
template <class T>
void mix_backward(const Mix& s, const T* const* X, const T* W, const T* const* dY, T* const* dX, T* dW);

struct Scaled {
  int64_t P, d, n;
  bool shared;  // one b of n values for every position
};

// Out_k = R_k + b_k y (b per position: b + p * n).
template <class T>
void add_scaled_forward(const Scaled& s, const T* const* R, const T* b, const T* y, T* const* out);
// dy = sum_k b_k dOut_k (null: not wanted); db[p, k] = <y, dOut_k> (P x n; null: not wanted).
// dOut[k] null: a zero gradient. dR_k = dOut_k needs no pass.
template <class T>
void add_scaled_backward(const Scaled& s, const T* b, const T* y, const T* const* dOut, T* dy, T* db);

// The projection of the streams' rms-normalised concatenation (HC's dynamic weights with n = 1 per
// stream, mHC's z): per position, with xf = [X_0 .. X_{n-1}] (n*d values) and F (k x n*d):
//   r = 1 / sqrt(sum(xf^2) / (n*d) + eps),  z[p, c] = r <F_c, xf>;  r to rinv (P) for the backward.
// One read of the streams; F stays in cache.
template <class T>
void rms_project_forward(int64_t P, int64_t d, int64_t n, int64_t k, const T* const* X, const T* F, double eps, T* z,
                         T* r);
// dX_j = r sum_c dz_c F_c,j - (sum_c dz_c z_c) r^2 / (n*d) X_j (dX null: not wanted); dF = sum_p r dz x
// (null: not wanted), accumulated in a fixed number of position chunks and summed in order, so the
// result does not depend on the thread count.
template <class T>
void rms_project_backward(int64_t P, int64_t d, int64_t n, int64_t k, const T* const* X, const T* F, const T* z,
                          const T* r, const T* dz, T* const* dX, T* dF);

// mHC's Sinkhorn per position (P matrices of n x n, row-major): C = softmax over each row + eps,
// columns normalised, then iters - 1 times rows and columns, each division by (sum + eps).
template <class T>
void sinkhorn_forward(int64_t P, int64_t n, int64_t iters, double eps, const T* logits, T* C);
// dlogits from dC, recomputing the iterations per position (kept in a per-thread buffer of
// (2 iters) n^2 values).
template <class T>
void sinkhorn_backward(int64_t P, int64_t n, int64_t iters, double eps, const T* logits, const T* dC, T* dlogits);

}  // namespace normlab::stream_kernels
