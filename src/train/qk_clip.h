// QK-Clip (Kimi K2's MuonClip, applied to AdamW; src/train/README.md): after an applied update,
// for every block and head whose max pre-softmax score S over this step's micro-batches exceeds
// tau, the rows of q_proj and k_proj (weights and biases) that produce the head are multiplied by
// sqrt(tau / S), so the head's logits on the same inputs shrink by tau / S. S comes from the
// attention kernel's own statistics (no extra pass): Attention::take_head_max.
#pragma once

#include "model/transformer.h"

namespace normlab {

class Comm;

// Reads (and resets) every block's per-head max logit and rescales the heads above tau. Returns
// the number of heads clipped. With a Comm the maxima are first max-reduced over the ranks, so
// every rank applies the same factors. With `apply` false the maxima are only reset (a skipped
// update: nothing is clipped).
int64_t apply_qk_clip(Transformer& model, double tau, Comm* comm, bool apply = true);

}  // namespace normlab
