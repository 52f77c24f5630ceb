#pragma once
// Per-GPU speed factors for `simulate --full`: a straggler fraction sampled deterministically
// (--straggler FRACTION:SLOWDOWN) or a measured list (--gpu-speeds FILE). A factor scales the
// rank's compute: 0.9 runs every kernel at 90 % of the nominal rate.
#include <cstdint>
#include <string>
#include <vector>

namespace meshplan {

struct StragglerSpec {
  double fraction = 0;   // share of GPUs that are slow, [0, 1]
  double speed = 1;      // their speed factor, > 0 (below 1: slower than nominal)
};

// "0.01:0.9" -> {0.01, 0.9}. InputError(`flag`, ...) on bad syntax, a fraction outside [0, 1] or
// a speed <= 0.
StragglerSpec parse_straggler(const std::string& text, const std::string& flag = "--straggler");

// `n_ranks` factors: round(fraction x n_ranks) of them (at least one when fraction > 0) set to
// `speed`, the ranks drawn by a Fisher-Yates shuffle driven by a 64-bit Mersenne Twister with
// `seed`, so the same inputs give the same ranks on every platform.
std::vector<double> sample_straggler_speeds(std::int64_t n_ranks, const StragglerSpec& s, std::uint64_t seed);

// A text file of "RANK FACTOR" lines ('#' starts a comment); unlisted ranks run at 1. InputError
// naming the file and the line for a rank outside [0, n_ranks), a repeated rank or a factor <= 0.
std::vector<double> load_gpu_speeds(const std::string& file, std::int64_t n_ranks);

// The slowest rank (lowest factor; the first of equals): a synchronous step runs at its pace.
std::int64_t slowest_rank(const std::vector<double>& speeds);

}  // namespace meshplan
