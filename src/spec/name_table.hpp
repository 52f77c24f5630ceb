#pragma once
// One table of names per enum: to_string and parse read the same list, so they cannot drift.
#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace meshplan {

template <class E, std::size_t N>
using NameTable = std::array<std::pair<E, std::string_view>, N>;

template <class E, std::size_t N>
constexpr std::string_view name_of(const NameTable<E, N>& names, E e) {
  for (const auto& [v, n] : names)
    if (v == e) return n;
  return "?";
}

namespace name_table_detail {
inline std::string fold(std::string_view s) {
  std::string v(s);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  std::replace(v.begin(), v.end(), '_', '-');
  return v;
}
}  // namespace name_table_detail

// Case-insensitive, '_' and '-' equivalent.
template <class E, std::size_t N>
std::optional<E> parse_name(const NameTable<E, N>& names, std::string_view s) {
  const std::string key = name_table_detail::fold(s);
  for (const auto& [v, n] : names)
    if (name_table_detail::fold(n) == key) return v;
  return std::nullopt;
}

}  // namespace meshplan
