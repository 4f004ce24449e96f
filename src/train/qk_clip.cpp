#include "train/qk_clip.h"

#include "parallel/comm.h"

namespace normlab {

int64_t apply_qk_clip(Transformer& model, double tau, Comm* comm, bool apply) {
  const int64_t L = model->n_blocks();
  std::vector<torch::Tensor> maxima;
  for (int64_t i = 0; i < L; ++i) {
    auto m = model->block(i)->attention()->take_head_max();
    maxima.push_back(m.defined() ? m.to(torch::kFloat) : torch::Tensor());
  }
  if (!apply) return 0;
  const int64_t H = model->config().n_heads, dh = model->config().d_model / H;
  auto all = torch::stack(maxima);  // (L, H); every block ran in this step's forwards
  if (comm) {
    std::vector<torch::Tensor> t{all.contiguous()};
    comm->allreduce_max(t);
    all = t[0];
  }
  // factor sqrt(tau / S) where S > tau, else 1; one host read decides how many heads.
  auto over = all > tau;
  const int64_t clipped = over.sum().item<int64_t>();
  if (clipped == 0) return 0;
  auto factor = torch::where(over, torch::sqrt(tau / all), torch::ones_like(all));
  torch::NoGradGuard ng;
  for (int64_t i = 0; i < L; ++i) {
    auto& a = model->block(i)->attention();
    auto rows = factor[i].repeat_interleave(dh).to(a->q_proj->weight.device());  // (d,)
    for (auto* lin : {&a->q_proj, &a->k_proj}) {
      auto& w = (*lin)->weight;
      w.mul_(rows.to(w.scalar_type()).unsqueeze(1));
      if ((*lin)->bias.defined()) (*lin)->bias.mul_(rows.to(w.scalar_type()));
    }
  }
  return clipped;
}

}  // namespace normlab
