#pragma once
// Where shipped data lives (models/, hardware_profiles/, plans/): $MESHPLAN_DATA_DIR if set,
// otherwise the source tree the binary was built from.
#include <filesystem>

namespace meshplan {
std::filesystem::path data_root();
}
