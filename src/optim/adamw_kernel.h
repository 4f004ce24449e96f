// The CPU fast path of AdamW (optim/adamw.h): one pass over each float32 parameter that applies
// the clipping scale to the gradient, the decoupled weight decay, both moment updates and the
// parameter update, instead of a chain of seven whole-tensor LibTorch ops (and two temporaries)
// per parameter. All parameters of a step share one parallel region. Raw pointers, no LibTorch
// headers beyond ATen/Parallel.h, as model/norms/cpu_kernels.h.
#pragma once

#include <cstdint>
#include <vector>

namespace normlab::adamw_kernel {

// One parameter tensor's contiguous float32 buffers (n elements each).
struct Buffers {
  float* param;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  int64_t n;
  bool decay;  // weight decay applies (parameters of 2 or more dimensions)
};

// The scalars of one step, as torch.optim.AdamW (foreach=False) computes them.
struct Step {
  double grad_scale;  // global-norm clipping coefficient (1 = none)
  double lr_decay;    // lr * weight_decay
  double beta1, beta2, eps;
  double step_size;  // lr / (1 - beta1^t)
  double bc2_sqrt;   // sqrt(1 - beta2^t)
};

// For every element: g = grad * grad_scale; p *= 1 - lr_decay (decay only);
// m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
// p -= step_size * m / (sqrt(v) / bc2_sqrt + eps).
void adamw_step(const std::vector<Buffers>& tensors, const Step& s);

}  // namespace normlab::adamw_kernel
