// meshplan validate: CSV reading, row mapping, every published row handled, summary statistics.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "validate/validation.hpp"
#include "spec/cluster_loader.hpp"
#include "validate/cluster_search.hpp"
#include "spec/error.hpp"
#include "spec/model_loader.hpp"
#include "spec/units.hpp"
#include "validate/validation_row.hpp"
#include "workload/memory_estimate.hpp"
#include "test_paths.hpp"
#include "validation_csv_header.hpp"

using namespace meshplan;

namespace {

std::filesystem::path dev_csv() { return test::shared_root() / "validation" / "dev.csv"; }
std::filesystem::path memory_csv() { return test::shared_root() / "validation" / "memory.csv"; }

// The index of row `id` in `t`.
std::size_t row_index(const CsvTable& t, const std::string& id) {
  for (std::size_t i = 0; i < t.rows.size(); ++i)
    if (CsvRow(t, i).get("id") == id) return i;
  FAIL("row not found: " << id);
  return 0;
}

const char* const kHeader = test::kValidationCsvHeader;

// A small Llama-like row on 8 GPUs with every vocabulary slot filled; `edit` replaces fields.
std::string synthetic_row(const std::string& id, const std::string& fields) {
  return id + "," + fields + "\n";
}
const char* kLlamaFields =
    "test,tiny,,4,1024,8,8,2816,32000,2048,swiglu,0,rope,h100-sxm-80gb,8,,1,8,1,1,1,1,1,0,zero3,2,16,1,full,,bf16,"
    "fp32,none,0,torchtitan-fsdp2,0,0,10000,reported,,,,\"notes, with \"\"quotes\"\"\"";

}  // namespace

TEST_CASE("CSV: RFC 4180 quoting, embedded commas, quotes and newlines") {
  const auto r = parse_csv("a,b,c\n1,\"x,y\",\"say \"\"hi\"\"\"\n2,\"two\nlines\",\n");
  REQUIRE(r.size() == 3);
  CHECK(r[0] == std::vector<std::string>{"a", "b", "c"});
  CHECK(r[1] == std::vector<std::string>{"1", "x,y", "say \"hi\""});
  CHECK(r[2] == std::vector<std::string>{"2", "two\nlines", ""});
}

TEST_CASE("CSV: CRLF, missing final newline, empty fields and an empty quoted field") {
  const auto r = parse_csv("a,b\r\n,\"\"\r\nx,y");
  REQUIRE(r.size() == 3);
  CHECK(r[1] == std::vector<std::string>{"", ""});
  CHECK(r[2] == std::vector<std::string>{"x", "y"});
  CHECK(parse_csv("").empty());
  CHECK(parse_csv("\n").empty());
  // A lone CR inside a field is data, and a quoted CRLF is kept verbatim.
  const auto q = parse_csv("\"a\r\nb\",c\n");
  REQUIRE(q.size() == 1);
  CHECK(q[0][0] == "a\r\nb");
}

TEST_CASE("CSV: malformed input is an InputError naming the line") {
  CHECK_THROWS_AS(parse_csv("a,\"unterminated\n"), InputError);
  CHECK_THROWS_AS(parse_csv("a,b\"c\n"), InputError);
  CHECK_THROWS_AS(parse_csv("\"a\"b,c\n"), InputError);
  try {
    parse_csv("x\ny\n\"z", "f.csv");
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK(e.key() == "line 3");
    CHECK(e.file() == "f.csv");
  }
  // Tables: field counts must match the header; header names must be unique.
  CHECK_THROWS_AS(parse_csv_table("a,b\n1\n"), InputError);
  CHECK_THROWS_AS(parse_csv_table("a,a\n1,2\n"), InputError);
  CHECK_THROWS_AS(parse_csv_table(""), InputError);
  const CsvTable t = parse_csv_table("\xEF\xBB\xBFid,v\n\"r1\",\"multi\nline\"\nr2,2\n");
  CHECK(t.header[0] == "id");
  REQUIRE(t.rows.size() == 2);
  CHECK(t.row_lines[1] == 4);
  CHECK(CsvRow(t, 0).get("v") == "multi\nline");
  CHECK(CsvRow(t, 0).get("absent").empty());
}

TEST_CASE("run_key pairs -alloc and -resv rows") {
  CHECK(run_key("tt165-x-alloc") == "tt165-x");
  CHECK(run_key("tt165-x-resv") == "tt165-x");
  CHECK(run_key("dlrover-8gpu") == "dlrover-8gpu");
  CHECK(run_key("-resv") == "-resv");
}

