// Config keys that a registry entry owns. A norm type, a layout, a residual type or an optimizer
// declares its keys (name, kind, default, help, value check) in its own file, in its registry
// entry; the config's field list visits them (model.norm.<key> for norms, model.<layout>.<key> for
// layouts, model.residual.<key>, optim.<section>.<key> for optimizers), so adding an entry with
// knobs never touches the shared config structs. A key of an entry that the config does not
// select must stay at its default: any other value is a config error naming the owner, never a
// knob that silently does nothing (check_owned_keys).
//
// The config layer declares the owners' interface; the registries provide the list (key_owners(),
// defined in train/key_owners.cpp): the one place where config/ learns which entries exist.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace normlab {

struct ModelConfig;
struct OptimConfig;
class OwnedValues;

// monostate = auto (the entry fills it in when the model config is resolved).
using KeyValue = std::variant<std::monostate, double, int64_t, bool, std::string>;

enum class KeyKind { kNumber, kInteger, kBoolean, kName };

struct KeySpec {
  std::string name;  // "alpha": the key is model.<section>.<name>
  KeyKind kind = KeyKind::kNumber;
  KeyValue default_value;  // monostate: auto (allowed only for kNumber and kInteger)
  std::string help;
  std::vector<std::string> names;  // kName: the allowed values, the first is the default
  // A value rule: "" when the value is fine, else what is wrong ("must be > 0"). Called with a
  // value that is not auto; m is the whole model config (n_layers for ranges).
  std::function<std::string(const KeyValue& v, const ModelConfig& m)> check;
};

enum class OwnerKind { kNorm, kLayout, kResidual, kOptim, kSchedule };

struct KeyOwner {
  OwnerKind kind;
  std::string name;     // the entry's registry name: "dyt", "deepnorm"
  std::string section;  // where its keys live under model: "norm" / "residual" (flat, shared by all entries
                        // of that kind) or the layout name. Two entries of a flat section may declare the
                        // same key (hc and mhc both own residual.streams): it is one key with two owners.
  std::vector<KeySpec> keys;
  // Rules over several of the owner's keys, asked while it is selected: add(key, message) with
  // key as "section.name".
  using Problem = std::function<void(const std::string& key, const std::string& message)>;
  using Together = std::function<void(const OwnedValues& values, const Problem& add)>;
  Together together;
};

// Every entry that owns keys, norms first, in registry order (train/key_owners.cpp); every
// optimizer and every schedule is listed, with or without keys (optim.type's and optim.schedule's
// names are theirs).
const std::vector<KeyOwner>& key_owners();

// The owners whose keys live in one section ("norm", "deepnorm", ...), and the sections of one
// kind of owner that hold keys (the layouts' and the optimizers' sections), in registry order.
std::vector<const KeyOwner*> owners_of_section(const std::string& section);
std::vector<std::string> key_sections(OwnerKind kind);

// Whether the config selects this owner: a norm is selected when it is model.norm.type, or the
// q/k/v norm type while a q/k/v norm is on (`qkv_norm_used`: qk_norm, v_norm or a layout that
// normalises q, k and v); a layout when it is model.layout; a residual type when it is
// model.residual.type.
bool owner_selected(const KeyOwner& owner, const ModelConfig& m, bool qkv_norm_used);

// The values of the owned keys of one kind of owner, by "section.name" ("deepnorm.alpha",
// "norm.dyt_alpha"); starts with every key at its default. Typed reads throw std::logic_error on a kind mismatch or an
// unresolved auto: a programming error, never a config one (parsing checked the kind).
class OwnedValues {
 public:
  explicit OwnedValues(OwnerKind kind);  // every key of that kind of owner at its default

  double number(const std::string& key) const;
  int64_t integer(const std::string& key) const;
  bool boolean(const std::string& key) const;
  const std::string& name(const std::string& key) const;
  bool is_auto(const std::string& key) const;
  // A number that may still be auto.
  std::optional<double> maybe_number(const std::string& key) const;
  std::optional<int64_t> maybe_integer(const std::string& key) const;

  void set(const std::string& key, KeyValue v);
  KeyValue& slot(const std::string& key) { return values_[key]; }
  const KeyValue& get(const std::string& key) const;

  bool operator==(const OwnedValues& o) const { return values_ == o.values_; }

 private:
  std::map<std::string, KeyValue> values_;
};

// Problems of the owned keys: a value its owner's check refuses, and a key whose owner the config
// does not select that is not at its default. `add(key, message)` receives each, the key in full
// ("model.deepnorm.alpha"). check_owned_keys: the model's (norms, layouts, residual types);
// check_optim_keys: the optimizers' (selected by optim.type) and the schedules' (selected by
// optim.schedule), each kind only while its selecting name is registered.
void check_owned_keys(const ModelConfig& m, bool qkv_norm_used, const KeyOwner::Problem& add);
void check_optim_keys(const OptimConfig& o, const ModelConfig& m, const KeyOwner::Problem& add);
// The names of one kind of owner in registry order ("adamw, muon, normuon"), and whether one is.
// Every optimizer and every schedule is listed, with or without keys.
std::string owner_names(OwnerKind kind);
bool is_owner_name(OwnerKind kind, const std::string& name);

// The text of a value as config files and `normlab keys` write it ("auto", "0.5", "true", "ffn").
std::string key_value_text(const KeyValue& v);

// For the config field list: one owned key and where its value lives.
struct OwnedField {
  const KeySpec& spec;
  KeyValue& value;
};

// The keys of one section, visited as a nested struct of the field list (model.deepnorm: {...}).
struct OwnedSection {
  std::string section;
  OwnedValues* values;
};

// "norm dyt", "layout deepnorm", "residual hc, mhc", "optim muon, normuon", "schedule wsd": who owns section.key
// (for help texts).
std::string key_owner_text(const std::string& section, const std::string& key);

template <class V>
void describe(OwnedSection& s, V& v) {
  std::vector<std::string> seen;  // a key with two owners is one field
  for (const KeyOwner* o : owners_of_section(s.section)) {
    for (const KeySpec& k : o->keys) {
      if (std::find(seen.begin(), seen.end(), k.name) != seen.end()) continue;
      seen.push_back(k.name);
      OwnedField f{k, s.values->slot(s.section + "." + k.name)};
      const std::string help = key_owner_text(s.section, k.name) + ": " + k.help;
      v.field(k.name.c_str(), f, help.c_str());
    }
  }
}

}  // namespace normlab
