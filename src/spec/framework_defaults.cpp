#include "spec/framework_defaults.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <iterator>

namespace meshplan {

std::optional<FrameworkRelease> parse_framework_release(std::string_view text) {
  std::string digits;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (std::isdigit(static_cast<unsigned char>(c))) digits += c;
    else if (c != '-' || (i != 4 && i != 7)) return std::nullopt;
  }
  if (digits.size() != 8 || (text.size() != 8 && text.size() != 10)) return std::nullopt;
  const int v = std::stoi(digits);
  const int month = v / 100 % 100, day = v % 100;
  if (v < 20000101 || month < 1 || month > 12 || day < 1 || day > 31) return std::nullopt;
  return FrameworkRelease{v};
}

const std::vector<FrameworkDefault>& framework_defaults() {
  static const std::vector<FrameworkDefault> rows = {
      {"torchtitan", "pipeline micro-batches", 0, 20250407,
       "experimental.pipeline_parallel_microbatches = None: the pipeline degree, splitting the local batch",
       "torchtitan config_manager.py and parallelisms/pipelining_utils.py build_pipeline_schedule @ 9dec370"},
      {"torchtitan", "pipeline micro-batches", 20250407, 20260820,
       "parallelism.pipeline_parallel_microbatch_size = 1: local_batch_size micro-batches of one sequence",
       "torchtitan config/job_config.py and distributed/pipeline_parallel.py @ 238fa9953e4a (from 5e2033c75)"},
      {"torchtitan", "pipeline micro-batches", 20260820, 0,
       "parallelism.num_pp_microbatches = 1 per gradient-accumulation step, micro-batches of "
       "training.num_tokens_per_microbatch_per_dp_rank = 16384 tokens",
       "torchtitan config/configs.py @ b5bcd76c6 (from 73aed7f6c, 'fold batch dim')"},
  };
  return rows;
}

PpMicrobatchDefault torchtitan_pp_microbatch_default(FrameworkRelease release) {
  const auto& rows = framework_defaults();
  static const PpMicrobatchRule rules[] = {PpMicrobatchRule::pp_degree, PpMicrobatchRule::size_one,
                                           PpMicrobatchRule::one_per_step};
  // Unstated: the first release with pipeline parallelism.
  const int date = release.stated() ? release.yyyymmdd : 0;
  // rows() lists torchtitan's micro-batch releases first, in the order of `rules`.
  for (std::size_t i = 0; i < std::size(rules); ++i) {
    const FrameworkDefault& r = rows[i];
    if (date >= r.from_yyyymmdd && (r.until_yyyymmdd == 0 || date < r.until_yyyymmdd)) return {rules[i], &r};
  }
  return {rules[0], &rows[0]};
}

std::optional<PpBatchSplit> split_pp_batch(PpMicrobatchRule rule, std::int64_t local_batch, int pp,
                                           std::int64_t seq_len, std::string* why,
                                           std::int64_t tokens_per_microbatch) {
  auto refuse = [&](std::string reason) -> std::optional<PpBatchSplit> {
    if (why != nullptr) *why = std::move(reason);
    return std::nullopt;
  };
  if (local_batch <= 0 || pp <= 0 || seq_len <= 0) return refuse("the batch, the pipeline degree and the sequence must be positive");
  PpBatchSplit s;
  switch (rule) {
    case PpMicrobatchRule::pp_degree:
      // The schedule chunks the local batch into pp micro-batches along the batch dimension.
      if (local_batch % pp != 0)
        return refuse(fmt::format("the local batch of {} sequences does not split into pp {} micro-batches", local_batch, pp));
      s.micro_batch = local_batch / pp;
      s.per_run = pp;
      s.grad_accum = pp;
      return s;
    case PpMicrobatchRule::size_one:
      s.micro_batch = 1;
      s.per_run = local_batch;
      s.grad_accum = local_batch;
      return s;
    case PpMicrobatchRule::one_per_step:
      // The batch is in tokens: micro-batches of max(1, tokens / seq) sequences, one per run.
      s.micro_batch = std::clamp<std::int64_t>(tokens_per_microbatch / seq_len, 1, local_batch);
      if (local_batch % s.micro_batch != 0)
        return refuse(fmt::format("the local batch of {} sequences does not divide into micro-batches of {}",
                                  local_batch, s.micro_batch));
      s.per_run = 1;
      s.grad_accum = local_batch / s.micro_batch;
      return s;
  }
  return refuse("unknown rule");
}

std::int64_t megatron_padded_vocab(std::int64_t vocab, std::int64_t divisible_by, int tp) {
  const std::int64_t unit = std::max<std::int64_t>(1, divisible_by) * std::max(1, tp);
  return (vocab + unit - 1) / unit * unit;
}

}  // namespace meshplan
