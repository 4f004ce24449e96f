// Fused causal attention for the CPU fast path (float32): softmax(q k^T * scale + causal mask) v
// per head, forward and backward, in the flash-attention form (Dao et al. 2022): the (T, T)
// probability matrix is never stored between forward and backward; the forward keeps one
// log-sum-exp per query row and the backward recomputes the probabilities from it. Only the
// causal half j <= i of each score matrix is computed, exponentiated or multiplied.
//
// Why it exists: on a 2-core CPU the composed-op attention (batched matmul, scale, masked_fill,
// softmax, batched matmul and their backwards, plus the transposes into and out of the
// (B, H, T, dh) layout) was about a third of a small model's step; this is one parallel pass
// over (batch, head) pairs that reads q, k, v where the projections wrote them.
//
// Layout: q, k, v are (B, T, H, dh) with the head dimension contiguous and arbitrary strides for
// b, t and h (so views of a (B, T, d) or fused (B, T, 3d) projection are read in place). o, do
// and the gradients dq, dk, dv are contiguous (B, T, H, dh). lse is (B, H, T).
// Raw pointers on purpose (as model/norms/cpu_kernels.h): the autograd wrapper lives in
// attention.cpp, and this file includes only ATen/Parallel.h. Not a general kernel: no padding
// masks, no dropout, no softcap (those take the composed path), dh a multiple of 8.
// Defined in attention_kernels.cpp (fp32), _bf16.cpp (AVX512-BF16) and _amx.cpp (AMX tiles).
#pragma once

#include <cstdint>

namespace normlab::attention_kernels {

struct Strides {
  int64_t b, t, h;  // in elements; the dh elements of one head are contiguous
};

struct Shape {
  int64_t B, T, H, dh;
  double scale;  // 1 / sqrt(dh)
};

// o = softmax(q k^T * scale, causal) v; lse[b, h, i] = log sum_{j<=i} exp(s_ij).
// stats, when not null, receives per (b, h) pair: [0] the sum over query rows of the attention
// entropy -sum_j p_ij log p_ij (nats), [1] the max score s_ij over j <= i, [2] the sum over
// query rows i >= 1 of the probability p_i0 on the first position (the attention sink).
// Size 3 * B * H.
void causal_attention_forward(const Shape& shape, const float* q, Strides qs, const float* k,
                              Strides ks, const float* v, Strides vs, float* o, float* lse,
                              double* stats);

// With P recomputed from lse, dP = do v^T, D_i = sum_c do_ic o_ic, dS = P * (dP - D):
// dq = scale dS k, dk = scale dS^T q, dv = P^T do. dq, dk, dv are overwritten.
void causal_attention_backward(const Shape& shape, const float* q, Strides qs, const float* k,
                               Strides ks, const float* v, Strides vs, const float* o,
                               const float* lse, const float* d_o, float* dq, float* dk, float* dv);

// ---- bf16 ----------------------------------------------------------------------------------
// The same attention on bf16 q, k, v (raw bf16 bits), for CPUs with AVX512-BF16: every product
// q.k, do.v, p v, dS k, dS^T q and P^T do is a bf16 x bf16 product accumulated in fp32: on the AMX
// tile unit (16 x 16 result tiles, 8192 multiply-adds an instruction) where the CPU has it and dh
// is a multiple of 32, else by vdpbf16ps (32 an instruction; the fp32 kernel does 8). The softmax, the
// log-sum-exp, D_i = do_i . o_i and dS are fp32; the probabilities and dS are rounded to bf16
// before they multiply v, k and q (relative error 2^-9 per entry, as GPU flash attention does),
// and o, dq, dk, dv are rounded to bf16 once, at the end (dq is summed over key blocks in fp32).
// Layout as above, with even time strides (rows are read as 32-bit pairs); o, d_o, dq, dk, dv are
// contiguous (B, T, H, dh) bf16. dh a multiple of 16, at most kBf16MaxHeadDim. Call only where
// bf16_kernel_available().
constexpr int64_t kBf16MaxHeadDim = 256;

// Whether this CPU has AVX512-BF16 (with AVX512F / BW / VL), read once at run time.
bool bf16_kernel_available();
// Whether the products run on the AMX tile unit instead (AMX-BF16 present and granted by the OS;
// head sizes a multiple of 32): the same arithmetic per product (bf16 x bf16 summed in fp32), in
// 16 x 16 tiles. set_amx_allowed(false) keeps the vdpbf16ps loops (tests hold both paths).
bool amx_available();
void set_amx_allowed(bool allowed);

void causal_attention_forward_bf16(const Shape& shape, const uint16_t* q, Strides qs, const uint16_t* k,
                                   Strides ks, const uint16_t* v, Strides vs, uint16_t* o, float* lse,
                                   double* stats);

void causal_attention_backward_bf16(const Shape& shape, const uint16_t* q, Strides qs, const uint16_t* k,
                                    Strides ks, const uint16_t* v, Strides vs, const uint16_t* o,
                                    const float* lse, const uint16_t* d_o, uint16_t* dq, uint16_t* dk,
                                    uint16_t* dv);

}  // namespace normlab::attention_kernels