TEST_CASE("synthetic rows: defaults, vocabulary values and skips") {
  const CsvTable t = parse_csv_table(std::string(kHeader) + synthetic_row("ok", kLlamaFields));
  const ValidationCase vc = map_validation_row(t, 0);
  REQUIRE_MESSAGE(vc.skipped.empty(), vc.skipped);
  CHECK(vc.run.plan.runtime == Runtime::torchtitan_fsdp2);
  CHECK(vc.run.model.norm == NormKind::rmsnorm);
  CHECK_FALSE(vc.run.model.linear_bias);
  CHECK(vc.run.job.grad_accum == 1);
  CHECK(vc.measured.tokens_per_s_per_gpu == doctest::Approx(10000));

  // Every fp8 recipe, optimizer-less dev rows, unknown sharding and every gpu name map or skip.
  for (const char* gpu : {"a100-40gb", "a100-80gb", "a100-unknown", "h100-sxm-80gb", "h100-sxm-96gb", "h200-141gb",
                          "b200", "gb200", "gb300", ""}) {
    std::string f = kLlamaFields;
    f.replace(f.find("h100-sxm-80gb"), 13, gpu);
    const ValidationCase g = map_validation_row(parse_csv_table(std::string(kHeader) + synthetic_row("g", f)), 0);
    CHECK_MESSAGE(g.skipped.empty(), gpu << ": " << g.skipped);
    CHECK(g.cluster == (std::string(gpu).empty() ? std::string("h100-sxm-80gb") : std::string(gpu)));
  }
  for (const char* fp8 : {"te-delayed", "te-current", "mxfp8", "nvfp4", "torchao-tensorwise", "torchao-rowwise"}) {
    std::string f = kLlamaFields;
    f.replace(f.find(",none,"), 6, std::string(",") + fp8 + ",");
    const ValidationCase g = map_validation_row(parse_csv_table(std::string(kHeader) + synthetic_row("f", f)), 0);
    CHECK(g.skipped.empty());
    CHECK(g.throughput_not_modeled.empty());  // FP8/FP4 linears are priced (workload/step_program)
    CHECK(g.run.plan.fp8_all_gather == (std::string(fp8) == "torchao-tensorwise"));
  }
  for (const char* fw : {"composer-fsdp1", "megatron", "nemo", "megatron-deepspeed", "fairscale", "other"}) {
    std::string f = kLlamaFields;
    f.replace(f.find("torchtitan-fsdp2"), 16, fw);
    // Megatron-family runs do not shard parameters: write the same run as DDP.
    if (std::string(fw).find("megatron") != std::string::npos || std::string(fw) == "nemo") {
      const std::string from = ",1,8,1,1,1,1,1,0,zero3,";
      f.replace(f.find(from), from.size(), ",8,1,1,1,1,1,1,0,zero1,");
    }
    const ValidationCase g = map_validation_row(parse_csv_table(std::string(kHeader) + synthetic_row("w", f)), 0);
    CHECK_MESSAGE(g.skipped.empty(), fw << ": " << g.skipped);
  }

  // Out-of-vocabulary values, non-integers and inconsistent layouts are skips with a reason.
  auto skip_reason = [](std::string from, const std::string& to) {
    std::string f = kLlamaFields;
    f.replace(f.find(from), from.size(), to);
    return map_validation_row(parse_csv_table(std::string(kHeader) + synthetic_row("s", f)), 0).skipped;
  };
  CHECK(skip_reason("swiglu", "geglu2").find("mlp") != std::string::npos);
  CHECK(skip_reason(",1024,", ",1k,").find("d_model") != std::string::npos);
  CHECK(skip_reason("h100-sxm-80gb", "tpu-v5").find("gpu") != std::string::npos);
  CHECK(skip_reason(",zero3,", ",zero4,").find("sharding") != std::string::npos);
  CHECK(skip_reason(",2,16,1,", ",2,16,3,").find("global_batch") != std::string::npos);
  CHECK_FALSE(skip_reason(",1,8,1,1,", ",1,4,1,1,").empty());  // world 4 != n_gpus 8
  CHECK(skip_reason(",0,torchtitan", ",1,torchtitan").find("cpu_offload") != std::string::npos);
  // An unknown activation_ckpt is left to the runtime: resolved (and written down) once the
  // device is known (workload/runtime_choices), provisionally none.
  std::string f = kLlamaFields;
  f.replace(f.find(",full,"), 6, ",unknown,");
  const ValidationCase u = map_validation_row(parse_csv_table(std::string(kHeader) + synthetic_row("u", f)), 0);
  CHECK(u.skipped.empty());
  CHECK(u.run.plan.ac == AcMode::none);
  CHECK(u.run.left_to_runtime.recompute);
  const ValidationReport ur = run_validation(parse_csv_table(std::string(kHeader) + synthetic_row("u", f)), {});
  REQUIRE(ur.rows.size() == 1);
  const auto& ua = ur.rows[0].assumptions;
  CHECK(std::any_of(ua.begin(), ua.end(),
                    [](const std::string& a) { return a.find("activation recompute not stated") != std::string::npos; }));
  // The row's MFU in meshplan's convention, simulated and at the measured throughput: the two
  // differ by the row's own error, and the JSON names what it was simulated as.
  const ValidationRowResult& row = ur.rows[0];
  REQUIRE(row.predicted_mfu);
  REQUIRE(row.measured_mfu);
  REQUIRE(row.error_pct);
  CHECK(*row.predicted_mfu > 0);
  CHECK(*row.predicted_mfu / *row.measured_mfu == doctest::Approx(1 + *row.error_pct / 100).epsilon(1e-12));
  const nlohmann::json j = validation_row_json(row);
  CHECK(j["runtime"] == "torchtitan-fsdp2");
  CHECK(j["gpu_arch"] == "sm90");
  CHECK(j["fp8"] == "none");
  CHECK(j["measured_mfu"].get<double>() == *row.measured_mfu);
}

