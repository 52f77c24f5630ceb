#include "emit/torchtitan_keys.hpp"

#include <algorithm>
#include <map>

#include "import/import_torchtitan.hpp"

namespace meshplan {

const std::vector<std::string>& torchtitan_keys(TorchtitanVersion v) {
  static const std::vector<std::string> early = torchtitan_layout_keys(TorchtitanLayout::early_2026);
  static const std::vector<std::string> mid = torchtitan_layout_keys(TorchtitanLayout::mid_2025);
  static const std::vector<std::string> none;
  switch (v) {
    case TorchtitanVersion::early_2026: return early;
    case TorchtitanVersion::mid_2025: return mid;
    case TorchtitanVersion::registry: return none;
  }
  return none;
}

bool torchtitan_key_known(TorchtitanVersion v, std::string_view dotted_key) {
  const auto& keys = torchtitan_keys(v);
  return std::binary_search(keys.begin(), keys.end(), dotted_key);
}

}  // namespace meshplan
