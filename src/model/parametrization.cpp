#include "model/parametrization.h"

#include <cmath>

#include <fmt/format.h>

#include "config/load.h"
#include "model/layouts/layout.h"
#include "model/residual/residual.h"
#include "model/transformer.h"

namespace normlab {

Parametrization Parametrization::of(const ModelConfig& m, const ParamConfig& p) {
  Parametrization z;
  z.type = p.type;
  z.head_dim = m.n_heads > 0 ? m.d_model / m.n_heads : 0;
  z.base_depth = p.base_depth.value_or(static_cast<double>(m.n_layers));
  z.base_head_dim = p.base_head_dim.value_or(static_cast<double>(z.head_dim));
  if (p.type == ParamType::kSp) return z;
  z.m_n = static_cast<double>(m.d_model) / p.base_width.value_or(static_cast<double>(m.d_model));
  if (p.type == ParamType::kCompleteP) z.m_l = static_cast<double>(m.n_layers) / z.base_depth;
  z.alpha = p.alpha;
  z.output_mult = p.output_mult;
  return z;
}

double Parametrization::matrix_init_mult() const { return widthwise() ? 1.0 / std::sqrt(m_n) : 1.0; }

double Parametrization::residual_init_depth(int64_t n_layers) const {
  return depthwise() ? base_depth : static_cast<double>(n_layers);
}

double Parametrization::score_q_mult() const {
  return widthwise() ? std::sqrt(base_head_dim / static_cast<double>(head_dim)) : 1.0;
}

double Parametrization::readout_mult() const { return widthwise() ? output_mult / m_n : 1.0; }

double Parametrization::branch_mult() const { return depthwise() ? std::pow(m_l, -alpha) : 1.0; }

double Parametrization::lr_mult(Role r, bool in_block, bool width_aware_matrices) const {
  double f = 1.0;
  if (r == Role::kMatrix && widthwise() && !width_aware_matrices) f /= m_n;
  const double depth = depthwise() ? std::pow(m_l, alpha - 1.0) : 1.0;
  if (r == Role::kMatrix || (in_block && (r == Role::kGain || r == Role::kBias))) f *= depth;
  return f;
}

double Parametrization::decay_mult(Role r, bool width_aware_matrices) const {
  return r == Role::kMatrix && widthwise() && !width_aware_matrices ? m_n : 1.0;
}

std::vector<std::string> Parametrization::role_table(bool width_aware_matrices) const {
  std::vector<std::string> out;
  out.push_back(fmt::format("param {}: m_N {:.6g}, m_L {:.6g}, score scale sqrt(base_head_dim {:.6g} / dh {}) / sqrt(dh), "
                            "readout x{:.6g}, branch x{:.6g}",
                            choice_name(type), m_n, m_l, base_head_dim, head_dim, readout_mult(), branch_mult()));
  for (const auto& e : ChoiceTable<Role>::entries) {
    const Role r = e.value;
    const double init = r == Role::kMatrix ? matrix_init_mult() : 1.0;
    const double lr_in = lr_mult(r, true, width_aware_matrices), lr_out = lr_mult(r, false, width_aware_matrices);
    const std::string lr = lr_in == lr_out ? fmt::format("{:.6g}", lr_in)
                                           : fmt::format("{:.6g} in blocks, {:.6g} outside", lr_in, lr_out);
    out.push_back(fmt::format("  role {:<9} init x{:.6g}, lr x{}, decay x{:.6g}", e.name, init, lr,
                              decay_mult(r, width_aware_matrices)));
  }
  return out;
}

void resolve_param_config(ParamConfig& p, const ModelConfig& m) {
  // Only what the mode reads: under sp the base shape means nothing and stays auto (so that a
  // resumed sp run whose width changed is refused for its width alone).
  if (p.type == ParamType::kSp) return;
  if (!p.base_width) p.base_width = static_cast<double>(m.d_model);
  if (!p.base_head_dim && m.n_heads > 0) p.base_head_dim = *p.base_width / static_cast<double>(m.n_heads);
  if (p.type == ParamType::kCompleteP && !p.base_depth) p.base_depth = static_cast<double>(m.n_layers);
}

void check_param_config(const Config& c, Problems& problems) {
  const ParamConfig& p = c.param;
  const ModelConfig& m = c.model;
  auto positive = [&](const char* key, const std::optional<double>& v) {
    if (v && !(*v > 0 && std::isfinite(*v))) problems.add(key, fmt::format("{} must be a finite number > 0 or auto", *v));
  };
  positive("param.base_width", p.base_width);
  positive("param.base_depth", p.base_depth);
  positive("param.base_head_dim", p.base_head_dim);
  if (!(p.output_mult > 0) || !std::isfinite(p.output_mult))
    problems.add("param.output_mult", fmt::format("{} must be a finite number > 0", p.output_mult));
  if (!(p.alpha >= 0.5 && p.alpha <= 1)) problems.add("param.alpha", fmt::format("{} must be in [0.5, 1]", p.alpha));
  const ParamConfig defaults;
  const char* mode = choice_name(p.type);
  // Keys a mode does not read: a set value would do nothing.
  auto unread = [&](const char* key, bool set, const char* owners) {
    if (set) problems.add(key, fmt::format("belongs to param.type {} (param.type is {}); it would do nothing here", owners, mode));
  };
  // A base that equals what auto resolves to is what a resolved config.yaml records: no knob.
  const double d = static_cast<double>(m.d_model), L = static_cast<double>(m.n_layers);
  auto differs = [](const std::optional<double>& v, double auto_value) { return v && *v != auto_value; };
  if (p.type == ParamType::kSp) {
    unread("param.base_width", differs(p.base_width, d), "mup and completep");
    if (m.n_heads > 0)
      unread("param.base_head_dim", differs(p.base_head_dim, p.base_width.value_or(d) / static_cast<double>(m.n_heads)),
             "mup and completep");
    unread("param.output_mult", p.output_mult != defaults.output_mult, "mup and completep");
  }
  if (p.type != ParamType::kCompleteP) {
    unread("param.base_depth", differs(p.base_depth, L), "completep");
    unread("param.alpha", p.alpha != defaults.alpha, "completep");
  }
  if (p.type == ParamType::kSp) return;
  // Scope: weights from the width to a fixed size would be readouts µP does not treat as such.
  const ResolvedModel entries = ResolvedModel::of(m);
  const ResidualType* residual = entries.residual;
  if (residual && residual->wraps_terms())
    problems.add("param.type", fmt::format("{} needs model.residual.type: add (the {} stream's maps to n streams are "
                                           "not parametrized here)", mode, m.residual.type));
  if (entries.value_residual && !entries.value_residual->outside_parametrization.empty())
    problems.add("param.type", fmt::format("{} does not take model.value_residual: {} ({})", mode, m.value_residual,
                                           entries.value_residual->outside_parametrization));
  if (m.attn_gate == AttnGate::kHead)
    problems.add("param.type", fmt::format("{} does not take model.attn_gate: head (its gate maps the width to one "
                                           "number per head: a readout µP does not scale)", mode));
  const LayoutType* layout = entries.layout;
  if (layout && layout->own_parametrization)
    problems.add("param.type", fmt::format("{} does not apply to layout {}: it has its own parametrization", mode, m.layout));
  else if (layout && p.type == ParamType::kCompleteP && !layout->depth_branch) {
    std::string names;
    for (const auto& l : layout_registry()) {
      if (l.depth_branch) names += (names.empty() ? "" : ", ") + l.name;
    }
    problems.add("param.type", fmt::format("completep needs a layout whose sublayers join an unnormalised stream as "
                                           "x + G ({}); {} normalises or mixes its stream", names, m.layout));
  }
}

}  // namespace normlab