TEST_CASE("default vocab: Megatron pads the GPT-2 BPE to 128 x tp; no default for unknown families") {
  ModelSpec m;
  m.pos_emb = PosEmb::learned;
  m.mlp = MlpKind::gelu;
  std::string why;
  CHECK(default_vocab("nemo-24.07", m, 1, why) == 50304);
  CHECK(default_vocab("nemo-24.07", m, 2, why) == 50432);
  CHECK(default_vocab("nemo-24.07", m, 8, why) == 51200);
  CHECK(default_vocab("opt-175b", m, 8, why) == 50272);
  m.pos_emb = PosEmb::rope;
  m.mlp = MlpKind::relu2;
  CHECK(default_vocab("nemo-24.07", m, 8, why) == 256000);
  m.mlp = MlpKind::swiglu;
  CHECK_FALSE(default_vocab("x", m, 1, why).has_value());
}

TEST_CASE("summary statistics on a hand-made set") {
  std::vector<ValidationRowResult> rows(6);
  const double errs[] = {10, -20, 5, -5, 40};
  for (int i = 0; i < 5; ++i) {
    rows[i].id = "r" + std::to_string(i);
    rows[i].run = rows[i].id;
    rows[i].error_pct = errs[i];
  }
  rows[5].id = "skipped";
  rows[5].run = "skipped";
  rows[5].skipped = "reason";
  // Memory: one run with two rows (+10, -30) and one single-row run (+5).
  rows[0].memory_error_pct = 10;
  rows[0].run = "pair";
  rows[1].memory_error_pct = -30;
  rows[1].run = "pair";
  rows[2].memory_error_pct = 5;
  std::vector<const ValidationRowResult*> ptrs;
  for (const auto& r : rows) ptrs.push_back(&r);
  const ValidationSummary s = summarize(ptrs, "g");
  CHECK(s.rows == 6);
  CHECK(s.n == 5);
  CHECK(s.skipped == 1);
  CHECK(*s.mape_pct == doctest::Approx(16.0));           // (10+20+5+5+40)/5
  CHECK(*s.median_ape_pct == doctest::Approx(10.0));     // 5 5 10 20 40
  CHECK(*s.p90_ape_pct == doctest::Approx(32.0));        // 20 + 0.6 x (40 - 20)
  CHECK(*s.max_ape_pct == doctest::Approx(40.0));
  CHECK(*s.mean_error_pct == doctest::Approx(6.0));
  CHECK(s.memory_rows == 3);
  CHECK(s.memory_runs == 2);
  CHECK(*s.memory_mape_pct == doctest::Approx((20.0 + 5.0) / 2));  // pair's mean APE 20, single 5
  CHECK(*s.memory_row_mape_pct == doctest::Approx(15.0));
  CHECK(*s.memory_min_error_pct == doctest::Approx(-30.0));
  CHECK(percentile({3.0}, 0.9) == doctest::Approx(3.0));
  CHECK(percentile({1, 2, 3, 4}, 0.5) == doctest::Approx(2.5));
}

