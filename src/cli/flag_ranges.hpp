#pragma once
// The range of every numeric command-line flag, in one table: the checks, `--help` (the
// validator's description) and docs/limits.md (a test compares them) read it. A value outside
// its range, NaN or infinite is an error "FLAG: REASON (range ...)" with exit status 2, never
// clamped or wrapped.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace meshplan::cli {

struct FlagRange {
  std::string_view command;  // the commands it applies to, space-separated; "" = every command with the
                             // flag that no other row names
  std::string_view flag;
  bool integer;
  double min, max;         // real flags; integer flags also hold their bounds here when exact
  bool min_excluded;       // real flags: the minimum itself is refused ("0 (excluded)")
  std::uint64_t int_max;   // integer flags: the maximum, exact even past 2^53 (--seed)
  std::string_view unit;   // what the number counts, as the range text says it
};

std::span<const FlagRange> flag_ranges();
// Whether the space-separated `commands` holds `command`.
bool lists(std::string_view commands, std::string_view command);
// The row of `flag` for `command` (its own row, else the common one); throws std::logic_error for
// a flag missing from the table, which is a programming error caught by the tests.
const FlagRange& flag_range(std::string_view command, std::string_view flag);

// "1 .. 1048576 GPUs", "0 (excluded) .. 1000000000 tokens/s per GPU".
std::string range_text(const FlagRange& r);

// A CLI11 validator for an option stored as a number: checks the text before CLI11 converts it
// (so "-1" never wraps into an unsigned seed and "nan" never passes a comparison).
CLI::Validator in_range(std::string_view command, std::string_view flag);

// The reason `text` is refused for `r`, "" when it is in range; `value` receives the number.
std::string check_text(const FlagRange& r, const std::string& text, double* value = nullptr);

// The reason v (parsed from `shown`) is refused for `r`, "" when in range.
std::string check_text_value(const FlagRange& r, double v, const std::string& shown);

// For values a flag's own parser computed (a duration in seconds, a size in bytes): InputError("",
// flag, REASON (range ...)) when v is NaN, infinite or outside the range; `shown` is what the user typed.
double check_value(const FlagRange& r, double v, const std::string& shown);

// Text as it may be echoed in a message: at most 40 characters, control bytes and bytes >= 0x80
// as '?', so a message stays one readable line.
std::string shown_text(const std::string& text);

}  // namespace meshplan::cli
