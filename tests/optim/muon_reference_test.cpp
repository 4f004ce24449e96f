// Every rule of the optimizers (src/optim/README.md) against scripts/reference_optim.py,
// an independent float64 numpy implementation written from the contract: a tiny model's
// parameters (every role, the tied head or an untied one) take K updates from seeded gradients
// through NormLab's Optimizer, the same initial weights, gradients and schedule factors go to the
// reference, and the weights after K updates must agree to 1e-3 of the update's size (fp32
// Newton-Schulz; 1e-2 with bf16 products, whose rounding order differs). Covered: adamw, muon,
// normuon, both Newton-Schulz variants, cautious decay, both adjust_lr rules, Nesterov off,
// lr_mult per role. Integration tier: it starts python.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "core/system.h"
#include "model/roles.h"
#include "model/transformer.h"
#include "test_util.h"
#include "optim/muon.h"
#include "optim/optimizer.h"
#include "train/step.h"
#include "train/safetensors.h"

namespace normlab {
namespace {

struct MuonCase {
  std::string name;
  std::string type;
  NsKind ns = NsKind::kKeller;
  NsDtype dtype = NsDtype::kFp32;
  AdjustLr adjust = AdjustLr::kOriginal;
  bool cautious = false, nesterov = true, tied = true;
  double tol = 1e-3;
  int64_t width = 16;  // d_model; d_ff = 2.5 width
  std::string param = "sp";  // mup, completep: base width 8 (m_N 2), base depth 1 (m_L 2), alpha 0.5
};

std::string json_config(const MuonCase& c, const OptimConfig& o, const std::vector<double>& f,
                        const std::vector<std::pair<std::string, Role>>& roles) {
  std::string fs, rs;
  for (double v : f) fs += (fs.empty() ? "" : ",") + fmt::format("{:.17g}", v);
  for (const auto& [n, r] : roles) rs += (rs.empty() ? "" : ",") + fmt::format("\"{}\":\"{}\"", n, choice_name(r));
  const MuonSettings m = MuonSettings::from(o);
  return fmt::format(
      R"({{"type":"{}","K":{},"lr":{:.17g},"f":[{}],"betas":[{:.17g},{:.17g}],"eps":{:.17g},"weight_decay":{:.17g},)"
      R"("lr_mult":{{"embedding":{},"head":{},"gain":{},"bias":{},"mixing":{}}},)"
      R"("muon":{{"lr":{:.17g},"momentum":{:.17g},"nesterov":{},"ns":"{}","ns_steps":{},"ns_dtype":"{}","adjust_lr":"{}","beta2":{:.17g},"cautious_wd":{}}},)"
      R"("roles":{{{}}},"param":{{"type":"{}","m_n":{:.17g},"m_l":{:.17g},"alpha":{:.17g}}}}})",
      o.type, f.size(), o.lr, fs, o.betas[0], o.betas[1], o.eps, o.weight_decay, o.lr_mult.embedding,
      o.lr_mult.head, o.lr_mult.gain, o.lr_mult.bias, o.lr_mult.mixing, m.lr, m.momentum, m.nesterov ? "true" : "false",
      choice_name(m.ns), m.ns_steps, choice_name(m.ns_dtype), choice_name(m.adjust_lr), m.beta2,
      m.cautious_wd ? "true" : "false", rs, c.param, c.param == "sp" ? 1.0 : 2.0,
      c.param == "completep" ? 2.0 : 1.0, c.param == "completep" ? 0.5 : 1.0);
}

void run_case(const MuonCase& c) {
  SCOPED_TRACE(c.name);
  ModelConfig mc;
  mc.ctx = 8;
  mc.d_model = c.width;
  mc.n_layers = 2;
  mc.n_heads = 2;
  mc.d_ff = c.width * 5 / 2;  // width 16: fc1 [40, 16] is tall, fc2 [16, 40] wide
  mc.bias = true;
  mc.attn_gate = AttnGate::kHead;  // gate [2, 16]: a very wide matrix
  mc.tie_embeddings = c.tied;
  mc.value_residual = "token";  // mixing tensors, 2-D among them
  resolve_model_config(mc);
  torch::manual_seed(11);
  Transformer model(mc);
  init_weights(model, InitConfig{});
  OptimConfig o;
  o.type = c.type;
  o.lr = 2e-3;
  o.weight_decay = 0.1;
  o.lr_mult.gain = 0.5;
  o.lr_mult.embedding = 2;
  o.lr_mult.head = 0.7;
  o.lr_mult.bias = 1.5;
  o.lr_mult.mixing = 3;
  o.keys.set("muon.ns", std::string(choice_name(c.ns)));
  o.keys.set("muon.ns_dtype", std::string(choice_name(c.dtype)));
  o.keys.set("muon.adjust_lr", std::string(choice_name(c.adjust)));
  o.keys.set("muon.cautious_wd", c.cautious);
  o.keys.set("muon.nesterov", c.nesterov);
  o.keys.set("muon.beta2", 0.9);
  if (c.adjust == AdjustLr::kMatchRmsAdamw) o.keys.set("muon.lr", 2e-3);  // Moonlight's rule takes AdamW-sized rates
  std::vector<std::pair<std::string, torch::Tensor>> named;
  std::vector<std::pair<std::string, Role>> roles;
  NamedTensors in;
  for (auto& kv : model->named_parameters()) {
    named.emplace_back(kv.key(), kv.value());
    roles.emplace_back(kv.key(), *role_of(kv.value()));
    in.emplace_back("w0." + kv.key(), kv.value().detach().clone());
  }
  // The rates of the parametrization, through the code's own path (RoleRates::of and each
  // parameter's place); the reference computes its factors from the contract's table by itself.
  Config cfg;
  cfg.model = mc;
  cfg.optim = o;
  cfg.param.type = c.param;
  if (c.param != "sp") cfg.param.base_width = c.width / 2.0;
  if (c.param == "completep") {
    cfg.param.base_depth = mc.n_layers / 2.0;
    cfg.param.alpha = 0.5;
  }
  std::vector<torch::Tensor> tensors;
  for (const auto& kv : named) tensors.push_back(kv.second);
  std::vector<bool> in_block;
  for (const ParamPlace& p : param_places(*model, tensors)) in_block.push_back(p.block >= 0);
  Optimizer opt(named, o, RoleRates::of(cfg), in_block);
  const int K = 4;
  std::vector<double> f;
  torch::manual_seed(12);
  for (int k = 1; k <= K; ++k) {
    const double lr = o.lr * (1.0 - 0.2 * k);  // any schedule: the factors travel with the input
    f.push_back(lr / o.lr);
    for (auto& [n, p] : named) {
      p.mutable_grad() = 0.05 * torch::randn_like(p);
      in.emplace_back(fmt::format("g{}.{}", k, n), p.grad().clone());
    }
    opt.step(lr);
  }
  testing::TempDir tmp;
  const std::string dir = tmp.path();
  {
    std::ofstream(dir + "/in.safetensors", std::ios::binary)
        << safetensors_bytes(in, {{"config", json_config(c, o, f, roles)}});
  }
  const auto r = testing::run_command("/usr/bin/python3 " + testing::source_dir() + "/scripts/reference_optim.py step --in " +
                                          dir + "/in.safetensors --out " + dir + "/out.safetensors --out-dtype F32",
                                      dir + "/stderr");
  std::ifstream err_file(dir + "/stderr");
  ASSERT_EQ(r.status, 0) << std::string(std::istreambuf_iterator<char>(err_file), {});
  std::map<std::string, torch::Tensor> ref;
  for (auto& [n, t] : read_safetensors(dir + "/out.safetensors").tensors) ref[n] = t;
  int compared = 0;
  for (size_t i = 0; i < named.size(); ++i) {
    const auto& [n, p] = named[i];
    ASSERT_TRUE(ref.count("w." + n)) << n;
    const auto want = ref["w." + n].to(torch::kDouble), got = p.detach().to(torch::kDouble);
    const auto w0 = in[i].second.to(torch::kDouble);
    const double update = (want - w0).abs().max().item<double>();
    const double err = (got - want).abs().max().item<double>();
    EXPECT_LE(err, c.tol * update + 1e-7) << n << " (" << choice_name(roles[i].second) << "): error " << err
                                          << " against an update of " << update;
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(named.size()));
  // The optimizer states by the contract's names.
  for (const auto& [name, t] : opt.state()) {
    std::string key;
    if (name.rfind("exp_avg_sq.", 0) == 0) key = "v." + name.substr(11);
    else if (name.rfind("exp_avg.", 0) == 0) key = "m." + name.substr(8);
    else if (name.size() > 14 && name.compare(name.size() - 14, 14, ".muon_momentum") == 0) key = "muon_momentum." + name.substr(0, name.size() - 14);
    else if (name.size() > 10 && name.compare(name.size() - 10, 10, ".normuon_v") == 0) key = "normuon_v." + name.substr(0, name.size() - 10);
    ASSERT_TRUE(ref.count(key)) << name << " -> " << key;
    const auto want = ref[key].to(torch::kDouble);
    EXPECT_LE((t.to(torch::kDouble) - want).abs().max().item<double>(), 10 * c.tol * want.abs().max().item<double>() + 1e-9) << name;
  }
}

TEST(MuonReferenceTest, AdamwWithRoleMultipliers) { run_case({"adamw", "adamw"}); }
TEST(MuonReferenceTest, MuonKeller) { run_case({"muon_keller", "muon"}); }
// The parametrizations' per-role rates and decays (src/model/README.md, "Parametrization") at
// m_N = 2 (and m_L = 2, alpha 0.5 under completep), under AdamW and Muon.
TEST(MuonReferenceTest, AdamwUnderMupAndCompletep) {
  MuonCase mup{"adamw_mup", "adamw"};
  mup.param = "mup";
  run_case(mup);
  MuonCase completep{"adamw_completep", "adamw"};
  completep.param = "completep";
  run_case(completep);
}
TEST(MuonReferenceTest, MuonUnderMupAndCompletep) {
  MuonCase mup{"muon_mup", "muon"};
  mup.param = "mup";
  run_case(mup);
  MuonCase completep{"muon_completep", "muon"};
  completep.param = "completep";
  run_case(completep);
}
TEST(MuonReferenceTest, MuonPolarExpress) { run_case({"muon_pe", "muon", NsKind::kPolarExpress}); }
TEST(MuonReferenceTest, MuonCautiousMatchRmsUntiedNoNesterov) {
  run_case({"muon_cautious", "muon", NsKind::kKeller, NsDtype::kFp32, AdjustLr::kMatchRmsAdamw, true, false, false});
}
TEST(MuonReferenceTest, NormuonKeller) { run_case({"normuon", "normuon"}); }
TEST(MuonReferenceTest, NormuonPolarExpressCautious) {
  run_case({"normuon_pe", "normuon", NsKind::kPolarExpress, NsDtype::kFp32, AdjustLr::kOriginal, true});
}
TEST(MuonReferenceTest, MuonBf16Products) {
  run_case({"muon_bf16", "muon", NsKind::kKeller, NsDtype::kBf16, AdjustLr::kOriginal, false, true, true, 1e-2});
}
TEST(MuonReferenceTest, NormuonBf16Products) {
  run_case({"normuon_bf16", "normuon", NsKind::kKeller, NsDtype::kBf16, AdjustLr::kOriginal, false, true, true, 1e-2});
}
// Wide enough that the bf16 products take LibTorch's bf16 GEMMs where it computes them as the
// contract says (src/optim/muon.cpp, bf16_gemm_rounds_once): d_model 64, fc1 [160, 64]. Run with
// that path wherever the probe allows it (NsBf16Gemm::kWhereExact), fast on this CPU or not.
TEST(MuonReferenceTest, MuonBf16ProductsOnBf16Gemms) {
  ScopedNsBf16Gemm exact(NsBf16Gemm::kWhereExact);
  if (cpu_has_avx512_bf16()) {
    EXPECT_TRUE(ns_uses_bf16_gemm(160, 64, torch::Device(torch::kCPU)));
  }
  MuonCase c{"muon_bf16_gemm", "muon", NsKind::kPolarExpress, NsDtype::kBf16, AdjustLr::kOriginal, false, true, true, 1e-2};
  c.width = 64;
  run_case(c);
}

}  // namespace
}  // namespace normlab
