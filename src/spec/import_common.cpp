#include "spec/import_common.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fmt/format.h>

#include "spec/error.hpp"
#include "spec/input_file.hpp"

namespace meshplan::importer {

std::string read_text(const std::string& path) { return read_input_file(path, InputKind::run_config); }

std::string one_line(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) out.push_back(c == '\n' || c == '\r' || c == '\t' ? ' ' : c);
  // Trailing blanks left by a folded final newline read as noise in a one-line message.
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

namespace {
// Levenshtein distance of a and b when it is at most `cap`, else cap + 1. Unknown keys are
// compared with every known one (the Megatron importer: a few hundred flags, for each unknown
// flag of a script), so the distance is computed only as far as it can matter: the length
// difference and the letters one string has more of than the other are lower bounds, and only
// the diagonal band |i - j| <= cap of the table can hold a distance within the cap.
std::size_t edit_distance_within(std::string_view a, std::string_view b, std::size_t cap) {
  const std::size_t diff = a.size() > b.size() ? a.size() - b.size() : b.size() - a.size();
  if (diff > cap) return cap + 1;
  std::array<int, 256> count{};
  for (const char c : a) ++count[static_cast<unsigned char>(c)];
  for (const char c : b) --count[static_cast<unsigned char>(c)];
  // Summed over the letters the two strings hold (each cleared once counted), not all 256.
  std::size_t more_a = 0, more_b = 0;
  for (const char c : a) {
    int& n = count[static_cast<unsigned char>(c)];
    if (n > 0) more_a += static_cast<std::size_t>(n);
    n = n > 0 ? 0 : n;
  }
  for (const char c : b) {
    int& n = count[static_cast<unsigned char>(c)];
    if (n < 0) more_b += static_cast<std::size_t>(-n);
    n = n < 0 ? 0 : n;
  }
  if (std::max(more_a, more_b) > cap) return cap + 1;
  const std::size_t far = cap + 1;
  std::vector<std::size_t> prev(b.size() + 1, far), cur(b.size() + 1, far);
  for (std::size_t j = 0; j <= std::min(b.size(), cap); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    const std::size_t lo = i > cap ? i - cap : 1, hi = std::min(b.size(), i + cap);
    std::fill(cur.begin(), cur.end(), far);
    if (i <= cap) cur[0] = i;
    std::size_t row_min = cur[0];
    for (std::size_t j = lo; j <= hi; ++j) {
      const std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub, far});
      row_min = std::min(row_min, cur[j]);
    }
    if (row_min > cap) return far;
    std::swap(prev, cur);
  }
  return std::min(prev[b.size()], far);
}
}  // namespace

std::optional<std::string> closest(std::string_view key, const std::vector<std::string>& candidates) {
  // A third of the length catches transpositions and dropped words' letters in long snake_case
  // keys without proposing unrelated keys for short ones.
  const std::size_t limit = std::max<std::size_t>(2, key.size() / 3);
  // The first candidate at the smallest distance, when that distance is within the limit: only
  // distances below the best so far can change the answer, so each is computed up to there.
  std::optional<std::string> best;
  std::size_t best_d = limit + 1;
  for (const auto& c : candidates) {
    if (best_d == 0) break;
    const std::size_t d = edit_distance_within(key, c, best_d - 1);
    if (d < best_d) {
      best = c;
      best_d = d;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view key, const std::vector<std::string>& candidates) {
  if (auto c = closest(key, candidates)) return fmt::format(" (did you mean '{}'?)", *c);
  return "";
}

std::string file_stem(const std::string& path) { return std::filesystem::path(path).stem().string(); }

std::string relative_to(const std::string& config_path, const std::string& p) {
  const std::filesystem::path q(p);
  if (q.is_absolute()) return p;
  const auto dir = std::filesystem::path(config_path).parent_path();
  return (dir / q).lexically_normal().string();
}

std::optional<TomlView> TomlView::sub(std::string_view k) const {
  const toml::node* n = table_->get(k);
  if (n == nullptr) return std::nullopt;
  const toml::table* t = n->as_table();
  if (t == nullptr) fail(k, "expected a table ([section])");
  return TomlView(file_, *t, key(k));
}

namespace {
std::string type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
  }
}
}  // namespace

void TomlView::fail(std::string_view k, const std::string& reason) const {
  throw InputError(file_, one_line(key(k)), one_line(reason));
}

std::optional<std::int64_t> TomlView::get_int(std::string_view k) const {
  const toml::node* n = table_->get(k);
  if (n == nullptr) return std::nullopt;
  if (auto v = n->value_exact<std::int64_t>()) return *v;
  fail(k, "expected an integer, got " + type_name(*n));
}

std::optional<double> TomlView::get_number(std::string_view k) const {
  const toml::node* n = table_->get(k);
  if (n == nullptr) return std::nullopt;
  if (auto v = n->value_exact<std::int64_t>()) return static_cast<double>(*v);
  if (auto v = n->value_exact<double>()) return *v;
  fail(k, "expected a number, got " + type_name(*n));
}

std::optional<bool> TomlView::get_bool(std::string_view k) const {
  const toml::node* n = table_->get(k);
  if (n == nullptr) return std::nullopt;
  if (auto v = n->value_exact<bool>()) return *v;
  fail(k, "expected true or false, got " + type_name(*n));
}

std::optional<std::string> TomlView::get_string(std::string_view k) const {
  const toml::node* n = table_->get(k);
  if (n == nullptr) return std::nullopt;
  if (auto v = n->value_exact<std::string>()) return *v;
  fail(k, "expected a string, got " + type_name(*n));
}

std::optional<std::vector<std::string>> TomlView::get_string_array(std::string_view k) const {
  const toml::node* n = table_->get(k);
  if (n == nullptr) return std::nullopt;
  const toml::array* a = n->as_array();
  if (a == nullptr) fail(k, "expected an array of strings, got " + type_name(*n));
  std::vector<std::string> out;
  for (const auto& e : *a) {
    auto v = e.value_exact<std::string>();
    if (!v) fail(k, "expected an array of strings, found " + type_name(e) + " in it");
    out.push_back(*v);
  }
  return out;
}

void TomlView::require_known(const std::vector<std::string>& allowed, std::string_view why) const {
  for (const auto& [k, v] : *table_) {
    const std::string name(k.str());
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end())
      fail(name, fmt::format("unknown key{}; {}", did_you_mean(name, allowed), why));
  }
}

toml::table parse_toml(const std::string& file, const std::string& text) {
  try {
    return toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw InputError(file, fmt::format("line {}, column {}", b.line, b.column),
                     one_line(fmt::format("TOML syntax error: {}", e.description())));
  }
}

}  // namespace meshplan::importer
