#pragma once
// One row of a small measurement series (CSV without quoting): its fields, and numbers read from
// them with errors that name the file, the line and the column.
#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "spec/error.hpp"
#include "spec/input_file.hpp"

namespace meshplan::calibrate {

inline std::vector<std::string> split_commas(const std::string& line) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = line.find(',', start);
    out.push_back(line.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

struct RowReader {
  const std::string& file;
  int line;
  [[noreturn]] void fail(const std::string& column, const std::string& reason) const {
    throw InputError(file, fmt::format("line {}: {}", line, column), reason);
  }
  // A finite number in (lo, hi].
  double number(const std::string& text, const std::string& column, double lo, double hi) const {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v))
      fail(column, fmt::format("'{}' is not a number", text));
    if (v <= lo || v > hi) fail(column, fmt::format("{} is outside ({}, {}]", text, lo, hi));
    return v;
  }
  int count(const std::string& text, const std::string& column, int hi) const {
    const double v = number(text, column, 0, hi);
    if (v != std::floor(v)) fail(column, fmt::format("'{}' is not a whole number", text));
    return static_cast<int>(v);
  }
};

// Hands row(line_number, line) every data line of a series file: after its header line, which must
// be `header`, skipping empty lines and '#' lines (where the figures come from). Returns whether
// the header was there.
template <typename Row>
bool for_each_series_row(InputFile& in, std::string_view header, Row&& row) {
  std::string line;
  int line_no = 0;
  bool seen = false;
  while (in.getline(line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    if (!seen) {
      if (line != header)
        throw InputError(in.path(), fmt::format("line {}", line_no), fmt::format("the header must be {}", header));
      seen = true;
      continue;
    }
    row(line_no, line);
  }
  return seen;
}

}  // namespace meshplan::calibrate
