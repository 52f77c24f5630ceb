// NCCL constants table TOML (hardware_profiles/nccl/*.toml), loaded by path.
#include "fuzz_common.hpp"
#include "spec/nccl_table.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  const std::string path = fuzz::write_input(data, size, "nccl.toml");
  fuzz::expect_input_errors_only([&] { (void)load_nccl_table(path); });
  return 0;
}
