#pragma once
// Numbers with unit suffixes on the command line (docs/limits.md):
// - token counts are SI, as papers quote them: "15T" = 15e12, "4M" = 4e6; "4Mi" = 4 * 2^20 is
//   accepted where binary is meant;
// - byte sizes (collective --sizes) are binary, as nccl-tests prints them: "1K" = 1024;
// - durations: "60d", "36h", "12w".
// Every parser bounds its result and throws InputError naming the flag on anything else.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshplan::cli {

// "15T", "4M", "4Mi", "4194304" -> the number, positive and finite, at most `max`.
double parse_token_count(const std::string& text, const std::string& flag, double max);

// --global-batch-tokens: a token count rounded to a whole number, at most limits::kMaxTokensPerStep
// and at least one sequence of `seq_len` (--seq).
std::int64_t parse_batch_tokens(const std::string& text, std::int64_t seq_len);

// "60d", "60" (days), "36h", "12w" -> days, within [limits::kMinDeadlineDays, limits::kMaxDeadlineDays].
double parse_deadline_days(const std::string& text, const std::string& flag);

// "600", "600s", "30m", "2h", "1d" -> seconds, within the flag's range (flag_ranges.hpp).
double parse_duration_seconds(const std::string& text, const std::string& flag);

// "1K", "8G", "64MiB", "4096" -> bytes (binary suffixes), 1 .. limits::kMaxSizeBytes.
double parse_size_bytes(const std::string& text, const std::string& flag);
// "LO:HI" or "S": the sizes doubling from LO up to HI.
std::vector<double> parse_size_range(const std::string& spec, const std::string& flag);

// A positive base-10 integer at most `max` ("what" names it in the message).
std::int64_t parse_positive_count(std::string_view text, const std::string& flag, std::string_view what,
                                  std::int64_t max);

}  // namespace meshplan::cli
