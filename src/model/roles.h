// Parameter roles (src/model/README.md, "Parameter roles"): every parameter's role is declared
// by the code that creates it, right where it is created (a norm's factory, a block's linear maps,
// a residual entry's constructor, the embeddings). Weight decay, the optimizer that updates a
// parameter and its learning-rate multiplier follow from the role alone; nothing reads a name.
//
// The role travels with the tensor itself (its TensorImpl, which `module->to(device)` keeps), in
// a table that forgets a tensor once it is freed. A later declaration replaces an earlier one: a
// residual entry claims the norms it builds as `mixing`, though make_norm declared them `gain`.
#pragma once

#include <optional>

#include "config/config.h"
#include "core/torch.h"

namespace normlab {

// Declares p's role; returns p, so creation and declaration read as one statement.
const torch::Tensor& with_role(const torch::Tensor& p, Role role);
// Declares the role of every parameter of m and its submodules.
void declare_roles(const torch::nn::Module& m, Role role);
// A Linear's weight as `matrix` (or `head`) and its bias as `bias`.
void declare_linear(const torch::nn::Linear& l, Role weight_role = Role::kMatrix);
// A new in -> out Linear (bias or not), declared as above: the sublayers' linear maps.
torch::nn::Linear make_linear(int64_t in, int64_t out, bool bias, Role weight_role = Role::kMatrix);
// The declared role, or nothing for a tensor nobody declared.
std::optional<Role> role_of(const torch::Tensor& p);

// Decoupled weight decay applies to matrix, embedding and head only, under every optimizer.
inline bool role_decays(Role r) { return r == Role::kMatrix || r == Role::kEmbedding || r == Role::kHead; }

}  // namespace normlab
