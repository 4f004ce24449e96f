#include "config/owned_keys.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "config/config.h"

namespace normlab {

std::vector<const KeyOwner*> owners_of_section(const std::string& section) {
  std::vector<const KeyOwner*> out;
  for (const auto& o : key_owners()) {
    if (o.section == section && !o.keys.empty()) out.push_back(&o);
  }
  return out;
}

std::vector<std::string> key_sections(OwnerKind kind) {
  std::vector<std::string> out;
  for (const auto& o : key_owners()) {
    if (o.kind == kind && !o.keys.empty() &&
        std::find(out.begin(), out.end(), o.section) == out.end()) {
      out.push_back(o.section);
    }
  }
  return out;
}

bool owner_selected(const KeyOwner& owner, const ModelConfig& m, bool qkv_norm_used) {
  if (owner.kind == OwnerKind::kOptim || owner.kind == OwnerKind::kSchedule) return false;  // check_optim_keys asks optim
  if (owner.kind == OwnerKind::kLayout) return m.layout == owner.name;
  if (owner.kind == OwnerKind::kResidual) return m.residual.type == owner.name;
  return m.norm.type == owner.name || (qkv_norm_used && m.qk_norm_type.value_or(m.norm.type) == owner.name);
}

OwnedValues::OwnedValues(OwnerKind kind) {
  for (const auto& o : key_owners()) {
    if (o.kind != kind) continue;
    for (const auto& k : o.keys) values_[o.section + "." + k.name] = k.default_value;
  }
}

const KeyValue& OwnedValues::get(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) throw std::logic_error("owned config key " + key + " is not declared by any entry");
  return it->second;
}

namespace {
template <class T>
const T& typed(const KeyValue& v, const std::string& key, const char* what) {
  if (const T* p = std::get_if<T>(&v)) return *p;
  throw std::logic_error(fmt::format("owned config key {} read as {} but holds {}", key, what,
                                     std::holds_alternative<std::monostate>(v) ? "auto (not resolved)"
                                                                                : key_value_text(v)));
}
}  // namespace

double OwnedValues::number(const std::string& key) const { return typed<double>(get(key), key, "a number"); }
int64_t OwnedValues::integer(const std::string& key) const { return typed<int64_t>(get(key), key, "an integer"); }
bool OwnedValues::boolean(const std::string& key) const { return typed<bool>(get(key), key, "a boolean"); }
const std::string& OwnedValues::name(const std::string& key) const {
  return typed<std::string>(get(key), key, "a name");
}
bool OwnedValues::is_auto(const std::string& key) const { return std::holds_alternative<std::monostate>(get(key)); }
std::optional<double> OwnedValues::maybe_number(const std::string& key) const {
  return is_auto(key) ? std::nullopt : std::optional<double>(number(key));
}
std::optional<int64_t> OwnedValues::maybe_integer(const std::string& key) const {
  return is_auto(key) ? std::nullopt : std::optional<int64_t>(integer(key));
}
void OwnedValues::set(const std::string& key, KeyValue v) {
  get(key);  // declared?
  values_[key] = std::move(v);
}

