#include "cli/quantity.hpp"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "cli/flag_ranges.hpp"
#include "spec/error.hpp"
#include "spec/limits.hpp"

namespace meshplan::cli {

namespace {

// Leading decimal number of `text` (strtod grammar without inf/nan/hex); the rest is the suffix.
// nullopt when there is no number. Never throws: strtod saturates where stod throws out_of_range.
bool leading_number(const std::string& text, double& v, std::string& suffix) {
  std::size_t i = 0;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
  const std::size_t digits_from = i;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  }
  if (i == digits_from || (i == digits_from + 1 && text[digits_from] == '.')) return false;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    std::size_t j = i + 1;
    if (j < text.size() && (text[j] == '+' || text[j] == '-')) ++j;
    const std::size_t exp_from = j;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    if (j > exp_from) i = j;
  }
  v = std::strtod(text.substr(0, i).c_str(), nullptr);
  suffix = text.substr(i);
  return true;
}

std::string shown(const std::string& text) { return shown_text(text); }

// " (range ...)" from the flag table (flag_ranges.hpp) for the flags it lists; the parsers below
// also serve flags outside it (the fuzz target's).
std::string range_note(const std::string& flag) {
  for (const auto& r : flag_ranges())
    if (r.flag == flag) return fmt::format(" (range {})", range_text(r));
  return "";
}

}  // namespace

double parse_token_count(const std::string& text, const std::string& flag, double max) {
  double v = 0;
  std::string suffix;
  if (!leading_number(text, v, suffix))
    throw InputError("", flag, fmt::format("'{}' is not a number (e.g. 4M, 15T, 4Mi or 4194304){}", shown(text),
                                           range_note(flag)));
  double mult = 1;
  const bool binary = suffix.size() == 2 && suffix[1] == 'i';
  const char unit = suffix.empty() ? '\0' : suffix[0];
  const double step = binary ? 1024.0 : 1000.0;
  if (suffix.empty()) mult = 1;
  else if (suffix.size() > 2 || (suffix.size() == 2 && !binary)) mult = 0;
  else if (unit == 'K' || unit == 'k') mult = step;
  else if (unit == 'M') mult = step * step;
  else if (unit == 'G' || (unit == 'B' && !binary)) mult = step * step * step;
  else if (unit == 'T') mult = step * step * step * step;
  else mult = 0;
  if (mult == 0)
    throw InputError("", flag, fmt::format("unknown suffix '{}' in '{}' (K, M, G or B, T: powers of 1000; Ki, Mi, "
                                           "Gi, Ti: powers of 1024)", shown(suffix), shown(text)));
  const double n = v * mult;
  if (!(n > 0)) throw InputError("", flag, fmt::format("must be positive, got '{}'{}", shown(text), range_note(flag)));
  // A fraction of a token (1e-300) is no count: the smallest is one.
  if (n < 1) throw InputError("", flag, fmt::format("'{}' is less than one token{}", shown(text), range_note(flag)));
  if (!(n <= max))
    throw InputError("", flag, fmt::format("'{}' is above the maximum {:.4g}{} (docs/limits.md)", shown(text), max,
                                           range_note(flag)));
  return n;
}

std::int64_t parse_batch_tokens(const std::string& text, std::int64_t seq_len) {
  const auto tokens = static_cast<std::int64_t>(std::llround(
      parse_token_count(text, "--global-batch-tokens", static_cast<double>(limits::kMaxTokensPerStep))));
  if (tokens < seq_len)
    throw InputError("", "--global-batch-tokens",
                     fmt::format("{} tokens is less than one sequence of {} (--seq)", tokens, seq_len));
  return tokens;
}

double parse_deadline_days(const std::string& text, const std::string& flag) {
  double v = 0;
  std::string suffix;
  if (!leading_number(text, v, suffix))
    throw InputError("", flag, fmt::format("'{}' is not a duration (e.g. 60d){}", shown(text), range_note(flag)));
  double days = v;
  if (suffix == "h") days = v / 24;
  else if (suffix == "w") days = v * 7;
  else if (!suffix.empty() && suffix != "d")
    throw InputError("", flag, fmt::format("unknown unit '{}' (h, d, w)", shown(suffix)));
  if (!(days > 0)) throw InputError("", flag, fmt::format("must be positive, got '{}'{}", shown(text), range_note(flag)));
  if (days < limits::kMinDeadlineDays || !(days <= limits::kMaxDeadlineDays))
    throw InputError("", flag, fmt::format("'{}' is outside one minute .. {:g} days (docs/limits.md)", shown(text),
                                           limits::kMaxDeadlineDays));
  return days;
}

