#pragma once
// Numbers with unit suffixes on the command line: token budgets are decimal ("15T" = 15e12),
// batch sizes in tokens binary ("4M" = 2^22 = 512 sequences of 8192), as practitioners quote them.
#include <string>

namespace meshplan::cli {

enum class Scale { decimal, binary };

// "15T", "4M", "4194304" -> the number; throws InputError naming `flag` on anything else.
double parse_scaled(const std::string& text, const std::string& flag, Scale scale);

}  // namespace meshplan::cli
