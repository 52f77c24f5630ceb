#include "spec/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "spec/error.hpp"

namespace meshplan {

namespace {

constexpr std::uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;

// A config or a profile is kilobytes (the largest shipped profile is 21 KB, a Hugging Face
// config a few KB): the limits leave two orders of magnitude and refuse the 50 MB config of the
// audit at once. Measurements, speed files and validation CSVs grow with what they describe:
// a speed file holds one line per GPU (2^20 GPUs at up to 64 bytes a line). `validate` streams
// its CSV (memory is the rows in flight and a few numbers per row), so its limit only says where
// a file stops being a table of runs: 16 GiB is some 28 million rows of dev.csv's ~600 bytes,
// days of simulation. Cross-validation, --collectives and calibrate --runs hold every row (about
// 9 KB of memory per mapped row): 128 MiB, some 220,000 rows, keeps them under 2 GB.
// A training log is read line by line and keeps one record per logged step: 1 GiB is months of
// per-step lines; a listing of runs is a few lines per run.
constexpr std::array<InputKindInfo, 14> kKinds = {{
    {InputKind::model_toml, "a model TOML", 1 * kMiB},
    {InputKind::hf_config, "a Hugging Face config.json", 4 * kMiB},
    {InputKind::run_config, "a training config", 4 * kMiB},
    {InputKind::hardware_profile, "a hardware profile", 4 * kMiB},
    {InputKind::nccl_table, "an NCCL constants table", 1 * kMiB},
    {InputKind::measurements, "a calibration measurements file", 64 * kMiB},
    {InputKind::gpu_speeds, "a GPU speed file", 64 * kMiB},
    {InputKind::validation_csv, "a validation CSV (`validate`, streamed)", 16 * kGiB},
    {InputKind::validation_csv_whole, "a validation CSV read whole (`--cross-validate`, `--collectives`, `calibrate --runs`)", 128 * kMiB},
    {InputKind::training_log, "a training log", 1024 * kMiB},
    {InputKind::runs_listing, "a listing of measured runs", 1 * kMiB},
    {InputKind::validated_mfu, "the validated MFU envelope", 1 * kMiB},
    {InputKind::nccl_tests_series, "an nccl-tests series", 1 * kMiB},
    {InputKind::gemm_shapes, "a series of GEMMs timed by shape", 1 * kMiB},
}};

std::string bytes_text(std::uint64_t n) {
  if (n >= kGiB && n % kGiB == 0) return fmt::format("{} GiB", n / kGiB);
  if (n >= kMiB && n % kMiB == 0) return fmt::format("{} MiB", n / kMiB);
  if (n >= kKiB && n % kKiB == 0) return fmt::format("{} KiB", n / kKiB);
  return fmt::format("{} bytes", n);
}

std::string type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a named pipe (FIFO)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// "" for a regular file; otherwise the reason it cannot be read, for InputError.
std::string refusal(const std::string& path, const struct stat& st) {
  if (S_ISREG(st.st_mode)) return "";
  struct stat lst {};
  const bool link = ::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode);
  const std::string what = type_name(st.st_mode);
  if (S_ISDIR(st.st_mode))
    return fmt::format("is {}{}, not a file", link ? "a symbolic link to " : "", what);
  return fmt::format("is {}{}, not a regular file; meshplan reads regular files only", link ? "a symbolic link to " : "",
                     what);
}

}  // namespace

std::span<const InputKindInfo> input_kinds() { return kKinds; }

const InputKindInfo& input_kind_info(InputKind kind) { return kKinds[static_cast<std::size_t>(kind)]; }

std::string describe_non_regular(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return "";
  return type_name(st.st_mode);
}