double parse_duration_seconds(const std::string& text, const std::string& flag) {
  double v = 0;
  std::string suffix;
  if (!leading_number(text, v, suffix))
    throw InputError("", flag, fmt::format("'{}' is not a duration (e.g. 30m){}", shown(text), range_note(flag)));
  double seconds = v;
  if (suffix == "m") seconds = v * 60;
  else if (suffix == "h") seconds = v * 3600;
  else if (suffix == "d") seconds = v * 86400;
  else if (!suffix.empty() && suffix != "s")
    throw InputError("", flag, fmt::format("unknown unit '{}' (s, m, h, d){}", shown(suffix), range_note(flag)));
  if (!(seconds > 0)) throw InputError("", flag, fmt::format("must be positive, got '{}'{}", shown(text), range_note(flag)));
  for (const auto& r : flag_ranges())
    if (r.flag == flag) return check_value(r, seconds, text);
  return seconds;
}

double parse_size_bytes(const std::string& text, const std::string& flag) {
  std::string s = text;
  auto strip = [&s](std::string_view suffix) {
    if (s.size() > suffix.size()) {
      std::string tail = s.substr(s.size() - suffix.size());
      for (auto& ch : tail) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      if (tail == suffix) s.resize(s.size() - suffix.size());
    }
  };
  strip("IB");
  strip("B");
  double scale = 1;
  if (!s.empty()) {
    switch (std::toupper(static_cast<unsigned char>(s.back()))) {
      case 'K': scale = 1024.0; break;
      case 'M': scale = 1024.0 * 1024; break;
      case 'G': scale = 1024.0 * 1024 * 1024; break;
      case 'T': scale = 1024.0 * 1024 * 1024 * 1024; break;
      default: scale = 0;
    }
    if (scale != 0) s.pop_back();
    else scale = 1;
  }
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
    throw InputError("", flag, "'" + shown(text) + "' is not a size (an integer with an optional K, M, G or T suffix)" +
                                   range_note(flag));
  // Past 16 digits the count is above the maximum anyway; strtod never throws.
  const double v = s.size() > 16 ? HUGE_VAL : std::strtod(s.c_str(), nullptr) * scale;
  if (!(v >= 1)) throw InputError("", flag, "'" + shown(text) + "' must be at least 1 byte");
  if (!(v <= limits::kMaxSizeBytes))
    throw InputError("", flag, fmt::format("'{}' is above the maximum {:.0f} bytes (1 PiB, docs/limits.md)", shown(text),
                                           limits::kMaxSizeBytes));
  return v;
}

std::vector<double> parse_size_range(const std::string& spec, const std::string& flag) {
  const auto colon = spec.find(':');
  const double lo = parse_size_bytes(spec.substr(0, colon), flag);
  const double hi = colon == std::string::npos ? lo : parse_size_bytes(spec.substr(colon + 1), flag);
  if (hi < lo) throw InputError("", flag, "'" + shown(spec) + "': the upper bound is below the lower bound");
  std::vector<double> sizes;
  for (double s = lo; s <= hi; s *= 2) sizes.push_back(s);  // at most 51 sizes below 1 PiB
  return sizes;
}

std::int64_t parse_positive_count(std::string_view text, const std::string& flag, std::string_view what,
                                  std::int64_t max) {
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ptr != end || (ec != std::errc() && ec != std::errc::result_out_of_range) ||
      (ec == std::errc() && v <= 0))
    throw InputError("", flag, fmt::format("{} must be a positive integer, got '{}'", what, shown(std::string(text))));
  if (ec == std::errc::result_out_of_range || v > max)
    throw InputError("", flag, fmt::format("{} {} is above the maximum {} (docs/limits.md)", what,
                                           shown(std::string(text)), max));
  return v;
}

}  // namespace meshplan::cli
