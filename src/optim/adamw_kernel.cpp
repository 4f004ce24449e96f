// Fused AdamW update; see adamw_kernel.h.
#include "optim/adamw_kernel.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

#include "core/simd.h"  // NORMLAB_CPU_CLONES

namespace normlab::adamw_kernel {
namespace {

// Work is split into pieces of at most this many elements, so that small and large parameters
// spread evenly over the threads of the one parallel region.
constexpr int64_t kPiece = 16384;

struct Piece {
  size_t tensor;
  int64_t begin, end;
};

// A plain loop that GCC vectorises (the file is built with -fno-math-errno, so sqrt is an
// instruction). Scalars are rounded to float once, as LibTorch's float kernels do.
NORMLAB_CPU_CLONES
void update_range(float* __restrict p, const float* __restrict g, float* __restrict m,
                  float* __restrict v, int64_t n, float scale, float keep, float b1, float c1,
                  float b2, float c2, float inv_bc2_sqrt, float eps, float step) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * scale;
    const float mi = m[i] * b1 + c1 * gi;
    const float vi = v[i] * b2 + c2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * keep - step * (mi / (std::sqrt(vi) * inv_bc2_sqrt + eps));
  }
}

}  // namespace

void adamw_step(const std::vector<Buffers>& tensors, const Step& s) {
  std::vector<Piece> pieces;
  for (size_t t = 0; t < tensors.size(); ++t) {
    for (int64_t b = 0; b < tensors[t].n; b += kPiece)
      pieces.push_back({t, b, std::min(tensors[t].n, b + kPiece)});
  }
  const float scale = static_cast<float>(s.grad_scale);
  const float b1 = static_cast<float>(s.beta1), b2 = static_cast<float>(s.beta2);
  const float c1 = static_cast<float>(1.0 - s.beta1), c2 = static_cast<float>(1.0 - s.beta2);
  const float inv_bc2 = static_cast<float>(1.0 / s.bc2_sqrt), eps = static_cast<float>(s.eps);
  const float step = static_cast<float>(s.step_size),
              decay_keep = static_cast<float>(1.0 - s.lr_decay);
  at::parallel_for(0, static_cast<int64_t>(pieces.size()), 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const Piece& pc = pieces[i];
      const Buffers& t = tensors[pc.tensor];
      const int64_t b = pc.begin;
      update_range(t.param + b, t.grad + b, t.exp_avg + b, t.exp_avg_sq + b, pc.end - b, scale,
                   t.decay ? decay_keep : 1.0f, b1, c1, b2, c2, inv_bc2, eps, step);
    }
  });
}

}  // namespace normlab::adamw_kernel
