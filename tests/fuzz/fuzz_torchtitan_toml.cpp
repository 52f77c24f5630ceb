// torchtitan TOML (mid-2025 and early-2026 layouts): import, resolve on 8 GPUs.
#include "fuzz_common.hpp"
#include "import/config_loader.hpp"
#include "spec/import_common.hpp"
#include "import/import_torchtitan.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_input_errors_only([&] {
    const toml::table t = importer::parse_toml("fuzz.toml", text);
    (void)detect_torchtitan_layout(t);
    RunConfig rc = import_torchtitan("fuzz.toml", t);
    resolve_layout(rc, 8);
    (void)n_params(rc.model);
  });
  return 0;
}