TEST_CASE("real rows mapped field by field" * SKIP_UNLESS_SHARED("validation")) {
  const CsvTable dev = read_csv_table(dev_csv().string());
  REQUIRE(dev.header.size() == 44);

  SUBCASE("llm-foundry MPT-70B on 64 A100-80GB") {
    const ValidationCase vc = map_validation_row(dev, row_index(dev, "foundry-a100_80-mpt70b-s2048-g64-mb8-ga4"));
    REQUIRE_MESSAGE(vc.skipped.empty(), vc.skipped);
    const ModelSpec& m = vc.run.model;
    CHECK(m.n_layers == 80);
    CHECK(m.d_model == 8192);
    CHECK(m.n_heads == 64);
    CHECK(m.n_kv_heads == 64);
    CHECK(m.head_dim == 128);
    CHECK(m.ffn_hidden == 32768);
    CHECK(m.vocab == 50368);
    CHECK(m.mlp == MlpKind::gelu);
    CHECK(m.tied_embeddings);
    CHECK(m.pos_emb == PosEmb::learned);
    CHECK(m.max_seq_len == 2048);
    CHECK(m.norm == NormKind::layernorm);
    CHECK(m.linear_bias);
    CHECK(m.n_params_published == 64862437376);
    const Plan& p = vc.run.plan;
    CHECK(p.runtime == Runtime::composer_fsdp1);
    CHECK(p.mesh.dp_shard == 64);
    CHECK(p.mesh.dp_replicate == 1);
    CHECK(p.mesh.tp == 1);
    CHECK(p.sharding == Sharding::zero3);
    CHECK(p.reshard_after_forward);
    CHECK(p.root_unsharded);
    CHECK(p.ac == AcMode::full);
    CHECK(p.param_dtype == Dtype::bf16);
    CHECK(p.reduce_dtype == Dtype::bf16);
    CHECK(p.fp8 == Fp8Recipe::none);
    CHECK(p.flash_attention);
    const Job& j = vc.run.job;
    CHECK(j.seq_len == 2048);
    CHECK(j.micro_batch == 8);
    CHECK(j.global_batch == 2048);
    CHECK(j.grad_accum == 4);
    CHECK(vc.run.n_gpus == 64);
    CHECK(vc.cluster == "a100-80gb");
    CHECK_FALSE(vc.gpus_per_node.has_value());
    CHECK_FALSE(vc.network.has_value());  // "1600 Gbps node-node": the profile's 8 x 200 Gb/s
    CHECK(vc.measured.tokens_per_s_per_gpu == doctest::Approx(410));
    CHECK(vc.measured.mfu_pct == doctest::Approx(53.33));
    CHECK(vc.throughput_not_modeled.empty());
  }
  SUBCASE("BLOOM-176B on Jean Zay: the network its source documents, 4 Omni-Path links per node") {
    const ValidationCase vc = map_validation_row(dev, row_index(dev, "bloom176b-gbs2048-mbs2"));
    REQUIRE_MESSAGE(vc.skipped.empty(), vc.skipped);
    REQUIRE(vc.network.has_value());
    CHECK(vc.network->nics_per_node == 4);
    CHECK(vc.network->nic_gbit_per_s == 100);
    CHECK(std::any_of(vc.assumptions.begin(), vc.assumptions.end(),
                      [](const std::string& a) { return a.find("4 NICs of 100 Gb/s") != std::string::npos; }));
    CHECK_FALSE(vc.run.plan.flash_attention);
    CHECK_FALSE(vc.run.plan.dropout);  // BLOOM documents training without dropout
    CHECK(std::find(vc.assumptions.begin(), vc.assumptions.end(), "dropout off, as the source documents") !=
          vc.assumptions.end());
  }
  SUBCASE("Megatron-DeepSpeed without a stated dropout: its default, 0.1 hidden and attention dropout") {
    const std::filesystem::path vtrain = test::shared_root() / "validation" / "dev-vtrain.csv";
    if (!std::filesystem::exists(vtrain)) return;
    const CsvTable t = read_csv_table(vtrain.string());
    const ValidationCase vc = map_validation_row(t, row_index(t, "vtrain-single-0002"));
    REQUIRE_MESSAGE(vc.skipped.empty(), vc.skipped);
    CHECK(vc.run.plan.deepspeed_engine);
    CHECK(vc.run.plan.dropout);
    CHECK(std::any_of(vc.assumptions.begin(), vc.assumptions.end(), [](const std::string& a) {
      return a.find("Megatron-DeepSpeed's default") != std::string::npos;
    }));
  }
  SUBCASE("NeMo GPT-3 175B: vocab default, interleaved PP, fp8 linears compared on throughput") {
    const ValidationCase vc = map_validation_row(dev, row_index(dev, "nemo2407-gpt3-175b-128g"));
    REQUIRE_MESSAGE(vc.skipped.empty(), vc.skipped);
    CHECK(vc.run.model.vocab == 50688);  // 50257 padded to 128 x tp 4
    CHECK(vc.run.plan.runtime == Runtime::megatron);
    CHECK(vc.run.plan.mesh.pp == 8);
    CHECK(vc.run.plan.mesh.vpp == 6);
    CHECK(vc.run.plan.schedule == PipelineSchedule::interleaved_1f1b);
    CHECK(vc.run.plan.sharding == Sharding::zero1);
    CHECK(vc.run.plan.sequence_parallel);  // empty with tp 4 under NeMo
    CHECK(vc.run.plan.fp8 == Fp8Recipe::te_delayed);
    CHECK(vc.run.plan.reduce_dtype == Dtype::fp32);
    CHECK(vc.run.plan.ac == AcMode::none);
    CHECK(vc.run.job.grad_accum == 64);
    CHECK(vc.gpus_per_node == 8);
    CHECK(vc.throughput_not_modeled.empty());
  }
  SUBCASE("Korthikanti selective recompute + SP, empty param_dtype") {
    const ValidationCase vc = map_validation_row(dev, row_index(dev, "kor22-gpt175b-selective-sp"));
    REQUIRE_MESSAGE(vc.skipped.empty(), vc.skipped);
    CHECK(vc.run.plan.ac == AcMode::selective_attn);
    CHECK(vc.run.plan.sequence_parallel);
    CHECK(vc.run.plan.param_dtype == Dtype::bf16);
    CHECK_FALSE(vc.run.plan.flash_attention);
    CHECK(vc.run.plan.dropout);
    CHECK(vc.run.plan.mesh.tp == 8);
  }
  SUBCASE("Megatron-LM H100: micro-batch unknown, compared on TFLOP/s") {
    const ValidationCase vc = map_validation_row(dev, row_index(dev, "mlm-h100-weak-gpt1.7b-48g"));
    REQUIRE_MESSAGE(vc.skipped.empty(), vc.skipped);
    CHECK(vc.run.job.micro_batch == 1);
    CHECK(vc.run.job.grad_accum == 4);
    CHECK(vc.run.model.vocab == 131072);
    const auto conv = source_flop_convention(vc, false);
    REQUIRE(conv.has_value());
    CHECK(conv->metric == "tflops_per_gpu");
    // 72 l h^2 (1 + s/6h + V/12lh) for this GELU MHA model.
    const double l = 24, h = 2048, s = 4096, v = 131072;
    CHECK(conv->flops_per_token == doctest::Approx(72 * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))));
  }
  SUBCASE("OPT-175B: batch unknown, skipped with a reason") {
    const ValidationCase vc = map_validation_row(dev, row_index(dev, "opt175b-992g"));
    CHECK_FALSE(vc.skipped.empty());
  }
  SUBCASE("memory.csv: torchtune bf16 state, 8-bit AdamW, activation offload, a100-unknown alias") {
    const CsvTable mem = read_csv_table(memory_csv().string());
    const ValidationCase vc = map_validation_row(mem, row_index(mem, "tune-readme-l32-3b-1gpu-adamw8bit"));
    REQUIRE_MESSAGE(vc.skipped.empty(), vc.skipped);
    CHECK(vc.run.plan.optimizer == Optimizer::adamw8bit);
    CHECK(vc.run.plan.state_dtype == Dtype::bf16);
    CHECK(vc.run.plan.act_offload);
    CHECK(vc.run.plan.sharding == Sharding::none);
    CHECK(vc.run.plan.compile);
    CHECK(vc.measured.memory_metric == MemoryMetric::allocated);
    const ValidationCase big = map_validation_row(mem, row_index(mem, "tune-readme-l31-70b-8xa100-fsdp-cpuoffload"));
    REQUIRE_MESSAGE(big.skipped.empty(), big.skipped);
    CHECK(big.cluster == "a100-unknown");
    CHECK(big.run.plan.param_offload);
    CHECK(big.measured.memory_metric == MemoryMetric::unknown);
    // An unnamed trainer's optimizer implementation resolves to fused AdamW, noted.
    CHECK(vc.run.plan.optimizer_impl == OptimizerImpl::framework);  // 8-bit AdamW: no foreach question
    const ValidationCase ac = map_validation_row(mem, row_index(mem, "tune-readme-l32-3b-1gpu-ac"));
    CHECK(ac.run.plan.optimizer_impl == OptimizerImpl::fused);
    bool noted = false;
    for (const auto& a : ac.assumptions) noted = noted || a.find("fused AdamW assumed") != std::string::npos;
    CHECK(noted);
    // An empty gpu column is the H100 sold under that name, unless the source documents its fleet:
    // torchao's benchmarks run on Meta's 500 W H100 96GB.
    const ValidationCase h = map_validation_row(mem, row_index(mem, "tao-fp8readme-llama3-8b-bf16"));
    CHECK(h.cluster == "h100-sxm-96gb");
    bool fleet_noted = false;
    for (const auto& a : h.assumptions) fleet_noted = fleet_noted || a.find("the fleet the source documents") != std::string::npos;
    CHECK(fleet_noted);
    const ValidationCase t = map_validation_row(mem, row_index(mem, "thunder940-l2-7b-fsdp2-zero2-eager"));
    CHECK(t.cluster == "h100-sxm-80gb");
    // The README's ZeRO-2 over 8 ranks (dp_replicate 8, dp_shard 1): a plan shards over dp_shard.
    CHECK(t.run.plan.sharding == Sharding::zero2);
    CHECK(t.run.plan.mesh.dp_shard == 8);
    CHECK(t.run.plan.mesh.dp_replicate == 1);
  }
}

