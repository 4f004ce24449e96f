// NorMuon (Li et al. 2025, its authors' code zichongli5/NorMuon): Muon whose orthogonalised update
// is normalised per row by a running second moment V [A, 1] (0 at start), beta2 = optim.muon.beta2:
//   V  = beta2 V + (1 - beta2) mean over the row of O^2
//   O' = O / (sqrt(V) + 1e-10);   O = O' |O|_F / (|O'|_F + 1e-10)
// Its state adds `<name>.normuon_v`; everything else is Muon's (optim/muon.h).
#include "optim/muon.h"
#include "optim/registry.h"

namespace normlab {

namespace {
class NorMuon : public Muon {
 public:
  NorMuon(std::vector<RatedParam> params, const MuonSettings& s) : Muon(std::move(params), s) {
    for (const auto& p : params_) row_v_.push_back(torch::zeros({p.tensor.size(0), 1}, p.tensor.options()));
  }
  const char* name() const override { return "normuon"; }

  NamedTensors state() const override {
    NamedTensors out = Muon::state();
    for (size_t i = 0; i < params_.size(); ++i) out.emplace_back(params_[i].name + ".normuon_v", row_v_[i]);
    return out;
  }
  void load_state(const NamedTensors& state, int64_t steps) override {
    Muon::load_state(state, steps);
    restore_state(state, params_.size(), [&](size_t i) { return params_[i].name + ".normuon_v"; },
                  [&](size_t i) -> torch::Tensor& { return row_v_[i]; });
  }

 protected:
  void shape_update(size_t i, torch::Tensor& O) override {
    auto& V = row_v_[i];
    const auto norm_before = O.norm();
    V.lerp_((O * O).mean(-1, /*keepdim=*/true), 1.0 - s_.beta2);
    O.mul_(1.0 / (V.sqrt() + 1e-10));
    O.mul_(norm_before / (O.norm() + 1e-10));
  }

 private:
  std::vector<torch::Tensor> row_v_;
};
}  // namespace

OptimizerEntry normuon_optimizer() {
  OptimizerEntry e;
  e.name = "normuon";
  e.summary = "NorMuon (Muon with a per-row second moment) for role matrix, AdamW for every other role";
  e.section = "muon";
  e.keys = muon_keys();
  e.keys.push_back({"beta2", KeyKind::kNumber, MuonSettings{}.beta2, "decay of NorMuon's per-row second moment", {},
                    check_unit_interval});
  e.together = check_muon_keys;
  e.width_aware_matrices = true;
  e.make = [](std::vector<RatedParam> params, const OptimConfig& o) {
    const MuonSettings s = MuonSettings::from(o);
    return matrices_by(std::move(params), o,
                       [&](std::vector<RatedParam> m) { return std::make_unique<NorMuon>(std::move(m), s); });
  };
  return e;
}

}  // namespace normlab
