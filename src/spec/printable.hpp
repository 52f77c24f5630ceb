#pragma once
// Text from a user's file as meshplan may echo it on a terminal or in JSON: valid UTF-8 is kept,
// control bytes (NUL, ESC, newlines) and bytes that are not part of a valid UTF-8 sequence become
// '?'. A row id holding "\0" or "\xff\xfe" then neither reaches the terminal raw nor makes the
// JSON writer throw on invalid UTF-8.
#include <string>
#include <string_view>

namespace meshplan {

inline std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out.push_back(c < 0x20 || c == 0x7f ? '?' : static_cast<char>(c));
      ++i;
      continue;
    }
    // Length and the smallest code point of the sequence that lead byte opens (overlong forms,
    // surrogates and code points past U+10FFFF are not valid UTF-8).
    const std::size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    char32_t cp = n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    for (std::size_t k = 1; ok && k < n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      ok = (cc & 0xc0) == 0x80;
      cp = (cp << 6) | (cc & 0x3f);
    }
    ok = ok && !(n == 3 && cp < 0x800) && !(n == 4 && (cp < 0x10000 || cp > 0x10ffff)) && !(cp >= 0xd800 && cp <= 0xdfff);
    if (ok) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.push_back('?');
      ++i;
    }
  }
  return out;
}

}  // namespace meshplan
