// Attention Residuals (Kimi, 2026; the paper's pseudocode as Megatron-LM implements it): each
// sublayer reads a softmax-weighted mix of earlier sources instead of their running sum. With
// o_s sublayer s's output, S = attnres_block sublayers per group, B_g = sum of the o_s of group g
// and m = floor(s / S), sublayer s reads V(s) = [e, B_0, .., B_{m-1}] plus, when s > mS, the partial
// sum P of its group so far:
//   h_s = sum_j a_j V_j,  a = softmax_j(query . rmsnorm(V_j));   o_s = G_s(h_s)
// and the final norm reads the same mix over V(2L) (final_attnres). S = 1 is Full AttnRes (every
// output its own source), even S Block AttnRes. query = 0 at init: uniform weights.
#include <fmt/format.h>

#include "core/torch_compat.h"
#include "model/norms/norm.h"
#include "model/residual/residual.h"
#include "model/roles.h"
#include "model/transformer.h"

namespace normlab {
namespace {

class AttnResImpl : public torch::nn::Module {
 public:
  AttnResImpl(int64_t d, const NormOptions& no) {
    query = register_parameter("query", torch::zeros({d}));
    norm = register_module("norm", make_norm("rmsnorm", no));
    declare_roles(*this, Role::kMixing);  // its norm's weight included
  }
  // V: the sources, each (B, T, d) -> their weights (B, T, J) and the mix (B, T, d).
  std::pair<torch::Tensor, torch::Tensor> forward(const std::vector<torch::Tensor>& V) {
    auto stacked = torch::stack(V, -2);  // (B, T, J, d)
    torch::Tensor a;
    {
      NoAutocastGuard fp32;
      auto k = norm->forward(stacked);
      a = torch::softmax(torch::matmul(k, query.to(k.scalar_type())), -1);  // (B, T, J)
    }
    return {a, weighted_sum(a, V)};
  }
  torch::Tensor query;
  NormPtr norm;
};
TORCH_MODULE(AttnRes);

class AttnResStream : public TermStream {
 public:
  AttnResStream(std::vector<AttnRes> subs, AttnRes final, int64_t S)
      : subs_(std::move(subs)), final_(std::move(final)), S_(S) {}

  void start(const torch::Tensor& e) override {
    sources_ = {e};
    partial_ = torch::Tensor();
    done_ = 0;
    weights_.clear();
  }
  void sublayer(int64_t s, const SublayerTerm& G) override {
    auto o = G(read(subs_[s]));
    done_ = s + 1;
    partial_ = partial_.defined() ? partial_ + o : o;
    if ((s + 1) % S_ == 0) {  // the group is complete: it becomes a source
      sources_.push_back(partial_);
      partial_ = torch::Tensor();
    }
  }
  torch::Tensor finish() override {
    auto x = read(final_);
    sources_.clear();
    partial_ = torch::Tensor();
    return x;
  }
  // What the next sublayer reads (h_{2j} before block j; the final mix after the last block).
  torch::Tensor view() override {
    torch::NoGradGuard ng;
    AttnRes& next = done_ < static_cast<int64_t>(subs_.size()) ? subs_[done_] : final_;
    return next->forward(current()).second;
  }
  void end_block(int64_t, LayerSeries&) override {}

  std::vector<std::pair<std::string, torch::Tensor>> depth_weights() const override {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (size_t r = 0; r < weights_.size(); ++r) {
      out.emplace_back(r < subs_.size() ? fmt::format("blocks.{}.attnres{}", r / 2, r % 2 + 1) : "final_attnres",
                       weights_[r]);
    }
    return out;
  }

 private:
  std::vector<torch::Tensor> current() const {
    auto V = sources_;
    if (partial_.defined()) V.push_back(partial_);
    return V;
  }
  torch::Tensor read(AttnRes& r) {
    auto [a, h] = r->forward(current());
    if (capture_) weights_.push_back(a.detach().to(torch::kFloat).mean(std::vector<int64_t>{0, 1}));
    return h;
  }

  std::vector<AttnRes> subs_;
  AttnRes final_;
  int64_t S_;
  int64_t done_ = 0;  // sublayers done in this forward
  std::vector<torch::Tensor> sources_, weights_;
  torch::Tensor partial_;
};
}  // namespace

ResidualType attnres_residual() {
  ResidualType t;
  t.name = "attnres";
  t.equation = "h_s = sum_j softmax_j(q . rmsnorm(V_j)) V_j over [e, group sums, partial]; o_s = G(h_s)";
  t.keys = {{"attnres_block", KeyKind::kInteger, int64_t{1},
             "sublayers per source group S (1 = Full AttnRes, even = Block AttnRes)", {},
             [](const KeyValue& v, const ModelConfig& m) {
               const int64_t S = std::get<int64_t>(v);
               if (S == 1 || (S >= 2 && S <= 2 * m.n_layers && S % 2 == 0)) return std::string();
               return fmt::format("must be 1 or even in [2, 2 * n_layers = {}]", 2 * m.n_layers);
             }}};
  t.make_terms = [](TransformerImpl& model, const ModelConfig& m) -> std::unique_ptr<TermStream> {
    NormOptions no;
    no.size = m.d_model;
    no.eps = norm_eps(m, "rmsnorm");
    std::vector<AttnRes> subs;  // role mixing: they keep these constructor values through init
    register_per_sublayer(model, "attnres", [&](int64_t, int) {
      subs.emplace_back(m.d_model, no);
      return subs.back().ptr();
    });
    AttnRes final(m.d_model, no);
    model.register_module("final_attnres", final.ptr());
    return std::make_unique<AttnResStream>(std::move(subs), final, m.residual.keys.integer("residual.attnres_block"));
  };
  t.cost = [](const ModelConfig& m) {  // every read stacks up to 2L + 1 sources (normed and weighted)
    const double d = m.d_model, sources = 2.0 * m.n_layers + 1;
    return ResidualCost{(2.0 * m.n_layers + 1) * 3 * d, 2 * sources};
  };
  return t;
}

}  // namespace normlab
