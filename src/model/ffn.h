// The feed-forward sublayer (src/model/README.md, "Feed-forward"): fc1 (and gate, for a gated
// entry), the hidden activation of model.ffn's registry entry (ffns/: gelu, swiglu, geglu, relu2),
// an optional norm after it, fc2; or a layout's own hidden activation (FfnOptions::hidden).
#pragma once

#include <functional>
#include <optional>

#include "model/ffns/ffn_type.h"
#include "model/norms/norm.h"

namespace normlab {

class FfnImpl;

// The FFN's exact (erf) GELU, its one dispatch point: contiguous bf16 CPU input (bf16 autocast)
// runs gelu_kernel.h (fp32 inside, bf16 out; forward and backward one pass each, held to the fp32
// composed reference at 1e-2 relative); everything else, fp32 included, runs torch::gelu.
torch::Tensor ffn_gelu(const torch::Tensor& x);
bool gelu_kernel_applies(const torch::Tensor& x);

struct FfnOptions {
  int64_t d_model = 128;
  int64_t d_ff = 512;
  const FfnType* type = find_ffn("gelu");  // model.ffn's registry entry
  bool bias = false;
  std::optional<std::string> mid_norm_type;  // NormFormer: norm after the activation
  NormOptions mid_norm;                      // size = d_ff
  // A layout's own hidden activation (nGPT's scaled SwiGLU): hidden registers its parameters on
  // the FFN (after mid_norm) and returns the map, which holds them (and the FFN's linear maps it
  // reads) and takes x to what fc2 reads (before any mid norm), in place of GELU / SwiGLU. The
  // code lives in the layout's file.
  using HiddenMap = std::function<torch::Tensor(const torch::Tensor& x)>;
  std::function<HiddenMap(FfnImpl& ffn)> hidden;
};

class FfnImpl : public torch::nn::Module {
 public:
  explicit FfnImpl(const FfnOptions& o);
  // x: (B, T, d) -> (B, T, d)
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Linear fc1{nullptr}, gate{nullptr}, fc2{nullptr};
  NormPtr mid_norm;

 private:
  FfnOptions o_;
  FfnOptions::HiddenMap hidden_;  // the layout's hidden map (FfnOptions::hidden), or empty
};
TORCH_MODULE(Ffn);

}  // namespace normlab
