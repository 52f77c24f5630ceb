#pragma once
// A 128-bit digest of a stream of 64-bit words: FNV-1a beside a splitmix64 chain, two unrelated
// mixes of one stream, so that a false match among the thousands of things a run digests (the
// planner's lowered steps, validate's rows) is out of reach (~2^-100). Equal digests are taken
// to mean equal inputs; nothing is stored or compared across processes.
#include <array>
#include <cstdint>
#include <string_view>

namespace meshplan {

struct Digest128 {
  std::array<std::uint64_t, 2> h{1469598103934665603ull, 0x9e3779b97f4a7c15ull};
  void word(std::uint64_t v) {
    h[0] = (h[0] ^ v) * 1099511628211ull;
    std::uint64_t z = h[1] + v + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    h[1] = z ^ (z >> 31);
  }
  // A string with its length first, so that ["ab", "c"] and ["a", "bc"] differ.
  void text(std::string_view s) {
    word(static_cast<std::uint64_t>(s.size()));
    for (const char ch : s) word(static_cast<unsigned char>(ch));
  }
};

}  // namespace meshplan
