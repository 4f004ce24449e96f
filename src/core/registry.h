// What every registry shares (norms, layouts, residual types, value-residual modes, optimizers,
// parametrizations, schedules): a table of entries, each with a `name`, looked up by name and
// listed in table order. Each registry keeps its own typed find_x / x_names and calls these.
#pragma once

#include <string>
#include <vector>

namespace normlab {

// The entry called `name`, or nullptr.
template <class Entry>
const Entry* find_by_name(const std::vector<Entry>& table, const std::string& name) {
  for (const auto& e : table) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

// "a, b, c": the names in table order (errors, help texts).
template <class Entry>
std::string names_of(const std::vector<Entry>& table) {
  std::string out;
  for (const auto& e : table) out += (out.empty() ? "" : ", ") + e.name;
  return out;
}

}  // namespace normlab
