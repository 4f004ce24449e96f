// The config written back: as YAML (every key, field-list order), as flat key/value pairs, and
// as `normlab keys` lines; and which keys may change on resume.
#include <yaml-cpp/yaml.h>

#include <fmt/format.h>

#include "config/load.h"

namespace normlab {
namespace {

template <class T>
std::string repr(const T& v);
template <>
std::string repr(const int64_t& v) {
  return std::to_string(v);
}
template <>
std::string repr(const double& v) {
  return fmt::format("{}", v);
}
template <>
std::string repr(const bool& v) {
  return v ? "true" : "false";
}
template <>
std::string repr(const std::string& v) {
  return v;
}
template <>
std::string repr(const std::optional<double>& v) {
  return v ? repr(*v) : "auto";
}
template <>
std::string repr(const std::optional<std::string>& v) {
  return v ? *v : "null";
}
template <>
std::string repr(const std::array<double, 2>& v) {
  return fmt::format("[{}, {}]", repr(v[0]), repr(v[1]));
}
template <>
std::string repr(const PathList& v) {
  if (v.size() == 1) return v[0];
  std::string o = "[";
  for (size_t i = 0; i < v.size(); ++i) o += (i ? ", " : "") + v[i];
  return o + "]";
}
template <>
std::string repr(const OwnedField& f) {
  return key_value_text(f.value);
}
// Choices print their name.
template <class E, std::enable_if_t<is_choice_v<E>, int> = 0>
std::string repr_of(const E& v) {
  return choice_name(v);
}
template <class T, std::enable_if_t<!is_choice_v<T>, int> = 0>
std::string repr_of(const T& v) {
  return repr(v);
}
// The help line of `normlab keys`: a choice lists its names.
template <class T>
std::string help_of(const T&, const char* help) {
  if constexpr (is_choice_v<T>) {
    return std::string(help) + ": " + choice_names<T>();
  } else {
    return help;
  }
}
inline std::string help_of(const OwnedField& f, const char* help) {
  if (f.spec.kind != KeyKind::kName) return help;
  std::string names;
  for (const auto& s : f.spec.names) names += (names.empty() ? "" : " | ") + s;
  return std::string(help) + ": " + names;
}

class Dumper {
 public:
  explicit Dumper(YAML::Emitter& out) : out_(out) {}
  template <class T>
  void field(const char* name, T& value, const char*) {
    out_ << YAML::Key << name << YAML::Value;
    emit(value);
  }
  template <class S>
  void section(const char* name, S& sub) {
    out_ << YAML::Key << name << YAML::Value << YAML::BeginMap;
    describe(sub, *this);
    out_ << YAML::EndMap;
  }

 private:
  void emit(const std::string& s) { out_ << YAML::DoubleQuoted << s; }
  void emit(const std::optional<std::string>& s) {
    if (s) {
      emit(*s);
    } else {
      out_ << YAML::Null;
    }
  }
  void emit(const PathList& v) {
    if (v.size() == 1) return emit(v[0]);
    out_ << YAML::Flow << YAML::BeginSeq;
    for (const std::string& p : v) out_ << YAML::DoubleQuoted << p;
    out_ << YAML::EndSeq;
  }
  void emit(const std::array<double, 2>& v) {
    out_ << YAML::Flow << YAML::BeginSeq << repr(v[0]) << repr(v[1]) << YAML::EndSeq;
  }
  void emit(const OwnedField& f) {
    if (std::holds_alternative<std::string>(f.value)) {
      emit(std::get<std::string>(f.value));
    } else {
      out_ << key_value_text(f.value);
    }
  }
  template <class T>
  void emit(const T& v) {
    if constexpr (is_choice_v<T>) {
      out_ << YAML::DoubleQuoted << choice_name(v);
    } else {
      out_ << repr(v);
    }
  }
  YAML::Emitter& out_;
};

class FlatLister {
 public:
  template <class T>
  void field(const char* name, T& value, const char*) {
    out_.emplace_back(prefix_ + name, repr_of(value));
  }
  template <class S>
  void section(const char* name, S& sub) {
    const std::string saved = prefix_;
    prefix_ += std::string(name) + ".";
    describe(sub, *this);
    prefix_ = saved;
  }
  std::vector<std::pair<std::string, std::string>> out_;

 private:
  std::string prefix_;
};

// A key matches "optim.*" when it starts with "optim.".
constexpr const char* kResumeMayChange[] = {
    "out_dir",          "data.val",         "data.format",   "data.tokenizer",   "optim.*",       "train.steps",
    "train.log_every",  "train.checkpoint_every",            "train.save_init",
    "train.threads",    "train.device",     "train.precision",     "train.dist_backend", "train.dist_timeout", "eval.*",        "diag.every",
    "diag.spike.zscore", "diag.spike.action", "diag.per_param", "diag.nonfinite",
    "diag.csv"};

class KeyLister {
 public:
  template <class T>
  void field(const char* name, T& value, const char* help) {
    out_ += fmt::format("{:<32} {:<22} {}\n", prefix_ + name, repr_of(value), help_of(value, help));
  }
  template <class S>
  void section(const char* name, S& sub) {
    const std::string saved = prefix_;
    prefix_ += std::string(name) + ".";
    describe(sub, *this);
    prefix_ = saved;
  }
  std::string out_;

 private:
  std::string prefix_;
};

}  // namespace

std::string dump_config(const Config& c) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  Dumper d(out);
  describe(const_cast<Config&>(c), d);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::vector<std::pair<std::string, std::string>> flat_values(const Config& c) {
  FlatLister f;
  describe(const_cast<Config&>(c), f);
  return f.out_;
}

bool may_change_on_resume(const std::string& key) {
  for (const std::string pattern : kResumeMayChange) {
    if (pattern.back() == '*' ? key.rfind(pattern.substr(0, pattern.size() - 1), 0) == 0 : key == pattern) {
      return true;
    }
  }
  return false;
}

std::string keys_that_may_change_on_resume() {
  std::string out;
  for (const char* k : kResumeMayChange) out += (out.empty() ? "" : ", ") + std::string(k);
  return out;
}

std::string describe_keys() {
  Config defaults;
  KeyLister k;
  describe(defaults, k);
  return k.out_;
}

}  // namespace normlab
