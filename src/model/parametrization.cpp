#include "model/parametrization.h"

#include <cmath>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "config/load.h"
#include "model/transformer.h"

namespace normlab {

Parametrization Parametrization::of(const ModelConfig& m, const ParamConfig& p) {
  Parametrization z;
  z.type = find_parametrization(p.type);
  if (z.type == nullptr)
    throw std::invalid_argument(fmt::format("param.type '{}' is not a registered parametrization", p.type));
  ParamShape& s = z.shape;
  s.head_dim = m.n_heads > 0 ? m.d_model / m.n_heads : 0;
  const double d = static_cast<double>(m.d_model), L = static_cast<double>(m.n_layers);
  s.base_depth = z.type->reads_key("base_depth") ? p.base_depth.value_or(L) : L;
  s.base_head_dim = z.type->reads_key("base_head_dim") ? p.base_head_dim.value_or(static_cast<double>(s.head_dim))
                                                       : static_cast<double>(s.head_dim);
  if (z.type->reads_key("base_width")) s.m_n = d / p.base_width.value_or(d);
  if (z.type->reads_key("base_depth")) s.m_l = L / s.base_depth;
  s.alpha = p.alpha;
  s.output_mult = p.output_mult;
  for (auto [f, aware] : {std::pair{&z.plain_, false}, std::pair{&z.width_aware_, true}}) {
    f->residual_init_depth = L;
    if (z.type->factors) z.type->factors(s, aware, *f);
  }
  return z;
}

double Parametrization::lr_mult(Role r, bool in_block, bool width_aware_matrices) const {
  const RoleFactors f = (width_aware_matrices ? width_aware_ : plain_).role(r);
  return in_block ? f.lr_in_block : f.lr_outside;
}

double Parametrization::decay_mult(Role r, bool width_aware_matrices) const {
  return (width_aware_matrices ? width_aware_ : plain_).role(r).decay;
}

std::vector<std::string> Parametrization::role_table(bool width_aware_matrices) const {
  std::vector<std::string> out;
  out.push_back(fmt::format("param {}: m_N {:.6g}, m_L {:.6g}, score scale sqrt(base_head_dim {:.6g} / dh {}) / sqrt(dh), "
                            "readout x{:.6g}, branch x{:.6g}",
                            type ? type->name : "?", shape.m_n, shape.m_l, shape.base_head_dim, shape.head_dim,
                            readout_mult(), branch_mult()));
  for (const auto& e : ChoiceTable<Role>::entries) {
    const RoleFactors r = (width_aware_matrices ? width_aware_ : plain_).role(e.value);
    const double init = e.value == Role::kMatrix ? matrix_init_mult() : 1.0;
    const std::string lr = r.lr_in_block == r.lr_outside
                               ? fmt::format("{:.6g}", r.lr_in_block)
                               : fmt::format("{:.6g} in blocks, {:.6g} outside", r.lr_in_block, r.lr_outside);
    out.push_back(fmt::format("  role {:<9} init x{:.6g}, lr x{}, decay x{:.6g}", e.name, init, lr, r.decay));
  }
  return out;
}

namespace {

// Whether a base-shape key of `param` holds a value of its own: a number other than what auto
// resolves to (a resolved config.yaml records those; they are no knob), or a non-default value.
bool holds_own_value(const std::string& key, const ParamConfig& p, const ModelConfig& m) {
  const ParamConfig defaults;
  const double d = static_cast<double>(m.d_model), L = static_cast<double>(m.n_layers);
  auto differs = [](const std::optional<double>& v, double auto_value) { return v && *v != auto_value; };
  if (key == "base_width") return differs(p.base_width, d);
  if (key == "base_head_dim")
    return m.n_heads > 0 && differs(p.base_head_dim, p.base_width.value_or(d) / static_cast<double>(m.n_heads));
  if (key == "output_mult") return p.output_mult != defaults.output_mult;
  if (key == "base_depth") return differs(p.base_depth, L);
  if (key == "alpha") return p.alpha != defaults.alpha;
  throw std::logic_error("param." + key + " is not a base-shape key (param_base_keys)");
}

// "a", "a and b", "a, b and c".
std::string and_list(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return out;
}

}  // namespace

void resolve_param_config(ParamConfig& p, const ModelConfig& m) {
  // Only what the mode reads: the base shape means nothing to the rest and stays auto (so that a
  // resumed sp run whose width changed is refused for its width alone).
  const ParametrizationType* t = find_parametrization(p.type);
  if (t == nullptr) return;
  const double d = static_cast<double>(m.d_model);
  if (t->reads_key("base_width") && !p.base_width) p.base_width = d;
  if (t->reads_key("base_head_dim") && !p.base_head_dim && m.n_heads > 0)
    p.base_head_dim = p.base_width.value_or(d) / static_cast<double>(m.n_heads);
  if (t->reads_key("base_depth") && !p.base_depth) p.base_depth = static_cast<double>(m.n_layers);
}

void check_param_config(const Config& c, const ResolvedModel& entries, Problems& problems) {
  const ParamConfig& p = c.param;
  const ModelConfig& m = c.model;
  const ParametrizationType* t = find_parametrization(p.type);
  if (t == nullptr)
    problems.add("param.type", fmt::format("'{}' is not a registered parametrization; expected one of: {}", p.type,
                                           parametrization_names()));
  auto positive = [&](const char* key, const std::optional<double>& v) {
    if (v && !(*v > 0 && std::isfinite(*v))) problems.add(key, fmt::format("{} must be a finite number > 0 or auto", *v));
  };
  positive("param.base_width", p.base_width);
  positive("param.base_depth", p.base_depth);
  positive("param.base_head_dim", p.base_head_dim);
  if (!(p.output_mult > 0) || !std::isfinite(p.output_mult))
    problems.add("param.output_mult", fmt::format("{} must be a finite number > 0", p.output_mult));
  if (!(p.alpha >= 0.5 && p.alpha <= 1)) problems.add("param.alpha", fmt::format("{} must be in [0.5, 1]", p.alpha));
  if (t == nullptr) return;
  // Keys the mode does not read: a value of their own would do nothing.
  for (const std::string& key : param_base_keys()) {
    if (t->reads_key(key) || !holds_own_value(key, p, m)) continue;
    std::vector<std::string> owners;
    for (const auto& e : parametrization_registry()) {
      if (e.reads_key(key)) owners.push_back(e.name);
    }
    problems.add("param." + key, fmt::format("belongs to param.type {} (param.type is {}); it would do nothing here",
                                             and_list(owners), t->name));
  }
  if (t->check) t->check(c, entries, problems);
}

void check_param_config(const Config& c, Problems& problems) { check_param_config(c, ResolvedModel::of(c.model), problems); }

}  // namespace normlab
