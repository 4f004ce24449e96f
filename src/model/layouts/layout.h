// Block layouts and their registry (src/model/README.md, "Layouts"). A layout owns everything it
// needs: the forward order of norms and sublayers, which parameters exist (its BlockPlan, so
// checkpoint names follow the layout), its config keys (model.<layout>.<key>), its auto values and
// its init rule (the fields and hooks of LayoutType). Adding a layout = one file defining
// `LayoutType xxx_layout()` + one line in registry.cpp.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "core/torch.h"

namespace normlab {

class BlockImpl;
class TransformerImpl;
class LayerSeries;
class ResidualStream;
struct BlockOptions;

// x -> x after both sublayers. A closure: per-block constants (DeepNorm's alpha, LNS's
// 1/sqrt(i+1)) are captured by the layout that computes them.
using BlockForward = std::function<torch::Tensor(BlockImpl& block, const torch::Tensor& x)>;

// G(z) of an additive layout: the whole term sublayer k (1 attention, 2 FFN) adds to the stream
// on input z (LayerScale included). A residual type other than add wraps it (src/model/residual/).
using BlockTerm = std::function<torch::Tensor(BlockImpl& block, int k, const torch::Tensor& z)>;

// What one block of a layout consists of.
struct BlockPlan {
  std::string layout;                  // the per-block layout name (mix resolves to pre/post)
  BlockForward forward;
  // Set by additive layouts (every sublayer is x = x + G(x)), empty for the others; their forward
  // is x + G(x) on each sublayer in turn (additive_plan).
  BlockTerm term;
  std::vector<std::string> norm_slots; // subset of norm1, norm1_out, norm2, norm2_out
  // What the layout changes in the block's sublayers, as their options (NormFormer's head scale
  // and FFN mid norm, Sub-LN's inner and mid norms, HybridNorm's q/k/v norms, nGPT's q/k map and
  // hidden activation): called on a copy of the block's options before the sublayers are built.
  std::function<void(BlockOptions& o)> sublayers;
  // Learnable [d] vectors the layout's forward reads with BlockImpl::scaled(name, x) or
  // BlockImpl::vector(name), and their initial value (NormFormer's resid_scale1/2, nGPT's
  // alpha1/2). Registered as blocks.{i}.{name}.
  std::vector<std::pair<std::string, double>> vectors;
};

// What a layout's reference equation may use of one block (tests/model/layouts/layouts_test.cpp
// builds it from a real block whose sublayers are stubbed): its norms by slot, its two sublayers,
// its parameters by name, scaled(name, v) = v * the block's parameter `name` where the block has
// it, else v (LayerScale's ls1 / ls2, NormFormer's resid_scale1 / 2), the block's index and the
// resolved config.
struct BlockReference {
  std::function<torch::Tensor(const char* slot, const torch::Tensor& x)> norm;
  std::function<torch::Tensor(const torch::Tensor& x)> attn, ffn;
  std::function<torch::Tensor(const char* name)> param;
  std::function<torch::Tensor(const char* name, const torch::Tensor& v)> scaled;
  int64_t layer = 0;
  const ModelConfig* model = nullptr;
};
// The block's equation written a second time, apart from the plan's forward, in composed ops: x
// (for a layout with its own carrier, the carrier's stacked state: ResiDual's [x, dual]) -> the
// block's output. The tests hold every registered layout's blocks to it.
using BlockEquation = std::function<torch::Tensor(const torch::Tensor& x, const BlockReference& r)>;

struct LayoutType {
  std::string name;
  std::string equation;  // per sublayer F, as in the contract table
  bool final_norm = true;
  // Block i's plan; m is resolved (resolve has run).
  std::function<BlockPlan(int64_t layer, const ModelConfig& m)> plan;
  BlockEquation reference;  // required (LayoutTest.EveryRegisteredLayoutStatesItsEquation)
  // The config keys this layout owns, model.<name>.<key> (read as m.keys.number("<name>.<key>")):
  // a value other than the default under another layout is a config error (config/owned_keys.h).
  std::vector<KeySpec> keys;
  bool qkv_norm = false;  // q, k and v norms forced on in every block (qk_norm_axis/position apply)
  // Its sublayers' terms join an unnormalised stream as x + G (an additive plan): CompleteP's
  // branch multiplier applies (param.type completep needs it).
  bool depth_branch = false;
  // The layout has its own parametrization (nGPT): param.type mup and completep do not apply.
  bool own_parametrization = false;
  // Optional hooks.
  // Fill this layout's auto values (once, in resolve_model_config), so the resolved config
  // records the numbers and the plan and init read them.
  std::function<void(ModelConfig& m)> resolve;
  // Runs after the init scheme has drawn every parameter (the per-layout init rules of src/model/README.md).
  std::function<void(TransformerImpl& model, const ModelConfig& m)> init;
  // Config rules of the layout's scope beyond its own keys (nGPT needs rope, swiglu, ...): each
  // problem as add(key, message).
  std::function<void(const Config& c, const std::function<void(const std::string&, const std::string&)>& add)> check;
  // The least a config made for another layout needs changed to be valid under this one (what
  // `check` demands): nGPT sets rope, SwiGLU, an untied head, no bias and no weight decay, and puts
  // the options it has no use for back to their defaults. Whatever enumerates the registry (tests,
  // docs checks) builds its configs through fit_to_layout; a layout with a `check` has one
  // (LayoutRegistryTest holds every layout's fitted default config valid).
  std::function<void(Config& c)> fit;
  // A layout that carries more than x between blocks (ResiDual: x and its dual stream) supplies its
  // carrier, through the interface the residual types use (model/residual/residual.h); the others
  // run on the residual type's carrier.
  std::function<std::unique_ptr<ResidualStream>(TransformerImpl& model, const ModelConfig& m)> make_stream;
  // The layout's own map of the head's logits (nGPT's s_z scaling), before any logit softcap:
  // registers its top-level parameters on the model at construction (after lm_head) and returns
  // the map, which holds them.
  using HeadMap = std::function<torch::Tensor(const torch::Tensor& logits)>;
  std::function<HeadMap(TransformerImpl& model, const ModelConfig& m)> head;
  // After each applied update (after clipping and the optimizer step, once per update, on every
  // rank; not after a skipped one) and at the end of init (nGPT's renormalisation).
  std::function<void(TransformerImpl& model)> after_update;
  // Diagnostics of block i (capture on): the layout's own per-block series.
  std::function<void(BlockImpl& block, const ModelConfig& m, LayerSeries& stats)> block_stats;
};

const std::vector<LayoutType>& layout_registry();
// c with model.layout = l's name and l's fit applied. The ModelConfig form fits a default Config
// around m (for tests that build a model without a whole config).
Config fit_to_layout(const LayoutType& l, Config c);
ModelConfig fit_to_layout(const LayoutType& l, const ModelConfig& m);
const LayoutType* find_layout(const std::string& name);  // nullptr if unknown
std::string layout_names();

// A plan whose forward is h = x + G(1, x); h + G(2, h).
BlockPlan additive_plan(const std::string& layout, BlockTerm term);
// Whether every block of the (resolved) config's layout is additive.
bool layout_is_additive(const ModelConfig& m);

// Plans of the plain layouts, reused by composite ones (mix, hybrid's first block).
BlockPlan pre_plan(int64_t layer, const ModelConfig& m);
BlockPlan post_plan(int64_t layer, const ModelConfig& m);

// For init hooks: every matrix (role) of the blocks, in named_parameters() order, and whether it
// is one of the block's branch weights (BlockImpl::branch_weights: DeepNorm's beta, Sub-LN's gamma).
void for_each_block_matrix(TransformerImpl& model, const std::function<void(torch::Tensor& w, bool branch)>& fn);

}  // namespace normlab
