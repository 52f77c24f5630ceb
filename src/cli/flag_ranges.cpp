#include "cli/flag_ranges.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "spec/error.hpp"
#include "spec/limits.hpp"

namespace meshplan::cli {

namespace {

constexpr FlagRange count(std::string_view command, std::string_view flag, std::int64_t min, std::int64_t max,
                          std::string_view unit) {
  return {command, flag, true, static_cast<double>(min), static_cast<double>(max), false,
          static_cast<std::uint64_t>(max), unit};
}
constexpr FlagRange real(std::string_view command, std::string_view flag, double min, bool min_excluded, double max,
                         std::string_view unit) {
  return {command, flag, false, min, max, min_excluded, 0, unit};
}

constexpr std::int64_t kInt = 2147483647;  // options stored as int
// A `layout` drawing is read by a person: past a few thousand GPUs or a thousand layers it is no
// longer one, and drawing it costs time and memory in proportion.
constexpr std::int64_t kMaxDrawn = 4096;
constexpr std::int64_t kMaxDrawnLayers = 1024;
constexpr double kDay = 86400;

// Real-valued bounds: a GPU reaches ~10^4..10^6 tokens/s on published runs, so 10^9 per GPU is a
// typo or a unit slip (tokens/s of the whole job); a GPU-hour costs a few dollars (10^6 is any
// currency); the straggler speed is the per-GPU speed factor of limits.hpp.
constexpr std::array kRanges = {
    // ---- counts (integers)
    count("", "--gpus", 1, limits::kMaxGpus, "GPUs"),
    count("layout", "--gpus", 1, kMaxDrawn, "GPUs"),
    count("layout", "--pp", 1, kMaxDrawn, "stages"),
    count("layout", "--dp-replicate", 1, kMaxDrawn, "replicas"),
    count("layout", "--dp-shard", 1, kMaxDrawn, "GPUs"),
    count("layout", "--tp", 1, kMaxDrawn, "GPUs"),
    count("layout", "--layers", 1, kMaxDrawnLayers, "layers"),
    count("collective", "--gpus-per-node", 1, limits::kMaxGpusPerNode, "GPUs"),
    count("plan", "--global-batch", 1, limits::kMaxBatch, "sequences"),
    count("plan capacity", "--seq", 1, limits::kMaxSeqLen, "tokens"),
    count("plan", "--top", 1, kInt, "plans"),
    count("plan capacity", "--simulate-budget", 1, kInt, "plans"),
    count("plan", "--verify-rows", 1, kInt, "plans"),
    count("plan", "--threads", 1, 64, "threads"),
    FlagRange{"simulate", "--seed", true, 0, 0, false, std::numeric_limits<std::uint64_t>::max(), ""},
    // ---- quantities (real numbers; SI or binary suffixes where the flag's parser takes them)
    real("capacity", "--tokens", 1, false, limits::kMaxTrainingTokens, "tokens"),
    real("plan capacity", "--global-batch-tokens", 1, false, static_cast<double>(limits::kMaxTokensPerStep), "tokens"),
    real("capacity", "--deadline", limits::kMinDeadlineDays, false, limits::kMaxDeadlineDays, "days"),
    real("capacity", "--checkpoint-interval", 1, false, limits::kMaxDeadlineDays * kDay, "seconds"),
    real("capacity", "--price-per-gpu-hour", 0, false, 1e6, "per GPU-hour"),
    real("plan", "--headroom", 0, false, 90, "percent"),
    real("simulate", "--observed-tokens-per-s", 0, true, 1e9, "tokens/s per GPU"),
    real("kernel", "--memory-bytes", 1, false, limits::kMaxSizeBytes, "bytes"),
    real("collective", "--sizes", 1, false, limits::kMaxSizeBytes, "bytes"),
    real("simulate", "--straggler FRACTION", 0, false, 1, "of the GPUs"),
    real("simulate", "--straggler SPEED", limits::kMinSpeedFactor, false, limits::kMaxSpeedFactor, "x"),
};

// Integers below 2^53 exactly, others in short scientific form ("1e18", not "1e+18").
std::string number_text(double v) {
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) return fmt::format("{:.0f}", v);
  std::string s = fmt::format("{:g}", v);
  if (const auto e = s.find("e+"); e != std::string::npos) s.erase(e + 1, 1);
  if (const auto e = s.find("e-0"); e != std::string::npos) s.erase(e + 2, 1);
  return s;
}

std::string out_of_range(const FlagRange& r, const std::string& text, bool below) {
  const std::string shown = shown_text(text);
  if (below && r.integer && r.min == 1) return fmt::format("must be a positive integer, got '{}' (range {})", shown, range_text(r));
  if (below && r.min_excluded && r.min == 0) return fmt::format("must be positive, got '{}' (range {})", shown, range_text(r));
  if (below) return fmt::format("'{}' is below the minimum {} (range {})", shown, number_text(r.min), range_text(r));
  return fmt::format("{} is above the maximum {} (range {}, docs/limits.md)", shown,
                     r.integer ? fmt::format("{}", r.int_max) : number_text(r.max), range_text(r));
}

}  // namespace

