// Validation CSV (../shared/validation/README.md columns): parse and map every row.
#include "fuzz_common.hpp"
#include "validate/validation_row.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_input_errors_only([&] {
    const CsvTable t = parse_csv_table(text, "fuzz.csv");
    for (std::size_t i = 0; i < t.rows.size(); ++i) (void)map_validation_row(t, i);
  });
  return 0;
}
