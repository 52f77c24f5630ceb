#pragma once
// The largest count meshplan accepts for every number a user can type (docs/limits.md).
// Each bound is far above any real training run and far below where a product of counts could
// overflow 64 bits or an allocation sized by it could exhaust memory; every loader and flag checks
// its counts against these before anything is sized by them.
#include <cstdint>
#include <optional>
#include <string>

namespace meshplan::limits {

inline constexpr std::int64_t kMaxGpus = std::int64_t{1} << 20;          // 1,048,576 GPUs
inline constexpr std::int64_t kMaxLayers = 4096;                         // transformer blocks
inline constexpr std::int64_t kMaxWidth = std::int64_t{1} << 20;         // d_model, ffn, expert_ffn
inline constexpr std::int64_t kMaxHeadDim = 65536;
inline constexpr std::int64_t kMaxHeads = 65536;                         // n_heads, n_kv_heads
inline constexpr std::int64_t kMaxVocab = std::int64_t{1} << 24;         // 16,777,216 tokens
inline constexpr std::int64_t kMaxSeqLen = std::int64_t{1} << 24;        // 16,777,216 tokens
inline constexpr std::int64_t kMaxExperts = 65536;
inline constexpr std::int64_t kMaxBatch = std::int64_t{1} << 30;         // sequences per step
inline constexpr std::int64_t kMaxTokensPerStep = std::int64_t{1} << 40; // global batch x seq_len
inline constexpr std::int64_t kMaxGradAccum = std::int64_t{1} << 20;     // micro-batches per step
inline constexpr std::int64_t kMaxGpusPerNode = 1024;
// Layers x micro-batches of one simulated step: the step program holds ~28 ops per pair, so this
// bounds its size (~3.7M ops) before it is built.
inline constexpr std::int64_t kMaxLayerMicrobatches = std::int64_t{1} << 17;
inline constexpr double kMaxParams = 1e15;  // a model's parameters (a quadrillion)
inline constexpr double kMaxTrainingTokens = 1e18;
inline constexpr double kMinDeadlineDays = 1.0 / 1440;  // one minute
inline constexpr double kMaxDeadlineDays = 36525;       // a century
inline constexpr double kMaxSizeBytes = 1125899906842624.0;  // 2^50 B = 1 PiB (collective sizes)
inline constexpr std::int64_t kMaxKernelDim = std::int64_t{1} << 24;  // kernel --gemm / --attention
// `simulate --full` instantiates every distinct rank (one per class of ranks that run alike, in
// every stage: sim/rank_classes.hpp) with its own links and streams: the step's ops times the
// distinct ranks per stage are its engine tasks, about 220 bytes and 1 us each (405B on 16,384
// H100 with 244 distinct ranks per stage: 33.6M tasks, 7.5 GB, 42 s), so this many keep a run
// under 2 GiB and about 10 s.
inline constexpr std::int64_t kMaxFullSimTasks = 8'000'000;
// A per-GPU speed factor (--straggler SPEED, --gpu-speeds): a hundredth of the fleet's speed to a
// hundred times it. Past that it is no longer a straggler but a typo, and 1e-300 made a step of
// 300 digits.
inline constexpr double kMinSpeedFactor = 0.01;
inline constexpr double kMaxSpeedFactor = 100;

// v when min <= v <= max; otherwise InputError(file, key, "... must be between MIN and MAX (the
// maximum for WHAT, docs/limits.md)").
std::int64_t check_count(const std::string& file, const std::string& key, std::int64_t v, std::int64_t min,
                         std::int64_t max, const char* what);
// check_count for a field stored as int (every bound above fits in one).
int check_int(const std::string& file, const std::string& key, std::int64_t v, std::int64_t min, std::int64_t max,
              const char* what);

// a * b, or nullopt when it overflows 64 bits (or either is negative).
std::optional<std::int64_t> mul(std::int64_t a, std::int64_t b);
std::optional<std::int64_t> mul3(std::int64_t a, std::int64_t b, std::int64_t c);

}  // namespace meshplan::limits