TEST_CASE("every row of dev.csv and memory.csv simulates or is skipped with a reason" *
          SKIP_UNLESS_SHARED("validation")) {
  for (const auto& file : {dev_csv(), memory_csv()}) {
    ValidationReport rep;
    REQUIRE_NOTHROW(rep = run_validation_file(file.string(), ValidationOptions{}));
    const CsvTable t = read_csv_table(file.string());
    REQUIRE(rep.rows.size() == t.rows.size());
    for (const auto& r : rep.rows) {
      INFO(r.id);
      if (r.skipped.empty()) {
        CHECK(r.predicted_tokens_per_s_per_gpu.has_value());
        CHECK(*r.predicted_tokens_per_s_per_gpu > 0);
        CHECK((r.error_pct.has_value() || r.memory_error_pct.has_value()));
        if (r.measured_peak_gib) CHECK(r.predicted_peak_gib.has_value());
        // Every simulated row says what it needed of its GPU: a fraction of the device in (0, 2).
        REQUIRE(r.predicted_device_fraction.has_value());
        CHECK(*r.predicted_device_fraction > 0.0);
        CHECK(*r.predicted_device_fraction < 2.0);
      }
      if (r.error_pct) CHECK(std::isfinite(*r.error_pct));
      if (r.memory_error_pct) CHECK(std::isfinite(*r.memory_error_pct));
    }
    const auto j = validation_json(rep);
    for (const char* k : {"n", "skipped", "mape_pct", "median_ape_pct", "p90_ape_pct", "max_ape_pct", "memory_mape_pct",
                          "predicted_out_of_memory"})
      CHECK(j["summary"].contains(k));
    for (const char* k : {"id", "source", "predicted_tokens_per_s_per_gpu", "measured_tokens_per_s_per_gpu", "error_pct",
                          "predicted_peak_gib", "measured_peak_gib", "memory_error_pct", "skipped",
                          "predicted_device_fraction"})
      CHECK(j["rows"][0].contains(k));
  }
}

