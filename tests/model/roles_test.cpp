// Parameter roles (src/model/README.md, "Parameter roles"): every parameter of every model the
// registries can build has a declared role, that role is the contract's for its tensor name, and
// weight decay follows from it exactly as the pre-roles rule decided (>= 2 dimensions, minus the
// residual-stream and value-residual tensors). The expected role is derived here from the tensor
// name by the contract's list, independently of the code under test (which never reads names).
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>

#include "config/load.h"
#include "model/roles.h"
#include "model/transformer.h"

namespace normlab {
namespace {

// The contract's role of a tensor name (section "Parameter roles").
Role expected_role(const std::string& n) {
  static const std::regex mixing(R"((^|\.)(vres_\w*|hc\d+|mhc\d+|mhc_head|attnres\d+|final_attnres)(\.|$))");
  static const std::regex matrix(R"(^blocks\.\d+\.(attn\.(q_proj|k_proj|v_proj|out_proj|gate)|ffn\.(fc1|gate|fc2))\.weight$)");
  static const std::regex bias(R"(^blocks\.\d+\.(attn\.(q_proj|k_proj|v_proj|out_proj|gate)|ffn\.(fc1|gate|fc2))\.bias$)");
  if (std::regex_search(n, mixing)) return Role::kMixing;
  if (n == "tok_emb.weight" || n == "pos_emb.weight") return Role::kEmbedding;
  if (n == "lm_head.weight") return Role::kHead;
  if (std::regex_match(n, matrix)) return Role::kMatrix;
  if (std::regex_match(n, bias)) return Role::kBias;
  return Role::kGain;  // norm parameters, ls*, resid_scale*, head_scale, nGPT's alphas and s_*
}

// Names that must be gains (the remaining list is long; a wrong guess above would show here).
bool looks_like_gain(const std::string& n) {
  static const std::regex gain(
      R"((^|\.)(embed_norm|final_norm|norm1|norm1_out|norm2|norm2_out|q_norm|k_norm|v_norm|inner_norm|mid_norm)\.(weight|bias|alpha|shift)$|(^|\.)(ls1|ls2|resid_scale1|resid_scale2|head_scale|alpha1|alpha2|s_qk|s_u|s_v|s_z)$)");
  return std::regex_search(n, gain);
}

ModelConfig tiny(const std::string& layout, const std::string& norm) {
  ModelConfig m;
  m.ctx = 8;
  m.d_model = 16;
  m.n_layers = 2;
  m.n_heads = 2;
  m.d_ff = 32;
  m.norm.type = norm;
  return fit_to_layout(*find_layout(layout), m);
}

struct Checked {
  int models = 0, params = 0;
};

void check_model(ModelConfig m, Checked& c, const std::string& what) {
  ConfigSource src;
  Problems p(src);
  resolve_model_config(m);
  check_model_config(m, p);
  if (!p.empty()) return;  // a combination the config checks refuse
  Transformer t(m);
  ++c.models;
  for (const auto& kv : t->named_parameters()) {
    const std::string& n = kv.key();
    const auto role = role_of(kv.value());
    ASSERT_TRUE(role.has_value()) << what << ": " << n << " has no role";
    const Role want = expected_role(n);
    EXPECT_EQ(*role, want) << what << ": " << n << " is " << choice_name(*role) << ", the contract says "
                           << choice_name(want);
    if (want == Role::kGain) {
      EXPECT_TRUE(looks_like_gain(n)) << what << ": " << n << " is no parameter the contract lists";
    }
    // The rule before roles: decay on >= 2 dimensions, except the stream methods' tensors.
    const bool decayed_before = kv.value().dim() >= 2 && want != Role::kMixing;
    EXPECT_EQ(role_decays(*role), decayed_before) << what << ": " << n;
    ++c.params;
  }
}

TEST(RolesTest, EveryParameterOfEveryRegistryCombinationHasTheContractsRole) {
  Checked c;
  for (const auto& l : layout_registry()) {
    for (const auto& n : norm_registry()) {
      for (const auto& r : residual_registry()) {
        for (const auto& vr : value_residual_registry()) {
          const std::string& v = vr.name;
          ModelConfig m = tiny(l.name, n.name);
          m.residual.type = r.name;
          m.value_residual = v;
          check_model(m, c, l.name + "/" + n.name + "/" + r.name + "/" + v);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
  // Options that add tensors: biases, gates, untied head, LayerScale, q/k/v norms, NormFormer's
  // skip scales, learned positions off, an embedding norm, SwiGLU.
  for (const auto& l : layout_registry()) {
    ModelConfig m = tiny(l.name, "layernorm");
    m.bias = true;
    m.attn_gate = AttnGate::kHead;
    m.tie_embeddings = false;
    m.layerscale = 0.1;
    m.qk_norm = true;
    m.v_norm = true;
    m.embed_norm = true;
    m.ffn = "swiglu";
    m = fit_to_layout(l, m);  // nGPT: its options off
    check_model(m, c, l.name + " with options");
    m.attn_gate = AttnGate::kElementwise;
    check_model(m, c, l.name + " with elementwise gate");
  }
  ModelConfig nf = tiny("normformer", "layernorm");
  nf.keys.set("normformer.resid_scale", std::string("all"));
  check_model(nf, c, "normformer resid_scale all");
  EXPECT_GT(c.models, 400);  // most of the product is buildable
  EXPECT_GT(c.params, 10000);
}

// The role is the tensor's own: it survives a move to another dtype/device in place (module.to
// keeps the TensorImpl) and a tied head reads as embedding.
TEST(RolesTest, RoleSurvivesModuleToAndTiedHeadIsEmbedding) {
  ModelConfig m = tiny("pre", "layernorm");
  resolve_model_config(m);
  Transformer t(m);
  t->to(torch::kDouble);
  for (const auto& kv : t->named_parameters()) ASSERT_TRUE(role_of(kv.value()).has_value()) << kv.key();
  EXPECT_EQ(role_of(t->tok_emb->weight), Role::kEmbedding);
  EXPECT_FALSE(t->lm_head);
}

TEST(RolesTest, UndeclaredTensorHasNoRoleAndALaterDeclarationWins) {
  auto a = torch::zeros({2, 2});
  EXPECT_FALSE(role_of(a).has_value());
  with_role(a, Role::kGain);
  with_role(a, Role::kMixing);
  EXPECT_EQ(role_of(a), Role::kMixing);
  EXPECT_FALSE(role_of(torch::zeros({2, 2})).has_value());
}

// Init follows the role, never the name: a 2-D mixing tensor named like an output map
// (extra.out_proj.weight) keeps its value, and each role's own rule holds on tensors with names
// init has never seen (an embedding named w1 gets embed_std). Seen failing with role mixing drawn
// by the scheme (planted, then reverted).
TEST(RolesTest, InitDrawsEachTensorByItsRoleWhateverItsName) {
  ModelConfig m = tiny("pre", "layernorm");
  resolve_model_config(m);
  Transformer t(m);
  auto extra = t->register_module("extra", std::make_shared<torch::nn::Module>());
  const auto gain = extra->register_parameter("gain", with_role(torch::full({64, 64}, 3.0), Role::kGain));
  auto out_proj = extra->register_module("out_proj", std::make_shared<torch::nn::Module>());
  const auto mixing = out_proj->register_parameter("weight", with_role(torch::full({64, 64}, 5.0), Role::kMixing));
  const auto emb = extra->register_parameter("w1", with_role(torch::zeros({256, 64}), Role::kEmbedding));
  const auto mat = extra->register_parameter("w2", with_role(torch::zeros({256, 64}), Role::kMatrix));
  const auto bias = extra->register_parameter("w3", with_role(torch::ones({64}), Role::kBias));
  InitConfig init;
  init.std = 0.1;
  init.embed_std = 1.0;
  torch::manual_seed(0);
  init_weights(t, init);
  EXPECT_TRUE(torch::equal(gain, torch::full({64, 64}, 3.0)));
  EXPECT_TRUE(torch::equal(mixing, torch::full({64, 64}, 5.0)));
  EXPECT_NEAR(emb.std().item<double>(), 1.0, 0.05);
  EXPECT_NEAR(mat.std().item<double>(), 0.1, 0.005);  // a matrix outside any block: never the scaled-residual std
  EXPECT_EQ(bias.abs().sum().item<double>(), 0.0);
  // The blocks' output maps are found from the structure: init.std / sqrt(2L).
  const double want = 0.1 / std::sqrt(2.0 * m.n_layers);
  EXPECT_NEAR(t->block(0)->attention()->out_proj->weight.std().item<double>(), want, 0.15 * want);
  EXPECT_NEAR(t->block(1)->feed_forward()->fc2->weight.std().item<double>(), want, 0.15 * want);
  EXPECT_NEAR(t->block(1)->attention()->q_proj->weight.std().item<double>(), 0.1, 0.015);
}

}  // namespace
}  // namespace normlab
