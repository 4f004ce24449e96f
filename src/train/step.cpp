#include "train/step.h"

#include <algorithm>

#include "core/torch_compat.h"
#include "train/evaluate.h"

namespace normlab {

torch::ScalarType precision_dtype(const std::string& precision) {
  if (precision == "bf16") return torch::kBFloat16;
  if (precision == "fp16") return torch::kHalf;
  return torch::kFloat;
}

Pass forward_backward(const Config& cfg, Transformer& model, AdamW& optimizer, const Corpus& data,
                      const torch::Device& device, int64_t& micro_batch, bool diag, double loss_scale) {
  optimizer.zero_grad();
  Pass pass;
  pass.first_micro_batch = micro_batch;
  const int64_t B = cfg.train.batch_size, T = cfg.model.ctx, accum = cfg.train.accum;
  torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().device(device));
  for (int64_t a = 0; a < accum; ++a) {
    pass.offsets.push_back(batch_offsets(data.size(), T, B, micro_batch, cfg.data.shuffle,
                                         static_cast<uint64_t>(cfg.seed)));
    auto w = data.windows(pass.offsets.back(), T);
    // A pageable host-to-device copy waits for the GPU; from pinned memory it is queued.
    w = device.is_cuda() ? w.pin_memory().to(device, /*non_blocking=*/true) : w.to(device);
    model->set_capture(diag && a == 0);  // statistics of the first micro-batch
    torch::Tensor total, loss;
    {
      AutocastGuard autocast(device, precision_dtype(cfg.train.precision));
      auto logits = model->forward(w.narrow(1, 0, T));
      loss = lm_loss(logits, w.narrow(1, 1, T));  // fp32
      total = loss;
      if (cfg.optim.z_loss > 0 || (diag && a == 0)) {
        auto lse = torch::logsumexp(logits.to(torch::kFloat), -1);
        if (cfg.optim.z_loss > 0) total = total + cfg.optim.z_loss * lse.pow(2).mean();
        if (diag && a == 0) {
          pass.lse_mean = lse.detach().mean();
          pass.logit_max = logits.detach().max().to(torch::kFloat);
        }
      }
    }
    (loss_scale == 1.0 ? total / static_cast<double>(accum)
                       : total * (loss_scale / static_cast<double>(accum))).backward();
    loss_sum += loss.detach();
    ++micro_batch;
  }
  model->set_capture(false);
  pass.loss = loss_sum / static_cast<double>(accum);
  return pass;
}

void clip_and_step(const Config& cfg, AdamW& optimizer, double lr, double grad_norm, double loss_scale) {
  const double coef =
      cfg.optim.grad_clip > 0 ? std::min(1.0, cfg.optim.grad_clip / (grad_norm + 1e-6)) : 1.0;
  optimizer.step(lr, coef / loss_scale);
}

}  // namespace normlab