TEST_CASE("memory_metric unknown: compared with the point of [allocated, reserved] nearest the measurement" *
          SKIP_UNLESS_SHARED("validation/memory.csv")) {
  const CsvTable mem = read_csv_table(memory_csv().string());
  const ValidationRowRun rr = validation_row_run(mem, "tune-readme-l31-70b-8xa100-fsdp-cpuoffload", {});
  const ValidationCase& vc = rr.vc;
  const MemoryEstimate est = estimate_memory(vc.run.model, vc.run.plan, vc.run.job, rr.cluster);
  const StageMemory& st = est.stages.front();
  const double lo = st.allocated_peak_bytes / kGiB, hi = st.reserved_peak_bytes / kGiB;
  REQUIRE(lo < hi);
  ValidationOptions opt;
  opt.only_ids = {vc.id};
  const ValidationReport rep = run_validation_file(memory_csv().string(), opt);
  REQUIRE(rep.rows.size() == 1);
  const auto& r = rep.rows.front();
  REQUIRE(r.predicted_peak_gib.has_value());
  CHECK(*r.predicted_peak_gib == doctest::Approx(std::clamp(*vc.measured.peak_mem_gib, lo, hi)));
  CHECK(*r.predicted_peak_gib >= lo);
  CHECK(*r.predicted_peak_gib <= hi);
}

TEST_CASE("--cluster-dir profiles are found before the shipped ones") {
  const auto dir = std::filesystem::temp_directory_path() / "meshplan-test-cluster-dir";
  std::filesystem::create_directories(dir);
  const ClusterSpec shipped = load_cluster("a100-80gb");
  std::filesystem::copy_file(shipped.source_file, dir / "my-a100.toml", std::filesystem::copy_options::overwrite_existing);
  const ClusterSpec found = load_cluster_search("my-a100", {dir});
  CHECK(found.name == "my-a100");
  CHECK(found.gpu.hbm_bytes == shipped.gpu.hbm_bytes);
  CHECK(load_cluster_search("a100-40gb", {dir}).name == "a100-40gb");
  CHECK_THROWS_AS(load_cluster_search("no-such-profile", {dir}), InputError);
  std::filesystem::remove_all(dir);
}

TEST_CASE("collectives: nccl-tests-style CSV against the cost model") {
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  const CsvTable t = parse_csv_table(
      "op,gpus,gpus_per_node,size_bytes,time_us,busbw_gbps\n"
      "all_reduce,8,8,1073741824,,\n"
      "all_gather,16,8,268435456,5000,\n"
      "all_reduce,8,,8388608,,300\n"
      "bogus_op,8,8,1024,10,\n"
      "all_reduce,8,16,1024,10,\n");
  const CollectiveValidation v = run_collective_validation(t, c);
  REQUIRE(v.rows.size() == 5);
  CHECK_FALSE(v.rows[0].skipped.empty());  // no measurement
  CHECK(v.rows[1].compared == "time_us");
  REQUIRE(v.rows[1].error_pct.has_value());
  CHECK(*v.rows[1].error_pct == doctest::Approx((v.rows[1].predicted_time_us - 5000) / 5000 * 100));
  CHECK(v.rows[2].compared == "busbw_gbps");
  CHECK(v.rows[2].gpus_per_node == 8);
  CHECK_FALSE(v.rows[3].skipped.empty());
  CHECK_FALSE(v.rows[4].skipped.empty());
  CHECK(v.summary.n == 2);
  CHECK(v.summary.skipped == 3);
  CHECK(collective_validation_json(v)["summary"].contains("mape_pct"));
  CHECK_THROWS_AS(run_collective_validation(parse_csv_table("op,gpus\nall_reduce,8\n"), c), InputError);
}

