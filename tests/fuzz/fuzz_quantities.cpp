// The CLI's quantity parsers: the first byte picks the parser, the rest is the argument
// (token counts "4M" / "15T" / "4Mi", deadlines "60d", size ranges "1K:8G", positive counts).
#include "cli/quantity.hpp"
#include "fuzz_common.hpp"
#include "spec/limits.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  fuzz::expect_input_errors_only([&] {
    switch (data[0] % 4) {
      case 0: (void)cli::parse_token_count(text, "--tokens", limits::kMaxTrainingTokens); break;
      case 1: (void)cli::parse_deadline_days(text, "--deadline"); break;
      case 2: {
        const auto sizes = cli::parse_size_range(text, "--sizes");
        if (sizes.size() > 64) std::abort();  // 1 B .. 1 PiB doubling is 51 sizes
        break;
      }
      default: (void)cli::parse_positive_count(text, "--gemm", "M", limits::kMaxKernelDim); break;
    }
  });
  return 0;
}
