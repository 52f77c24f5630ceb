#pragma once
// A small CSV reader for the measurement tables in tests/cost (fields may be double-quoted,
// lines starting with '#' are comments).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace meshplan::test {

// One CSV record; fields may be double-quoted (sources contain commas).
inline std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char ch = line[i];
    if (quoted) {
      if (ch == '"' && i + 1 < line.size() && line[i + 1] == '"') out.back() += '"', ++i;
      else if (ch == '"') quoted = false;
      else out.back() += ch;
    } else if (ch == '"') {
      quoted = true;
    } else if (ch == ',') {
      out.emplace_back();
    } else {
      out.back() += ch;
    }
  }
  return out;
}

struct CsvTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  const std::string& at(const std::vector<std::string>& row, const std::string& col) const {
    // Throws rather than asserting: tests call this inside INFO/CAPTURE lambdas, where a doctest
    // assertion would re-enter the reporter (with -s, a self-deadlock on its mutex).
    const auto it = std::find(header.begin(), header.end(), col);
    if (it == header.end()) throw std::out_of_range("no column '" + col + "'");
    return row.at(static_cast<std::size_t>(it - header.begin()));
  }
};

inline CsvTable read_csv(const std::filesystem::path& p) {
  std::ifstream in(p);
  REQUIRE_MESSAGE(in.good(), "cannot read ", p.string());
  CsvTable t;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    auto fields = csv_fields(line);
    if (t.header.empty()) t.header = std::move(fields);
    else {
      REQUIRE_MESSAGE(fields.size() == t.header.size(), "bad field count in ", p.string(), ": ", line);
      t.rows.push_back(std::move(fields));
    }
  }
  return t;
}

}  // namespace meshplan::test