std::string key_value_text(const KeyValue& v) {
  if (std::holds_alternative<std::monostate>(v)) return "auto";
  if (const double* d = std::get_if<double>(&v)) return fmt::format("{}", *d);
  if (const int64_t* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (const bool* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  return std::get<std::string>(v);
}

namespace {
std::vector<const KeyOwner*> owners_of_key(const std::string& section, const std::string& key) {
  std::vector<const KeyOwner*> out;
  for (const KeyOwner* o : owners_of_section(section)) {
    for (const auto& k : o->keys) {
      if (k.name == key) out.push_back(o);
    }
  }
  return out;
}

const OwnedValues& values_of(OwnerKind kind, const ModelConfig& m) {
  return kind == OwnerKind::kNorm ? m.norm.keys : kind == OwnerKind::kResidual ? m.residual.keys : m.keys;
}
}  // namespace

std::string key_owner_text(const std::string& section, const std::string& key) {
  std::string names;
  const char* kind = "layout ";
  for (const KeyOwner* o : owners_of_key(section, key)) {
    names += (names.empty() ? "" : ", ") + o->name;
    kind = o->kind == OwnerKind::kNorm       ? "norm "
           : o->kind == OwnerKind::kResidual ? "residual "
           : o->kind == OwnerKind::kOptim    ? "optim "
           : o->kind == OwnerKind::kSchedule ? "schedule "
                                             : "layout ";
  }
  return kind + names;
}

namespace {
// The value rules of a selected owner's key: a name from its list, then its own check.
void check_value(const KeySpec& k, const std::string& full_key, const KeyValue& v, const ModelConfig& m,
                 const KeyOwner::Problem& add) {
  if (k.kind == KeyKind::kName && std::holds_alternative<std::string>(v) &&
      std::find(k.names.begin(), k.names.end(), std::get<std::string>(v)) == k.names.end()) {
    std::string list;
    for (const auto& n : k.names) list += (list.empty() ? "" : ", ") + n;
    add(full_key, fmt::format("'{}' is not one of: {}", std::get<std::string>(v), list));
    return;
  }
  if (k.check && !std::holds_alternative<std::monostate>(v)) {
    if (const std::string why = k.check(v, m); !why.empty()) add(full_key, fmt::format("{} {}", key_value_text(v), why));
  }
}

// Every key of the owners of one kind: a key no selected owner uses must keep its default
// (unused(owner) says why, a key may have several owners), the others their value rules; then each
// selected owner's rules over several keys.
void check_keys(OwnerKind kind, const OwnedValues& values, const ModelConfig& m, const std::string& prefix,
                const std::function<bool(const KeyOwner&)>& selected,
                const std::function<std::string(const KeyOwner&, const KeySpec&)>& unused, const KeyOwner::Problem& add) {
  for (const auto& o : key_owners()) {
    if (o.kind != kind) continue;
    for (const auto& k : o.keys) {
      // A key with several owners (residual.streams: hc, mhc) is in use when any of them is selected.
      bool used = false;
      for (const KeyOwner* owner : owners_of_key(o.section, k.name)) used = used || selected(*owner);
      const std::string key = o.section + "." + k.name;
      const KeyValue& v = values.get(key);
      if (!used && !(v == k.default_value)) {
        add(prefix + key, unused(o, k));
      } else if (used && selected(o)) {
        check_value(k, prefix + key, v, m, add);
      }
    }
    if (o.together && selected(o)) o.together(values, [&](const std::string& key, const std::string& message) { add(prefix + key, message); });
  }
}
}  // namespace

void check_owned_keys(const ModelConfig& m, bool qkv_norm_used, const KeyOwner::Problem& add) {
  for (const OwnerKind kind : {OwnerKind::kNorm, OwnerKind::kLayout, OwnerKind::kResidual}) {
    check_keys(kind, values_of(kind, m), m, "model.",
               [&](const KeyOwner& o) { return owner_selected(o, m, qkv_norm_used); },
               [&](const KeyOwner& o, const KeySpec& k) {
                 return o.kind == OwnerKind::kLayout
                            ? fmt::format("belongs to layout {} (model.layout is {}); it would do nothing here", o.name,
                                          m.layout)
                        : o.kind == OwnerKind::kResidual
                            ? fmt::format("belongs to {} (model.residual.type is {}); it would do nothing here",
                                          key_owner_text(o.section, k.name), m.residual.type)
                            : fmt::format(
                                  "belongs to norm type {} (model.norm.type is {}{}); it would do nothing here", o.name,
                                  m.norm.type,
                                  m.qk_norm_type && *m.qk_norm_type != m.norm.type
                                      ? ", qk_norm_type " + *m.qk_norm_type +
                                            (qkv_norm_used ? std::string()
                                                           : " but no q/k/v norm is on (model.qk_norm, model.v_norm "
                                                             "or a layout with q/k/v norms)")
                                      : std::string());
               },
               add);
  }
}

void check_optim_keys(const OptimConfig& o, const ModelConfig& m, const KeyOwner::Problem& add) {
  struct Selector {
    OwnerKind kind;
    const OwnedValues* values;
    const char* field;
    const std::string* selected;
  };
  for (const Selector& s : {Selector{OwnerKind::kOptim, &o.keys, "optim.type", &o.type},
                            Selector{OwnerKind::kSchedule, &o.schedule_keys, "optim.schedule", &o.schedule}}) {
    if (!is_owner_name(s.kind, *s.selected)) continue;  // validate_config reports the name
    check_keys(s.kind, *s.values, m, "optim.", [&](const KeyOwner& owner) { return owner.name == *s.selected; },
               [&](const KeyOwner& owner, const KeySpec& k) {
                 std::string names;
                 for (const KeyOwner* w : owners_of_key(owner.section, k.name)) names += (names.empty() ? "" : " and ") + w->name;
                 return fmt::format("belongs to {} {} ({} is {}); it would do nothing here", s.field, names, s.field,
                                    *s.selected);
               },
               add);
  }
}

std::string owner_names(OwnerKind kind) {
  std::string out;
  for (const auto& o : key_owners()) {
    if (o.kind == kind) out += (out.empty() ? "" : ", ") + o.name;
  }
  return out;
}

bool is_owner_name(OwnerKind kind, const std::string& name) {
  for (const auto& o : key_owners()) {
    if (o.kind == kind && o.name == name) return true;
  }
  return false;
}

}  // namespace normlab
