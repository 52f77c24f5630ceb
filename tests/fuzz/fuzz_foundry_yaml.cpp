// llm-foundry / Composer YAML with ${...} interpolation and anchors: import, resolve on 8 GPUs.
#include "fuzz_common.hpp"
#include "import/config_loader.hpp"
#include "import/import_composer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_input_errors_only([&] {
    RunConfig rc = import_llm_foundry("fuzz.yaml", text, {});
    resolve_layout(rc, 8);
    (void)n_params(rc.model);
  });
  return 0;
}
