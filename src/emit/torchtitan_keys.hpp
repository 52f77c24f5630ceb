#pragma once
// torchtitan job-config keys per pinned TOML version, as dotted "section.key", written down from
// torchtitan/config/job_config.py at 238fa9953e4a and at 8570415c3 (the mid-2025 spellings).
// The emitter checks every key it writes against this list; the importer
// (src/import/import_torchtitan.cpp) keeps its own list, and the round-trip tests run emitted files
// through it, so the two derivations are checked against each other.
#include <string>
#include <string_view>
#include <vector>

#include "emit/emit_common.hpp"

namespace meshplan {

// Every key (sorted) that `v`'s job_config accepts; empty for the registry era, which has no TOML.
const std::vector<std::string>& torchtitan_keys(TorchtitanVersion v);
bool torchtitan_key_known(TorchtitanVersion v, std::string_view dotted_key);

}  // namespace meshplan
