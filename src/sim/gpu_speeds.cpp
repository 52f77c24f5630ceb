// Per-GPU speed factors (gpu_speeds.hpp).
#include "sim/gpu_speeds.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

#include "spec/error.hpp"
#include "spec/input_file.hpp"
#include "spec/limits.hpp"

namespace meshplan {

StragglerSpec parse_straggler(const std::string& text, const std::string& flag) {
  const auto colon = text.find(':');
  if (colon == std::string::npos)
    throw InputError("", flag, fmt::format("'{}' is not FRACTION:SPEED (e.g. 0.01:0.9)", text));
  StragglerSpec s;
  try {
    std::size_t a = 0, b = 0;
    s.fraction = std::stod(text.substr(0, colon), &a);
    s.speed = std::stod(text.substr(colon + 1), &b);
    if (a != colon || b != text.size() - colon - 1) throw std::invalid_argument("trailing text");
  } catch (const std::exception&) {
    throw InputError("", flag, fmt::format("'{}' is not FRACTION:SPEED (e.g. 0.01:0.9)", text));
  }
  if (!(s.fraction >= 0 && s.fraction <= 1))
    throw InputError("", flag, fmt::format("fraction must be in [0, 1], got {:g}", s.fraction));
  if (!(s.speed >= limits::kMinSpeedFactor && s.speed <= limits::kMaxSpeedFactor))
    throw InputError("", flag, fmt::format("speed factor must be between {:g} and {:g}, got {:g}", limits::kMinSpeedFactor,
                                           limits::kMaxSpeedFactor, s.speed));
  return s;
}

std::vector<double> sample_straggler_speeds(std::int64_t n_ranks, const StragglerSpec& s, std::uint64_t seed) {
  std::vector<double> speeds(static_cast<std::size_t>(std::max<std::int64_t>(0, n_ranks)), 1.0);
  if (n_ranks <= 0 || !(s.fraction > 0)) return speeds;
  const auto n_slow = std::clamp<std::int64_t>(std::llround(s.fraction * static_cast<double>(n_ranks)), 1, n_ranks);
  std::vector<std::int64_t> order(speeds.size());
  std::iota(order.begin(), order.end(), 0);
  // std::shuffle and the std distributions are implementation-defined; the engine's raw output
  // is not, so the draw (with rejection against modulo bias) is written out.
  std::mt19937_64 rng(seed);
  auto below = [&](std::uint64_t n) {
    const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() - std::numeric_limits<std::uint64_t>::max() % n;
    std::uint64_t x = rng();
    while (x >= limit) x = rng();
    return x % n;
  };
  for (std::int64_t i = 0; i < n_slow; ++i) {
    const auto j = static_cast<std::int64_t>(below(static_cast<std::uint64_t>(n_ranks - i))) + i;
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
    speeds[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])] = s.speed;
  }
  return speeds;
}

std::vector<double> load_gpu_speeds(const std::string& file, std::int64_t n_ranks) {
  InputFile in(file, InputKind::gpu_speeds);
  std::vector<double> speeds(static_cast<std::size_t>(std::max<std::int64_t>(0, n_ranks)), 1.0);
  std::vector<bool> seen(speeds.size(), false);
  std::string line;
  for (int n = 1; in.getline(line); ++n) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::istringstream ls(line);
    std::string rank_text, speed_text, extra;
    if (!(ls >> rank_text)) continue;
    const std::string key = fmt::format("line {}", n);
    if (!(ls >> speed_text) || (ls >> extra))
      throw InputError(file, key, "expected 'RANK FACTOR', e.g. '17 0.9'");
    std::int64_t rank = 0;
    double speed = 0;
    try {
      std::size_t a = 0, b = 0;
      rank = std::stoll(rank_text, &a);
      speed = std::stod(speed_text, &b);
      if (a != rank_text.size() || b != speed_text.size()) throw std::invalid_argument("trailing text");
    } catch (const std::exception&) {
      throw InputError(file, key, "expected 'RANK FACTOR', e.g. '17 0.9'");
    }
    if (rank < 0 || rank >= n_ranks)
      throw InputError(file, key, fmt::format("rank {} is outside this run's 0..{}", rank, n_ranks - 1));
    if (!(speed >= limits::kMinSpeedFactor && speed <= limits::kMaxSpeedFactor))
      throw InputError(file, key, fmt::format("speed factor must be between {:g} and {:g}, got {}",
                                              limits::kMinSpeedFactor, limits::kMaxSpeedFactor, speed_text));
    if (seen[static_cast<std::size_t>(rank)]) throw InputError(file, key, fmt::format("rank {} is listed twice", rank));
    seen[static_cast<std::size_t>(rank)] = true;
    speeds[static_cast<std::size_t>(rank)] = speed;
  }
  return speeds;
}

std::int64_t slowest_rank(const std::vector<double>& speeds) {
  if (speeds.empty()) return 0;
  return static_cast<std::int64_t>(std::min_element(speeds.begin(), speeds.end()) - speeds.begin());
}

}  // namespace meshplan
