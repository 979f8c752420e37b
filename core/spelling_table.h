#pragma once
// A closed set's spellings as one table (enumerator, text), read both ways,
// so that to_string and parse cannot disagree. Header-only: the planner,
// which does not link the compute core, uses it too.
#include <array>
#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>

namespace pd {

template <class E, size_t N>
using SpellingTable = std::array<std::pair<E, const char*>, N>;

template <class E, size_t N>
const char* name_in(const SpellingTable<E, N>& table, E value) {
  for (const auto& [v, name] : table)
    if (v == value) return name;
  return "?";  // (unreachable: every enumerator is in its table)
}

template <class E, size_t N>
std::optional<E> value_in(const SpellingTable<E, N>& table, std::string_view text) {
  for (const auto& [v, name] : table)
    if (text == name) return v;
  return std::nullopt;
}

}  // namespace pd
