// Hardware profile TOML (hardware_profiles/*.toml schema), loaded by path.
#include "fuzz_common.hpp"
#include "spec/cluster_loader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  const std::string path = fuzz::write_input(data, size, "profile.toml");
  fuzz::expect_input_errors_only([&] { (void)load_cluster(path); });
  return 0;
}
