#pragma once
// What a framework does with a setting its config or a published run leaves unstated, by
// release. One row per (framework, setting, release range), each with the source file and commit
// its value was read from; docs/importers.md ("Defaults by release") lists the same rows. Where a
// framework has a default, an unstated setting resolves to it, never to what would suit the
// simulation (the largest micro-batch that fits is the one choice a pipelined run never makes).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshplan {

// A release named by the date of its commit, as yyyymmdd; 0 when not stated.
struct FrameworkRelease {
  int yyyymmdd = 0;
  bool stated() const { return yyyymmdd > 0; }
};

// "2024-12-26" or "20241226" -> the release; nullopt for anything else (or a date before 2000).
std::optional<FrameworkRelease> parse_framework_release(std::string_view text);

// How torchtitan splits a rank's local batch into pipeline micro-batches.
enum class PpMicrobatchRule {
  pp_degree,     // experimental.pipeline_parallel_microbatches = None -> the pipeline degree
  size_one,      // parallelism.pipeline_parallel_microbatch_size = 1 -> local batch micro-batches of 1
  one_per_step,  // parallelism.num_pp_microbatches = 1 per gradient-accumulation step
};

struct FrameworkDefault {
  std::string_view framework;
  std::string_view setting;
  int from_yyyymmdd = 0;   // first release with this default (0: the first that has the setting)
  int until_yyyymmdd = 0;  // first release without it (0: still the default)
  std::string_view value;  // in words
  std::string_view source; // file @ commit it was read from
};

// Every row, in the order docs/importers.md prints them.
const std::vector<FrameworkDefault>& framework_defaults();

// torchtitan's pipeline micro-batch default at `release`. A release not stated takes the first
// release that shipped pipeline parallelism (late 2024), the code its published pipeline results
// were measured on; the row says which was taken.
struct PpMicrobatchDefault {
  PpMicrobatchRule rule = PpMicrobatchRule::pp_degree;
  const FrameworkDefault* row = nullptr;
};
PpMicrobatchDefault torchtitan_pp_microbatch_default(FrameworkRelease release);

// One rank's batch under a pipeline micro-batch rule: micro-batches of `micro_batch` sequences,
// `per_run` of them through each pipeline schedule run, `grad_accum` in all per step.
struct PpBatchSplit {
  std::int64_t micro_batch = 1;
  std::int64_t per_run = 1;
  std::int64_t grad_accum = 1;
};
// nullopt with `why` set when torchtitan would refuse the split (a local batch the rule does not
// divide). `tokens_per_microbatch`: the one_per_step era's batch in tokens (its default 16384).
std::optional<PpBatchSplit> split_pp_batch(PpMicrobatchRule rule, std::int64_t local_batch, int pp,
                                           std::int64_t seq_len, std::string* why = nullptr,
                                           std::int64_t tokens_per_microbatch = 16384);

// Megatron-LM pads the vocabulary so every tensor-parallel shard of the embedding and the head is
// equal: ceil(V / (divisible_by x tp)) x (divisible_by x tp), --make-vocab-size-divisible-by
// defaulting to 128 (megatron/training/tokenizer vocab_size_with_padding). The one rule for it.
std::int64_t megatron_padded_vocab(std::int64_t vocab, std::int64_t divisible_by = 128, int tp = 1);

}  // namespace meshplan