InputFile::InputFile(const std::string& path, InputKind kind, std::string key)
    : path_(path), key_(std::move(key)), info_(&input_kind_info(kind)) {
  static_assert(kKinds.size() == static_cast<std::size_t>(InputKind::gemm_shapes) + 1);
  if (path.empty()) throw InputError(path, key_, "empty file name");
  // stat before open: opening a FIFO for reading blocks until a writer appears.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    struct stat lst {};
    if (err == ENOENT && ::lstat(path.c_str(), &lst) == 0)
      throw InputError(path, key_, "is a symbolic link to a missing file");
    if (err == ENOENT || err == ENOTDIR) throw InputError(path, key_, "no such file");
    throw InputError(path, key_, fmt::format("cannot read: {}", std::strerror(err)));
  }
  if (const std::string why = refusal(path, st); !why.empty()) throw InputError(path, key_, why);
  auto too_large = [&](std::uint64_t n, const char* how) {
    return InputError(path, key_,
                      fmt::format("{} {} bytes, above the maximum of {} for {} (docs/limits.md)", how, n,
                                  bytes_text(info_->max_bytes), info_->what));
  };
  if (static_cast<std::uint64_t>(st.st_size) > info_->max_bytes) throw too_large(static_cast<std::uint64_t>(st.st_size), "is");
  // O_NONBLOCK: should the path have been swapped for a FIFO since the stat, open does not block;
  // fstat below then refuses it.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd_ < 0) throw InputError(path, key_, fmt::format("cannot open: {}", std::strerror(errno)));
  struct stat fst {};
  std::string why;
  if (::fstat(fd_, &fst) != 0) why = fmt::format("cannot read: {}", std::strerror(errno));
  else if (!S_ISREG(fst.st_mode)) why = fmt::format("is {}, not a regular file; meshplan reads regular files only", type_name(fst.st_mode));
  else if (static_cast<std::uint64_t>(fst.st_size) > info_->max_bytes) {
    ::close(fd_);
    fd_ = -1;
    throw too_large(static_cast<std::uint64_t>(fst.st_size), "is");
  }
  if (!why.empty()) {
    ::close(fd_);
    fd_ = -1;
    throw InputError(path, key_, why);
  }
  size_ = static_cast<std::uint64_t>(fst.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

bool InputFile::fill() {
  if (eof_) return false;
  if (pos_ > 0) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  constexpr std::size_t kChunk = 64 * 1024;
  const std::size_t old = buf_.size();
  buf_.resize(old + kChunk);
  ssize_t n = 0;
  do {
    n = ::read(fd_, buf_.data() + old, kChunk);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    const int err = errno;
    buf_.resize(old);
    throw InputError(path_, key_, fmt::format("read failed: {}", std::strerror(err)));
  }
  buf_.resize(old + static_cast<std::size_t>(n));
  if (n == 0) {
    eof_ = true;
    return false;
  }
  from_disk_ += static_cast<std::uint64_t>(n);
  if (from_disk_ > info_->max_bytes)
    throw InputError(path_, key_,
                     fmt::format("grew past the maximum of {} for {} while being read (docs/limits.md)",
                                 bytes_text(info_->max_bytes), info_->what));
  return true;
}

std::size_t InputFile::read(char* out, std::size_t n) {
  if (pos_ == buf_.size() && !fill()) return 0;
  const std::size_t k = std::min(n, buf_.size() - pos_);
  std::memcpy(out, buf_.data() + pos_, k);
  pos_ += k;
  read_ += k;
  return k;
}

bool InputFile::getline(std::string& line) {
  line.clear();
  std::size_t scanned = pos_;
  for (;;) {
    const auto nl = buf_.find('\n', scanned);
    if (nl != std::string::npos) {
      line.assign(buf_, pos_, nl - pos_);
      read_ += nl + 1 - pos_;
      pos_ = nl + 1;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return true;
    }
    const std::size_t have = buf_.size() - pos_;
    if (!fill()) break;
    scanned = pos_ + have;  // fill() moved the unread bytes to the front
  }
  if (pos_ == buf_.size()) return false;
  line.assign(buf_, pos_, std::string::npos);
  read_ += buf_.size() - pos_;
  pos_ = buf_.size();
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return true;
}

std::string InputFile::read_all() {
  std::string out = buf_.substr(pos_);
  read_ += out.size();
  buf_.clear();
  pos_ = 0;
  out.reserve(static_cast<std::size_t>(size_));
  while (fill()) {
    out += buf_;
    read_ += buf_.size();
    buf_.clear();
  }
  return out;
}

std::string read_input_file(const std::string& path, InputKind kind, const std::string& key) {
  return InputFile(path, kind, key).read_all();
}

}  // namespace meshplan
