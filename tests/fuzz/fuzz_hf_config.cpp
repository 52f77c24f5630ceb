// Hugging Face config.json: load as a model, count parameters.
#include "fuzz_common.hpp"
#include "spec/model_loader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  const std::string path = fuzz::write_input(data, size, "config.json");
  fuzz::expect_input_errors_only([&] {
    const ModelSpec m = load_model(path);
    (void)n_params(m);
    (void)n_active_params(m);
  });
  return 0;
}