bool lists(std::string_view commands, std::string_view command) {
  for (std::size_t at = 0; at < commands.size();) {
    const std::size_t end = std::min(commands.find(' ', at), commands.size());
    if (commands.substr(at, end - at) == command) return true;
    at = end + 1;
  }
  return false;
}

std::string shown_text(const std::string& text) {
  std::string s = text.size() <= 40 ? text : text.substr(0, 37) + "...";
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return s;
}

std::span<const FlagRange> flag_ranges() { return kRanges; }

const FlagRange& flag_range(std::string_view command, std::string_view flag) {
  const FlagRange* common = nullptr;
  for (const auto& r : kRanges) {
    if (r.flag != flag) continue;
    if (lists(r.command, command)) return r;
    if (r.command.empty()) common = &r;
  }
  if (common == nullptr) throw std::logic_error(fmt::format("no range for {} {}", command, flag));
  return *common;
}

std::string range_text(const FlagRange& r) {
  const std::string unit = r.unit.empty() ? "" : fmt::format(" {}", r.unit);
  if (r.integer) return fmt::format("{} .. {}{}", number_text(r.min), r.int_max, unit);
  return fmt::format("{}{} .. {}{}", number_text(r.min), r.min_excluded ? " (excluded)" : "", number_text(r.max), unit);
}

std::string check_text(const FlagRange& r, const std::string& text, double* value) {
  const char* b = text.data();
  const char* e = b + text.size();
  if (r.integer) {
    // Unsigned parse: a leading '-' is refused (from_chars does not wrap it as stoull would).
    std::uint64_t v = 0;
    const char* digits = b < e && *b == '+' ? b + 1 : b;
    const auto [ptr, ec] = std::from_chars(digits, e, v);
    const bool negative = b < e && *b == '-' && e - b > 1 &&
                          std::all_of(b + 1, e, [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (negative) return out_of_range(r, text, true);
    if (text.empty() || ptr != e || (ec != std::errc() && ec != std::errc::result_out_of_range) || digits == e)
      return fmt::format("must be an integer, got '{}' (range {})", shown_text(text), range_text(r));
    if (ec == std::errc::result_out_of_range || v > r.int_max) return out_of_range(r, text, false);
    if (static_cast<double>(v) < r.min) return out_of_range(r, text, true);
    if (value != nullptr) *value = static_cast<double>(v);
    return "";
  }
  double v = 0;
  // from_chars takes no leading '+' and reads "nan"/"inf" as numbers: both are handled here.
  const char* start = b < e && *b == '+' ? b + 1 : b;
  const auto [ptr, ec] = std::from_chars(start, e, v, std::chars_format::general);
  const bool has_digit = std::any_of(start, e, [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  if (text.empty() || ptr != e || !has_digit || (ec != std::errc() && ec != std::errc::result_out_of_range))
    return fmt::format("'{}' is not a number (range {})", shown_text(text), range_text(r));
  if (ec == std::errc::result_out_of_range) {
    // Past a double's range: either huge (above any maximum) or so small it reads as 0.
    const bool tiny = text.find_first_of("eE") != std::string::npos &&
                      text.find('-', text.find_first_of("eE")) != std::string::npos;
    return out_of_range(r, text, tiny);
  }
  if (value != nullptr) *value = v;
  return check_text_value(r, v, text);
}

std::string check_text_value(const FlagRange& r, double v, const std::string& shown) {
  if (std::isnan(v)) return fmt::format("'{}' is not a number (range {})", shown_text(shown), range_text(r));
  if (v < r.min || (r.min_excluded && v == r.min)) return out_of_range(r, shown, true);
  if (!(v <= r.max)) return out_of_range(r, shown, false);
  return "";
}

double check_value(const FlagRange& r, double v, const std::string& shown) {
  if (const std::string why = check_text_value(r, v, shown); !why.empty()) throw InputError("", std::string(r.flag), why);
  return v;
}

CLI::Validator in_range(std::string_view command, std::string_view flag) {
  const FlagRange& r = flag_range(command, flag);
  return CLI::Validator([&r](std::string& text) -> std::string { return check_text(r, text); },
                        fmt::format("[{}]", range_text(r)));
}

}  // namespace meshplan::cli
