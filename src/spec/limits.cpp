#include "spec/limits.hpp"

#include <fmt/format.h>

#include "spec/error.hpp"

namespace meshplan::limits {

std::int64_t check_count(const std::string& file, const std::string& key, std::int64_t v, std::int64_t min,
                         std::int64_t max, const char* what) {
  if (v < min || v > max)
    throw InputError(file, key,
                     v > max ? fmt::format("{} is above the maximum {} for {} (docs/limits.md)", v, max, what)
                             : fmt::format("must be at least {}, got {}", min, v));
  return v;
}

int check_int(const std::string& file, const std::string& key, std::int64_t v, std::int64_t min, std::int64_t max,
              const char* what) {
  return static_cast<int>(check_count(file, key, v, min, max, what));
}

std::optional<std::int64_t> mul(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<std::int64_t> mul3(std::int64_t a, std::int64_t b, std::int64_t c) {
  const auto ab = mul(a, b);
  return ab ? mul(*ab, c) : std::nullopt;
}

}  // namespace meshplan::limits
