#pragma once
// torchtitan job-config keys per pinned TOML version, as dotted "section.key": the importer's table
// (src/import/import_torchtitan.cpp, torchtitan/config/job_config.py at 238fa9953e4a and at
// 8570415c3), so that what the emitter writes and what the importer reads are one list.
#include <string>
#include <string_view>
#include <vector>

#include "emit/emit_common.hpp"

namespace meshplan {

// Every key (sorted) that `v`'s job_config accepts; empty for the registry era, which has no TOML.
const std::vector<std::string>& torchtitan_keys(TorchtitanVersion v);
bool torchtitan_key_known(TorchtitanVersion v, std::string_view dotted_key);

}  // namespace meshplan
