#include "spec/import_common.hpp"

#include <algorithm>
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
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}
}  // namespace

std::optional<std::string> closest(std::string_view key, const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  std::size_t best_d = 0;
  for (const auto& c : candidates) {
    const std::size_t d = edit_distance(key, c);
    if (!best || d < best_d) {
      best = c;
      best_d = d;
    }
  }
  // A third of the length catches transpositions and dropped words' letters in long snake_case
  // keys without proposing unrelated keys for short ones.
  const std::size_t limit = std::max<std::size_t>(2, key.size() / 3);
  if (best && best_d <= limit) return best;
  return std::nullopt;
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
