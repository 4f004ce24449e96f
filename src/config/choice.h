// Config choices as types. A choice is an `enum class` plus ONE table of {value, "name"} pairs
// (a specialisation of ChoiceTable); parsing, dumping, `normlab keys`, the error text and every
// use read that table, so a name is written exactly once and code compares typed values.
// Adding a value to a choice = one enum value + one table line.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace normlab {

template <class E>
struct ChoiceName {
  E value;
  const char* name;
};

// Specialised next to each enum: `static constexpr ChoiceName<E> entries[] = {...};`
template <class E>
struct ChoiceTable;

template <class E>
inline constexpr bool is_choice_v = false;

template <class E>
const char* choice_name(E v) {
  for (const auto& e : ChoiceTable<E>::entries) {
    if (e.value == v) return e.name;
  }
  return "?";
}

template <class E>
std::optional<E> parse_choice(const std::string& name) {
  for (const auto& e : ChoiceTable<E>::entries) {
    if (name == e.name) return e.value;
  }
  return std::nullopt;
}

// "a | b | c", as `normlab keys` and error messages show the allowed names.
template <class E>
std::string choice_names(const char* sep = " | ") {
  std::string out;
  for (const auto& e : ChoiceTable<E>::entries) out += (out.empty() ? "" : sep) + std::string(e.name);
  return out;
}

}  // namespace normlab

// Declares enum E's name table: NORMLAB_CHOICE(Pos, {Pos::kLearned, "learned"}, {Pos::kRope, "rope"}).
#define NORMLAB_CHOICE(E, ...)                                   \
  template <>                                                    \
  struct ChoiceTable<E> {                                        \
    static constexpr ChoiceName<E> entries[] = {__VA_ARGS__};    \
  };                                                             \
  template <>                                                    \
  inline constexpr bool is_choice_v<E> = true
