// Calibration measurements JSON (what `meshplan calibrate` writes and --fit reads).
#include "calibrate/measurements.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  const std::string path = fuzz::write_input(data, size, "measurements.json");
  fuzz::expect_input_errors_only([&] { (void)calibrate::read_measurements(path); });
  return 0;
}
