// Megatron-LM arguments (args files and launch scripts): import, resolve on 8 GPUs.
#include "fuzz_common.hpp"
#include "import/config_loader.hpp"
#include "import/import_megatron.hpp"
#include "spec/model_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_input_errors_only([&] {
    (void)looks_like_megatron_args(text);
    RunConfig rc = import_megatron_args("fuzz.args", text);
    resolve_layout(rc, rc.n_gpus > 0 ? std::optional<std::int64_t>{} : std::optional<std::int64_t>{8});
    (void)n_params(rc.model);
  });
  return 0;
}
