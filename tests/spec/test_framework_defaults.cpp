// Framework defaults by release (spec/framework_defaults.hpp), against the source lines they cite.
#include <doctest/doctest.h>

#include "spec/framework_defaults.hpp"

using namespace meshplan;

TEST_CASE("framework releases parse as dates") {
  CHECK(parse_framework_release("2024-12-26")->yyyymmdd == 20241226);
  CHECK(parse_framework_release("20250407")->yyyymmdd == 20250407);
  for (const char* bad : {"", "2024", "2024-13-01", "2024-12-32", "v0.2.0", "2024/12/26", "1999-01-01", "2024-1-260"})
    CHECK_MESSAGE(!parse_framework_release(bad), bad);
}

TEST_CASE("torchtitan's pipeline micro-batch default changed on 2025-04-07 and 2026-08-20") {
  CHECK(torchtitan_pp_microbatch_default({}).rule == PpMicrobatchRule::pp_degree);
  CHECK(torchtitan_pp_microbatch_default({20241226}).rule == PpMicrobatchRule::pp_degree);
  CHECK(torchtitan_pp_microbatch_default({20250406}).rule == PpMicrobatchRule::pp_degree);
  CHECK(torchtitan_pp_microbatch_default({20250407}).rule == PpMicrobatchRule::size_one);
  CHECK(torchtitan_pp_microbatch_default({20260819}).rule == PpMicrobatchRule::size_one);
  CHECK(torchtitan_pp_microbatch_default({20260820}).rule == PpMicrobatchRule::one_per_step);
  for (const FrameworkDefault& d : framework_defaults()) {
    CHECK_FALSE(d.source.empty());
    CHECK_FALSE(d.value.empty());
  }
}

TEST_CASE("a local batch split into pipeline micro-batches, by hand") {
  // The published shape: pp 8, 32 sequences per rank. 2024: 8 micro-batches of 4, all in one run.
  auto a = split_pp_batch(PpMicrobatchRule::pp_degree, 32, 8, 8192);
  REQUIRE(a);
  CHECK(a->micro_batch == 4);
  CHECK(a->per_run == 8);
  CHECK(a->grad_accum == 8);
  // 2025: 32 micro-batches of one sequence in one run.
  auto b = split_pp_batch(PpMicrobatchRule::size_one, 32, 8, 8192);
  CHECK(b->micro_batch == 1);
  CHECK(b->per_run == 32);
  // 2026-08: 16384 tokens per micro-batch = 2 sequences of 8192, one micro-batch per run, 16 runs.
  auto c = split_pp_batch(PpMicrobatchRule::one_per_step, 32, 8, 8192);
  CHECK(c->micro_batch == 2);
  CHECK(c->per_run == 1);
  CHECK(c->grad_accum == 16);
  // Sequences longer than the token budget still take one sequence per micro-batch.
  CHECK(split_pp_batch(PpMicrobatchRule::one_per_step, 4, 2, 32768)->micro_batch == 1);
  std::string why;
  CHECK_FALSE(split_pp_batch(PpMicrobatchRule::pp_degree, 12, 8, 2048, &why));
  CHECK(why.find("12 sequences") != std::string::npos);
}

TEST_CASE("Megatron's vocabulary padding, by hand") {
  CHECK(megatron_padded_vocab(50257) == 50304);              // GPT-2 BPE: 393 x 128
  CHECK(megatron_padded_vocab(50257, 128, 8) == 51200);      // 50 x 1024
  CHECK(megatron_padded_vocab(128256, 128, 8) == 129024);    // 126 x 1024
  CHECK(megatron_padded_vocab(128256, 128, 1) == 128256);    // already 1002 x 128
  CHECK(megatron_padded_vocab(32000, 128, 4) == 32256);      // 63 x 512
  CHECK(megatron_padded_vocab(32000, 1, 1) == 32000);
}
