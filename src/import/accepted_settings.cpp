#include "import/accepted_settings.hpp"

#include <algorithm>
#include <fmt/format.h>

namespace meshplan {

const UnmodelledSetting* find_unmodelled(const std::vector<UnmodelledSetting>& table, std::string_view key) {
  const auto it = std::find_if(table.begin(), table.end(), [&](const UnmodelledSetting& s) { return s.key == key; });
  return it == table.end() ? nullptr : &*it;
}

bool differs_from_model(const UnmodelledSetting& s, const std::string& value) {
  // YAML and Python spell booleans with a capital too.
  auto canonical = [](std::string v) {
    if (v == "True") return std::string("true");
    if (v == "False") return std::string("false");
    return v;
  };
  return s.modelled_value.empty() || canonical(value) != canonical(s.modelled_value);
}

void note_default(RunConfig& rc, std::string_view key, std::string_view value, std::string_view rule) {
  rc.assumptions.push_back(fmt::format("{}: not stated; {} ({})", key, value, rule));
}

void note_unmodelled(RunConfig& rc, const UnmodelledSetting& s, const std::string& value) {
  auto& names = rc.unmodelled_settings;
  if (std::find(names.begin(), names.end(), s.key) != names.end()) return;
  names.insert(std::upper_bound(names.begin(), names.end(), s.key), s.key);
  const std::string as = s.modelled_value.empty() ? std::string("as if it were not given")
                                                   : fmt::format("with {}", s.modelled_value);
  rc.warnings.push_back(fmt::format("{}: {} accepted but not modelled ({}); the step is simulated {} "
                                    "(docs/importers.md, \"Accepted but not modelled\")",
                                    s.key, value, s.effect, as));
}

}  // namespace meshplan