TEST_CASE("Megatron's FLOP count for MoE rows: routed top-k, shared experts, dense layers, GQA or MLA, logits") {
  ValidationCase vc;
  vc.source = "megatron-moe-modelzoo";
  vc.framework = "megatron";
  vc.run.job.seq_len = 4096;
  vc.run.model = load_model("qwen3-235b-a22b");
  // MLP 12 x 94 x 4096 x 1536 x 8 x 3/2 = 85,161,148,416; GQA 12 x 94 x 4096^2 x (1 + 4/64 + 1/2) x 2
  // = 59,139,686,400; logits 6 x 4096 x 151936 = 3,733,979,136.
  auto conv = source_flop_convention(vc, false);
  REQUIRE(conv.has_value());
  CHECK(conv->metric == "tflops_per_gpu");
  CHECK(conv->flops_per_token == doctest::Approx(148'034'813'952.0).epsilon(1e-12));
  // The first dev-moe row: 1663.4 tokens/s/GPU printed as 245 TFLOP/s.
  CHECK(conv->flops_per_token * 1663.4 / 1e12 == doctest::Approx(245).epsilon(0.01));
  CHECK_FALSE(source_flop_convention(vc, true).has_value());  // no MFU convention

  // DeepSeek-V3 at 4096: MLP 12 x 7168 x 3/2 x 18432 x 61 (3 dense of 18432; 58 MoE of 8 + 1
  // experts of 2048, also 18432); MLA per layer q 1536 (7168 + 128 x 192 + 1) + kv 512 (7168 +
  // 128 x 256 + 1) + 7168 x 64 + 128 x 128 x 7168 + core 4096 x 128 x 192 / 2 + 4096 x 128 x 128 / 2
  // = 270,993,408, x 6 x 61; logits 6 x 7168 x 129280.
  vc.run.model = load_model("deepseek-v3");
  conv = source_flop_convention(vc, false);
  REQUIRE(conv.has_value());
  CHECK(conv->flops_per_token ==
        doctest::Approx(145'068'392'448.0 + 270'993'408.0 * 6 * 61 + 5'560'074'240.0).epsilon(1e-12));
}

TEST_CASE("torchtitan pipeline micro-batches: the framework's default by release, not the largest that fits") {
  // 16 layers on pp 8, one data-parallel rank, a local batch of 32 sequences, no micro_batch or
  // grad_accum published.
  std::string f = kLlamaFields;
  f.replace(f.find(",4,1024,"), 8, ",16,1024,");
  const std::string layout = ",1,8,1,1,1,1,1,0,zero3,2,16,1,";
  f.replace(f.find(layout), layout.size(), ",1,1,1,8,1,1,1,0,zero3,,32,,");
  auto mapped = [&](const std::string& release) {
    const std::string header = std::string(kHeader).insert(std::string(kHeader).size() - 1, ",framework_release");
    return map_validation_row(parse_csv_table(header + synthetic_row("pp", f + "," + release)), 0);
  };
  // Unstated: the first release with pipelines, micro-batches = the pipeline degree (8 of 4).
  const ValidationCase v = mapped("");
  REQUIRE_MESSAGE(v.skipped.empty(), v.skipped);
  CHECK(v.run.job.micro_batch == 4);
  CHECK(v.run.job.grad_accum == 8);
  CHECK(v.run.job.pp_microbatches == 8);
  CHECK_FALSE(v.run.left_to_runtime.micro_batch);
  CHECK(std::any_of(v.assumptions.begin(), v.assumptions.end(), [](const std::string& a) {
    return a.find("micro_batch not stated: 4 x 8 per pipeline run") != std::string::npos &&
           a.find("release not stated") != std::string::npos;
  }));
  // 2024-12-26 (9dec370): the same rule, stated.
  const ValidationCase a = mapped("2024-12-26");
  CHECK(a.run.job.micro_batch == 4);
  CHECK(a.run.job.pp_microbatches == 8);
  // 2025-06-01: pipeline_parallel_microbatch_size = 1, 32 micro-batches of one sequence.
  const ValidationCase b = mapped("2025-06-01");
  CHECK(b.run.job.micro_batch == 1);
  CHECK(b.run.job.grad_accum == 32);
  CHECK(b.run.job.pp_microbatches == 32);
  // From 2026-08-20: micro-batches of 16384 tokens (8 sequences of 2048), one per pipeline run.
  const ValidationCase c = mapped("2026-09-01");
  CHECK(c.run.job.micro_batch == 8);
  CHECK(c.run.job.grad_accum == 4);
  CHECK(c.run.job.pp_microbatches == 1);
  // A release that is not a date is a skip naming the column; a batch the rule does not split, too.
  CHECK(mapped("v0.2").skipped.find("framework_release") != std::string::npos);
  f.replace(f.find(",zero3,,32,,"), 12, ",zero3,,36,,");
  CHECK(mapped("").skipped.find("does not split into pp 8 micro-batches") != std::string::npos);
}

TEST_CASE("a Megatron row whose layers no split rule divides takes Megatron-Bridge's ceil(L / stages) layout") {
  // DeepSeek-V3's 61 layers on pp 16: neither 61 nor 63 divides by 16; the recipe's layout is
  // E+4t, 14 x 4t, 1t+L. On pp 32 ceil gives 2 x 31 = 62 > 61: the recipe's H100 shape then, 1
  // layer with the embedding, 2 in each of 30 stages and the loss alone (E t | (tt|)*30 L); 3
  // layers on pp 6 leave even the first stage empty (1 per middle stage): a skip with the reason.
  std::string f = kLlamaFields;
  f.replace(f.find(",4,1024,"), 8, ",61,1024,");
  const std::string layout = ",8,,1,8,1,1,1,1,1,0,zero3,2,16,1,";
  f.replace(f.find(layout), layout.size(), ",16,,1,1,1,16,1,1,1,0,zero1,1,16,,");
  f.replace(f.find("torchtitan-fsdp2"), 16, "megatron");
  const ValidationCase v = map_validation_row(parse_csv_table(std::string(kHeader) + synthetic_row("u", f)), 0);
  REQUIRE_MESSAGE(v.skipped.empty(), v.skipped);
  std::vector<int> want(15, 4);
  want.push_back(1);
  CHECK(v.run.plan.pipeline_split.chunk_layers == want);
  CHECK(std::any_of(v.assumptions.begin(), v.assumptions.end(), [](const std::string& a) {
    return a.find("Megatron-Bridge's layout rule") != std::string::npos && a.find("\"Et*4|(t*4|)*14tL\"") != std::string::npos;
  }));
  std::string g = f;
  g.replace(g.find(",16,,1,1,1,16,"), 14, ",32,,1,1,1,32,");
  const ValidationCase w = map_validation_row(parse_csv_table(std::string(kHeader) + synthetic_row("w", g)), 0);
  REQUIRE_MESSAGE(w.skipped.empty(), w.skipped);
  std::vector<int> h100(30, 2);
  h100.insert(h100.begin(), 1);
  h100.push_back(0);
  CHECK(w.run.plan.pipeline_split.chunk_layers == h100);
  CHECK(std::any_of(w.assumptions.begin(), w.assumptions.end(), [](const std::string& a) {
    return a.find("the loss alone last") != std::string::npos && a.find("\"Et|(t*2|)*30L\"") != std::string::npos;
  }));
  std::string x = g;
  x.replace(x.find(",61,1024,"), 9, ",3,1024,");
  x.replace(x.find(",32,,1,1,1,32,"), 14, ",6,,1,1,1,6,");
  const std::string why = map_validation_row(parse_csv_table(std::string(kHeader) + synthetic_row("x", x)), 0).skipped;
  CHECK_MESSAGE(why.find("leave a stage empty") != std::string::npos, why);
}

// dev-moe.csv names the dispatcher and the expert all-to-all overlap in its notes only (README,
// "Dispatcher (in notes)"); validate reads them there rather than assuming.
TEST_CASE("dev-moe rows: the dispatcher and the all-to-all overlap their notes name" *
          SKIP_UNLESS_SHARED("validation/dev-moe.csv")) {
  const CsvTable moe = read_csv_table((test::shared_root() / "validation" / "dev-moe.csv").string());
  auto mapped = [&](const std::string& id) {
    const ValidationCase vc = map_validation_row(moe, row_index(moe, "megatron-moe-modelzoo-qwen3-235b-a22b-" + id));
    REQUIRE(vc.skipped.empty());
    return vc.run.plan;
  };
  // "dispatcher A2A (alltoall)": the plain all-to-all, no deduplication.
  CHECK(mapped("h100-sxm-80gb-256g-intranode-ep8-pp32-a2a").moe_dispatcher == MoeDispatcher::alltoall);
  CHECK_FALSE(mapped("h100-sxm-80gb-256g-intranode-ep8-pp32-a2a").moe_a2a_overlap);
  // "dispatcher DeepEP", and the same run with "+1f1b overlap".
  CHECK(mapped("h100-sxm-80gb-256g-crossnode-ep32").moe_dispatcher == MoeDispatcher::deepep);
  CHECK_FALSE(mapped("h100-sxm-80gb-256g-crossnode-ep32").moe_a2a_overlap);
  CHECK(mapped("h100-sxm-80gb-256g-crossnode-ep32-a2aoverlap").moe_a2a_overlap);
  // "DISPATCHER=hybridep A2A_OVERLAP=1" / "A2A_OVERLAP=0".
  CHECK(mapped("gb200-256g-mxfp8").moe_dispatcher == MoeDispatcher::hybridep);
  CHECK(mapped("gb200-256g-mxfp8").moe_a2a_overlap);
  CHECK_FALSE(mapped("gb200-256g-bf16").moe_a2a_overlap);
  // "--cuda-graph-impl transformer_engine --cuda-graph-scope attn moe_router moe_preprocess".
  const Plan graphs = mapped("gb200-256g-bf16");
  CHECK(graphs.cuda_graphs);
  CHECK(cuda_graph_scope_names(graphs.cuda_graph_scope) == std::vector<std::string>{"attn", "moe_router", "moe_preprocess"});
  CHECK_FALSE(mapped("h100-sxm-80gb-256g-crossnode-ep32").cuda_graphs);
  // No row quotes Megatron-Core's MoE fusion flags: off, Megatron-LM's default. Notes that quote
  // one turn it on.
  CHECK_FALSE(mapped("h100-sxm-80gb-256g-crossnode-ep32").moe_permute_fusion);
  CHECK_FALSE(mapped("h100-sxm-80gb-256g-crossnode-ep32").moe_router_fusion);
  std::ifstream in(test::shared_root() / "validation" / "dev-moe.csv", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string yaml = "model yaml: --use-distributed-optimizer";
  REQUIRE(text.find(yaml) != std::string::npos);
  text.replace(text.find(yaml), yaml.size(), "model yaml: --moe-permute-fusion, --use-distributed-optimizer");
  const CsvTable quoted = parse_csv_table(text);
  const ValidationCase vc = map_validation_row(quoted, 0);
  REQUIRE(vc.skipped.empty());
  CHECK(vc.run.plan.moe_permute_fusion);
  CHECK_FALSE(vc.run.plan.moe_router_fusion);
  // A recipe's field spelling, true or false.
  for (const auto& [quote, on] : {std::pair{"moe_router_fusion=True, ", true}, std::pair{"moe_router_fusion: true; ", true},
                                  std::pair{"moe_router_fusion=False, ", false}}) {
    std::string t = text;
    t.replace(t.find("--moe-permute-fusion, "), 22, quote);
    const ValidationCase q = map_validation_row(parse_csv_table(t), 0);
    REQUIRE(q.skipped.empty());
    CHECK(q.run.plan.moe_router_fusion == on);
    CHECK_FALSE(q.run.plan.moe_permute_fusion);
  }
}
