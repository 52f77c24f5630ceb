#include "cli/quantity.hpp"

#include <fmt/format.h>

#include "spec/error.hpp"

namespace meshplan::cli {

double parse_scaled(const std::string& text, const std::string& flag, Scale scale) {
  std::size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (...) {
    throw InputError("", flag, fmt::format("'{}' is not a number (e.g. 4M, 15T or 4194304)", text));
  }
  const std::string suffix = text.substr(pos);
  const double step = scale == Scale::binary ? 1024.0 : 1000.0;
  double mult = 1;
  if (suffix == "K" || suffix == "k") mult = step;
  else if (suffix == "M") mult = step * step;
  else if (suffix == "G" || suffix == "B") mult = step * step * step;
  else if (suffix == "T") mult = step * step * step * step;
  else if (!suffix.empty())
    throw InputError("", flag, fmt::format("unknown suffix '{}' in '{}' (K, M, G or B, T; {})", suffix, text,
                                           scale == Scale::binary ? "powers of 1024" : "powers of 1000"));
  if (!(v > 0)) throw InputError("", flag, fmt::format("must be positive, got '{}'", text));
  return v * mult;
}

}  // namespace meshplan::cli
