// The AMX tile loops of the bf16 attention kernel, on CPUs with AMX-BF16 (granted by the OS) and head
// sizes a multiple of 32: the bf16 entry points (attention_kernels_bf16.cpp) hand their call here
// where use_amx(dh); amx_available / set_amx_allowed (attention_kernels.h), stubs in other builds.
#include "model/attention_kernels.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/attention_kernels_internal.h"

#ifdef NORMLAB_BF16_KERNEL
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#endif

namespace normlab::attention_kernels {

#ifdef NORMLAB_BF16_KERNEL
namespace {

using namespace detail;

// ---- AMX: the same products on the tile unit ------------------------------------------------
//
// One tdpbf16ps multiplies a 16 x 32 bf16 tile by a 32 x 16 one (given as 16 rows of 16 pairs: the
// c-pair and r-pair layouts of attention_kernels_bf16.cpp, and the P / dS column-pair panels, are
// exactly that) into a 16 x 16 fp32 tile: 8192 multiply-adds an instruction. Tiles: 0-3 results,
// 4 and 5 operands.
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

}  // namespace

namespace detail {

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

}  // namespace detail

bool amx_available() { return amx_usable(); }
void set_amx_allowed(bool allowed) { g_amx_allowed = allowed; }

#else  // no AVX512-BF16 build: the dispatch never calls these

bool amx_available() { return false; }
void set_amx_allowed(bool) {}

#endif

}  // namespace normlab::attention_kernels
