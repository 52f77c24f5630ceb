// meshplan plan TOML: parse, import, resolve the layout, count parameters.
#include "fuzz_common.hpp"
#include "import/config_loader.hpp"
#include "spec/import_common.hpp"
#include "spec/plan_toml.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  const std::string path = fuzz::write_input(data, size, "plan.toml");
  fuzz::expect_input_errors_only([&] {
    const std::string text = importer::read_text(path);
    RunConfig rc = read_plan_toml(path, importer::parse_toml(path, text));
    resolve_layout(rc, rc.n_gpus > 0 ? std::nullopt : std::optional<std::int64_t>(8));
    (void)n_params(rc.model);
  });
  return 0;
}
