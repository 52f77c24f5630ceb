#pragma once
// Every file meshplan reads goes through here. Only regular files are read (or symbolic links to
// them): a FIFO would block the reader forever and a device such as /dev/zero never ends, so both
// are refused before anything is read, with what the path is. Each format has a maximum size
// (docs/limits.md, "Files meshplan reads"), checked against the file's size before reading and
// again while reading, since a file can grow after it was measured.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace meshplan {

enum class InputKind {
  model_toml,        // models/*.toml, `model FILE.toml`
  hf_config,         // a Hugging Face config.json
  run_config,        // --config: llm-foundry YAML, torchtitan TOML, Megatron args or script, plan TOML
  hardware_profile,  // hardware_profiles/*.toml, --cluster FILE, calibrate --base, aliases.toml
  nccl_table,        // hardware_profiles/nccl/*.toml
  measurements,      // calibrate --fit JSON
  gpu_speeds,        // simulate --full --gpu-speeds
  validation_csv,    // validate FILE.csv: streamed row by row
  validation_csv_whole,  // a validation CSV read whole: --cross-validate, --collectives, calibrate --runs
  training_log,      // calibrate --runs: a run's own log (streamed line by line)
  runs_listing,      // calibrate --runs runs.toml: logs, configs and clusters
  validated_mfu,     // plans/validated_mfu.toml: the MFU the published runs reached
  nccl_tests_series,  // calibrate --nccl-tests: measured nccl-tests points (CSV)
  gemm_shapes,        // calibrate --gemm-shapes: GEMMs timed by shape (CSV)
};

struct InputKindInfo {
  InputKind kind;
  std::string_view what;  // as the size error and docs/limits.md name it
  std::uint64_t max_bytes;
};

// One row per kind, in the order of the enum; docs/limits.md lists the same table (a test
// compares them).
std::span<const InputKindInfo> input_kinds();
const InputKindInfo& input_kind_info(InputKind kind);

// An open regular file within its kind's size limit. Every failure is InputError(path, key,
// reason) with the reason in words ("is a named pipe (FIFO), not a regular file").
class InputFile {
public:
  InputFile(const std::string& path, InputKind kind, std::string key = "");
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  std::uint64_t size() const { return size_; }     // as measured when opened
  std::uint64_t consumed() const { return read_; }  // bytes handed out so far

  // Up to `n` bytes into `buf`; 0 at the end of the file.
  std::size_t read(char* buf, std::size_t n);
  // The next line without its '\n' (and a '\r' before it); false at the end of the file.
  bool getline(std::string& line);
  // The rest of the file.
  std::string read_all();

private:
  bool fill();
  std::string path_, key_;
  const InputKindInfo* info_;
  int fd_ = -1;
  std::uint64_t size_ = 0, read_ = 0, from_disk_ = 0;
  std::string buf_;
  std::size_t pos_ = 0;
  bool eof_ = false;
};

// The whole file as text (InputFile(path, kind, key).read_all()).
std::string read_input_file(const std::string& path, InputKind kind, const std::string& key = "");

// "a folder", "a named pipe (FIFO)", ...: what a path is when it is not a regular file, following
// symbolic links; "" when it is a regular file or does not exist.
std::string describe_non_regular(const std::string& path);

}  // namespace meshplan
