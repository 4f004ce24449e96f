// Block layouts and their registry (MODEL.md section 2). A layout decides, per block, both the
// forward order of norms and sublayers and which parameters exist (its BlockPlan), so checkpoint
// names follow the layout. Adding a layout = one file + one line in registry.cpp.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/torch.h"

namespace normlab {

class BlockImpl;
using BlockForward = torch::Tensor (*)(BlockImpl& block, const torch::Tensor& x);

// What one block of a layout consists of.
struct BlockPlan {
  const char* layout = "";             // the per-block layout name (mix resolves to pre/post)
  BlockForward forward = nullptr;      // x -> x after both sublayers
  std::vector<std::string> norm_slots; // subset of norm1, norm1_out, norm2, norm2_out
  double alpha = 1.0;                  // DeepNorm skip scale
  bool head_scale = false;             // NormFormer per-head scale
  bool ffn_mid_norm = false;           // NormFormer norm after the FFN activation
  bool resid_scale1 = false;           // NormFormer learnable skip scale, attention
  bool resid_scale2 = false;           // ... and FFN
};

struct LayoutType {
  std::string name;
  std::string equation;  // per sublayer F, as in the contract table
  bool final_norm;
  std::function<BlockPlan(int64_t layer, const ModelConfig& m)> plan;
};

const std::vector<LayoutType>& layout_registry();
const LayoutType* find_layout(const std::string& name);  // nullptr if unknown
std::string layout_names();

// Plans of the plain layouts, reused by composite ones (mix).
BlockPlan pre_plan(int64_t layer, const ModelConfig& m);
BlockPlan post_plan(int64_t layer, const ModelConfig& m);

}  // namespace normlab
