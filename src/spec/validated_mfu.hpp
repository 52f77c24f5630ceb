#pragma once
// The highest model FLOP utilisation the published runs of meshplan's dev sets reached, by
// runtime, GPU architecture, model kind (dense or MoE) and low-precision recipe, over sequences of
// at most kValidatedMaxSeqLen tokens (longer ones inflate MFU's attention term). A prediction above
// it is outside what the model was validated on: plan and simulate say so. The table is data
// (plans/validated_mfu.toml), written by tests/regen_envelope.sh from `validate --json`.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshplan {

inline constexpr std::int64_t kValidatedMaxSeqLen = 8192;

struct ValidatedMfu {
  std::string runtime;   // spec/runtimes.cpp names
  std::string gpu_arch;  // "sm90"
  bool moe = false;
  std::string fp8;       // Fp8Recipe name, "none" for the 16-bit compute dtype
  double mfu = 0;        // the highest measured, meshplan's convention (docs/validation.md)
  std::string run;       // the dev-set row that reached it
  int runs = 0;          // rows in the group
};

// The shipped table (read once); InputError naming the file and key when it is malformed.
const std::vector<ValidatedMfu>& validated_mfu_table();
// A table file read as the shipped one is (tests read malformed ones).
std::vector<ValidatedMfu> load_validated_mfu(const std::string& path);

// The group a prediction belongs to; nullopt when no published run is in it, or the sequence is
// longer than the table covers.
std::optional<ValidatedMfu> validated_mfu(std::string_view runtime, std::string_view gpu_arch, bool moe,
                                          std::string_view fp8, std::int64_t seq_len);

// The group of a plan's runtime, recipe and model kind on a GPU architecture.
struct Plan;
std::optional<ValidatedMfu> validated_mfu_of(const Plan& p, std::string_view gpu_arch, bool moe, std::int64_t seq_len);

// One line when `mfu` is above its group's highest measured MFU ("" otherwise): the figure, the
// group, the run that set the bound.
std::string beyond_validated_note(double mfu, const ValidatedMfu& v);

}  // namespace meshplan
