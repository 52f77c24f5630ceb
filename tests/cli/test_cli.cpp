// The command line as users meet it: bad files and flags give one line naming the file/flag,
// the key and the reason, and a non-zero exit code; good inputs answer.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cctype>
#include <set>
#include <sstream>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <utility>
#include <vector>

#include "../test_paths.hpp"
#include "spec/cluster_loader.hpp"
#include "workload/moe_routing.hpp"

namespace fs = std::filesystem;
using meshplan::test::data_root;
using meshplan::test::meshplan_bin;

namespace {

struct Run {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

Run run(const std::string& args) {
  // Per process: other checkouts run this test at the same time on the same /tmp.
  const fs::path err_file =
      fs::temp_directory_path() / ("meshplan_cli_test_stderr." + std::to_string(::getpid()) + ".txt");
  const std::string cmd = meshplan_bin().string() + " " + args + " 2>" + err_file.string();
  Run r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), static_cast<int>(buf.size()), p) != nullptr) r.out += buf.data();
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream f(err_file);
  r.err.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return r;
}

fs::path write_temp(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / ("meshplan_cli_test." + std::to_string(::getpid())) / name;
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
  return p;
}

std::string example(const std::string& name) { return (data_root() / "plans" / "examples" / name).string(); }

const char* kPlan = R"([model]
name = "llama3.1-8b"
[cluster]
gpus = 8
[layout]
dp_shard = 8
[batch]
seq_len = 4096
global_batch = 16
micro_batch = 1
)";

// Every failure is one line on stderr that mentions `needle`, and a non-zero exit.
void check_one_line_error(const std::string& args, const std::string& needle) {
  CAPTURE(args);
  const Run r = run(args);
  CHECK(r.exit_code != 0);
  CHECK(r.exit_code != -1);  // exited, did not crash
  CAPTURE(r.err);
  REQUIRE_FALSE(r.err.empty());
  std::string err = r.err;
  while (!err.empty() && err.back() == '\n') err.pop_back();
  CHECK(err.find('\n') == std::string::npos);
  CHECK(err.find(needle) != std::string::npos);
}

}  // namespace

TEST_CASE("bad files and flags: one line, names the file or flag and the key, non-zero exit") {
  const std::string plan = write_temp("good.toml", kPlan).string();
  const std::string csv = write_temp("runs.csv", "id,source\nr1,s\n").string();
  auto with = [&](const std::string& name, const std::string& from, const std::string& to) {
    std::string t = kPlan;
    const auto pos = t.find(from);
    REQUIRE(pos != std::string::npos);
    t.replace(pos, from.size(), to);
    return write_temp(name, t).string();
  };
  struct Case {
    std::string args, needle;
  };
  const std::vector<Case> cases = {
      {"memory --config /nonexistent/run.yaml", "/nonexistent/run.yaml"},
      {"memory --config " + plan + " --cluster no-such-gpu", "no-such-gpu"},
      {"memory --config " + plan + " --model no-such-model", "no-such-model"},
      {"memory --config " + plan + " --gpus 16", "gpus"},
      {"memory --config " + plan + " --gpus 0", "--gpus"},
      {"memory --config " + plan + " --gpus -8", "--gpus"},
      {"memory --config " + plan + " --gpus eight", "--gpus"},
      {"memory --config " + with("tp3.toml", "dp_shard = 8", "dp_shard = 2\ntp = 3") + " --gpus 6", "tp"},
      {"memory --config " + with("pp3.toml", "gpus = 8\n[layout]\ndp_shard = 8", "gpus = 6\n[layout]\ndp_shard = 2\npp = 3"), "layout.pp"},
      {"memory --config " + with("seq0.toml", "seq_len = 4096", "seq_len = 0"), "seq_len"},
      {"memory --config " + with("seqneg.toml", "seq_len = 4096", "seq_len = -5"), "seq_len"},
      {"memory --config " + with("seqstr.toml", "seq_len = 4096", "seq_len = \"long\""), "seq_len"},
      {"memory --config " + with("batch.toml", "global_batch = 16", "global_batch = 12"), "global_batch"},
      {"memory --config " + with("unknown.toml", "micro_batch = 1", "micro_bach = 1"), "micro_bach"},
      {"memory --config " + with("syntax.toml", "[layout]", "[layout"), "syntax.toml"},
      {"memory --config " + with("model.toml", "llama3.1-8b", "llama9-1t"), "llama9-1t"},
      {"memory --config " + with("product.toml", "dp_shard = 8", "dp_shard = 3"), "dp_shard"},
      {"memory --config " + write_temp("bad.yaml", "fsdp_config: [unclosed\n").string(), "bad.yaml"},
      {"memory --config " + write_temp("notyaml.json", "{\"a\": }").string(), "notyaml.json"},
      {"simulate --config " + plan + " --cluster no-such-gpu", "no-such-gpu"},
      {"simulate --config " + plan + " --trace /nonexistent/dir/t.json", "/nonexistent/dir/t.json"},
      {"model no-such-model", "no-such-model"},
      {"model " + write_temp("cfg.json", "{\"hidden_size\": 4096}").string(), "cfg.json"},
      {"plan --model llama3.1-8b --gpus 8", "--global-batch"},
      {"plan --model llama3.1-8b --gpus 8 --global-batch-tokens 4Q", "--global-batch-tokens"},
      {"plan --model llama3.1-8b --gpus 8 --global-batch 16 --runtime deepspeed", "--runtime"},
      {"plan --model nope --gpus 8 --global-batch 16", "nope"},
      {"collective --cluster h100-sxm-80gb --op all_smash --gpus 8 --sizes 1K:1M", "all_smash"},
      {"collective --cluster h100-sxm-80gb --gpus 8 --launch mpirun", "--launch"},
      {"kernel --cluster h100-sxm-80gb --gemm 8192x8192 --dtype bf16", "gemm"},
      {"no-such-command", "no-such-command"},
      {"validate " + csv + " " + csv, "--cross-validate"},
      {"validate " + csv + " --params elementwise_fraction", "--params"},
      {"validate " + csv + " --cross-validate source --params no_such", "no_such"},
      {"validate " + csv + " --cross-validate planet", "--cross-validate"},
      {"calibrate --runs " + csv + " --fit m.json", "--runs"},
      {"calibrate --runs /nonexistent/runs.csv", "/nonexistent/runs.csv"},
      {"calibrate --runs " + csv + " --params no_such", "no_such"},
  };
  CHECK(cases.size() >= 25);
  for (const auto& c : cases) check_one_line_error(c.args, c.needle);
}

TEST_CASE("memory --json follows the documented contract and adds up") {
  const Run r = run("memory --config " + example("mpt-7b-8gpu-pure-ac.yaml") + " --cluster a100-80gb --json");
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  for (const char* k : {"gpu_memory_bytes", "fits", "warnings", "stages"}) CHECK(j.contains(k));
  for (const auto& st : j.at("stages")) {
    std::int64_t sum = 0;
    for (const char* k : {"params", "grads", "optimizer", "unsharded_params", "reduce_buffers", "activations",
                          "recompute", "comm_buffers", "framework"})
      sum += st.at("breakdown").at(k).get<std::int64_t>();
    CHECK(sum == st.at("peak_bytes").get<std::int64_t>());
  }
}

TEST_CASE("memory prints every stage's chunks: 126 layers on pp 16 x vpp 8, embedding and loss counted") {
  const std::string cfg = example("plan-llama3.1-405b-megatron-pp16-vpp8.toml");
  const Run r = run("memory --json --config " + cfg);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  const auto& st = j.at("stages");
  REQUIRE(st.size() == 16);
  // Stage 0: the embedding's chunk, then layers 15, 31, ..., 111; stage r (1..14): r - 1 + 16 k;
  // stage 15: layers 14, 30, ..., 110, then the loss's chunk.
  CHECK(st[0].at("first_layer") == 15);
  CHECK(st[0].at("n_layers") == 7);
  REQUIRE(st[0].at("chunks").size() == 8);
  CHECK(st[0].at("chunks")[0].at("n_layers") == 0);
  CHECK(st[0].at("chunks")[1].at("first_layer") == 15);
  for (int r = 1; r < 15; ++r) {
    CAPTURE(r);
    CHECK(st[r].at("first_layer") == r - 1);
    CHECK(st[r].at("n_layers") == 8);
    for (int k = 0; k < 8; ++k) {
      CHECK(st[r].at("chunks")[k].at("first_layer") == r - 1 + 16 * k);
      CHECK(st[r].at("chunks")[k].at("n_layers") == 1);
    }
  }
  CHECK(st[15].at("first_layer") == 14);
  CHECK(st[15].at("n_layers") == 7);
  CHECK(st[15].at("chunks")[6].at("first_layer") == 110);
  CHECK(st[15].at("chunks")[7].at("n_layers") == 0);
  const Run text = run("memory --config " + cfg);
  CHECK(text.out.find("stage 0 (layers 15, 31, 47, 63, 79, 95, 111 + embedding (a chunk of its own); 7 layers") !=
        std::string::npos);
  CHECK(text.out.find("stage 1 (layers 0, 16, 32, 48, 64, 80, 96, 112; 8 layers") != std::string::npos);
  CHECK(text.out.find("stage 15 (layers 14, 30, 46, 62, 78, 94, 110 + head and loss (a chunk of their own)") !=
        std::string::npos);
  const Run sim = run("simulate --config " + cfg);
  CHECK(sim.exit_code == 0);

  // A split the runtime rejects is bad input: one line naming the key, exit 2.
  std::string bad = kPlan;
  bad.replace(bad.find("dp_shard = 8"), 12, "dp_shard = 2\npp = 4\ndecoder_first_pipeline_num_layers = 33");
  const Run b = run("memory --config " + write_temp("split_too_large.toml", bad).string());
  CHECK(b.exit_code == 2);
  CHECK(b.err.find("layout.decoder_first_pipeline_num_layers") != std::string::npos);
  CHECK(b.err.find("the model has 32") != std::string::npos);
}

TEST_CASE("memory answers for every shipped example and is deterministic") {
  for (const auto& e : fs::directory_iterator(data_root() / "plans" / "examples")) {
    CAPTURE(e.path());
    const Run a = run("memory --config " + e.path().string() + " --cluster h100-sxm-80gb");
    CHECK((a.exit_code == 0 || a.exit_code == 3));  // 3: answered, does not fit
    CHECK(a.out.find("peak") != std::string::npos);
    const Run b = run("memory --config " + e.path().string() + " --cluster h100-sxm-80gb");
    CHECK(a.out == b.out);
  }
}

TEST_CASE("simulate --json follows the contract; breakdown adds up to the step time") {
  const Run r = run("simulate --config " + example("llama3.1-8b-fsdp-h100.toml") + " --json");
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  double sum = 0;
  for (const char* k : {"compute", "recompute", "exposed_comm", "bubble", "optimizer", "offload_stall", "other"})
    sum += j.at("breakdown_s").at(k).get<double>();
  CHECK(sum == doctest::Approx(j.at("step_time_s").get<double>()).epsilon(0.001));
  for (const char* k : {"tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu", "exposed_comm_s", "stages"})
    CHECK(j.contains(k));
}

// A Megatron plan without [sharding] strategy runs Megatron-LM's default, plain data parallelism,
// and the distributed optimizer only where that does not fit, saying so (as validate resolves an
// unstated sharding). Llama-3.1-8B on 8 H100 as 8 replicas: its 18 bytes per parameter (bf16 weights,
// fp32 gradients, master weights and two moments) are 134 GiB unsharded; with the distributed
// optimizer's 12 over 8 ranks, 2 + 4 + 1.5 = 7.5 bytes, 56 GiB, and the peak 76 GiB fits.
TEST_CASE("plan TOML: an unstated strategy under megatron is Megatron-LM's default, else the least that fits") {
  auto resolved = [](const std::string& layout) {
    const std::string plan = "[model]\nname = \"llama3.1-8b\"\n[cluster]\ngpus = 8\nprofile = \"h100-sxm-80gb\"\n" +
                             layout + "[activation_checkpoint]\nmode = \"full\"\n[batch]\nseq_len = 4096\nglobal_batch = 32\n"
                             "micro_batch = 1\n[runtime]\nname = \"megatron\"\n";
    const Run r = run("simulate --config " + write_temp("unstated_sharding.toml", plan).string() + " --json");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    return nlohmann::json::parse(r.out).at("assumptions").get<std::vector<std::string>>();
  };
  const auto ddp = resolved("[layout]\ntp = 8\n");  // one replica: nothing to shard, DDP fits
  CHECK(std::find(ddp.begin(), ddp.end(), "sharding not stated: none (the framework default; its allocated peak fits on h100-sxm-80gb)") !=
        ddp.end());
  const auto zero1 = resolved("[layout]\ndp_replicate = 8\n");
  CHECK(std::find(zero1.begin(), zero1.end(),
                  "sharding not stated: zero1 (the allocated peak of the framework default none does not fit on "
                  "h100-sxm-80gb)") != zero1.end());
}

// ZeRO-2/3 shard over dp_shard: written over one rank beside replicas, the replicas become the shard
// group (a group of one would gather nothing and never reduce the replicas' gradients), said so.
TEST_CASE("plan TOML: zero2/zero3 over dp_shard 1 beside replicas shards over the data-parallel ranks") {
  const std::string plan =
      "[model]\nname = \"llama3.1-8b\"\n[cluster]\ngpus = 8\nprofile = \"h100-sxm-80gb\"\n"
      "[layout]\ndp_replicate = 8\n[sharding]\nstrategy = \"zero2\"\n[activation_checkpoint]\nmode = \"full\"\n"
      "[batch]\nseq_len = 4096\nglobal_batch = 32\nmicro_batch = 1\n";
  const Run r = run("simulate --config " + write_temp("zero2_replicas.toml", plan).string() + " --json");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto j = nlohmann::json::parse(r.out);
  const auto a = j.at("assumptions").get<std::vector<std::string>>();
  CHECK(std::find(a.begin(), a.end(),
                  "sharding zero2 over dp_shard 1 beside 8 replicas: sharded over the 8 data-parallel ranks instead "
                  "(dp_shard 8, dp_replicate 1)") != a.end());
  // Each of the 4 micro-batches gathers Llama-3.1-8B's 8.03 B parameters in bf16 and reduce-scatters
  // their gradients in fp32 (the plan's default reduce dtype): 4 x 2 and 4 x 4 bytes per parameter.
  constexpr double kParams = 8.030261248e9;
  CHECK(j.at("comm_bytes_per_step").at("fsdp_all_gather").get<double>() == doctest::Approx(4 * 2 * kParams).epsilon(0.001));
  CHECK(j.at("comm_bytes_per_step").at("fsdp_reduce_scatter").get<double>() ==
        doctest::Approx(4 * 4 * kParams).epsilon(0.001));
}

// A host-bound Megatron MoE step names what would issue fewer launches: Megatron-Core's fused MoE
// kernels it leaves off, beside the general remedies (docs/host.md, "Megatron-Core's MoE layer").
TEST_CASE("simulate: a host-bound Megatron MoE step names the MoE fusions it leaves off") {
  const std::string plan =
      "[model]\nname = \"qwen3-30b-a3b\"\n[cluster]\ngpus = 8\nprofile = \"h100-sxm-80gb\"\n"
      "[layout]\npp = 2\ntp = 4\nep = 4\netp = 1\nsequence_parallel = true\nschedule = \"1f1b\"\n"
      "[sharding]\nstrategy = \"zero1\"\n"  // the distributed optimizer, as Megatron-Bridge's recipe runs it
      "[activation_checkpoint]\nmode = \"full\"\n[batch]\nseq_len = 2048\nglobal_batch = 64\nmicro_batch = 1\n"
      "[runtime]\nname = \"megatron\"\nmoe_router_fusion = true\n";
  const Run r = run("simulate --config " + write_temp("host_bound_moe.toml", plan).string());
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find("HOST-BOUND") != std::string::npos);
  CHECK(r.out.find("CUDA graphs, --moe-permute-fusion or compile") != std::string::npos);  // router fusion is on
}

TEST_CASE("simulate says how it folded: a 1F1B bundle by its own timeline, an interleaved one by three steps") {
  // A shipped bundle's `simulate --json` "folded" object.
  auto folded_of = [](const std::string& bundle) {
    const Run r = run("simulate --config " + (data_root() / bundle).string() + " --json");
    REQUIRE(r.exit_code == 0);
    return nlohmann::json::parse(r.out).at("folded");
  };
  // torchtitan 1F1B on pp 8, 512 micro-batches: pp + 3 = 11 and pp + 4 = 12 simulated, the 12's
  // timeline the proof, 512 - 12 = 500 periods of one micro-batch extrapolated.
  const std::string tt = "plans/llama3.1-70b-64xh100/llama3.1-70b.toml";
  const Run text = run("simulate --config " + (data_root() / tt).string());
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("11 and 12 micro-batches simulated (the longer one's timeline repeats each period), 500 periods "
                      "of 1 extrapolated") != std::string::npos);
  const auto folded = folded_of(tt);
  CHECK(folded.at("period_microbatches") == 1);
  CHECK(folded.at("periods_extrapolated") == 500);
  CHECK(folded.at("period_shown_in_timeline") == true);
  // Interleaved on pp 16: periods of 16 micro-batches, 32, 48 and 64 simulated, 28 more extrapolated.
  const auto three = folded_of("plans/llama3.1-405b-1024xh100/llama3.1-405b.toml");
  CHECK(three.at("period_microbatches") == 16);
  CHECK(three.at("periods_extrapolated") == 28);
  CHECK(three.at("period_shown_in_timeline") == false);
}

TEST_CASE("--nccl-version: the default named explicitly changes nothing; an unknown one is one line, exit 2") {
  const std::string sim = "simulate --config " + example("llama3.1-8b-fsdp-h100.toml") + " --json";
  const Run plain = run(sim);
  REQUIRE(plain.exit_code == 0);
  const Run named = run(sim + " --nccl-version 2.30.7");
  CHECK(named.exit_code == 0);
  CHECK(named.out == plain.out);  // byte-identical
  const std::string coll = "collective --cluster a100-80gb --gpus 16 --sizes 1K:1G";
  const Run coll_plain = run(coll);
  REQUIRE(coll_plain.exit_code == 0);
  CHECK(run(coll + " --nccl-version 2.30.7").out == coll_plain.out);
  CHECK(run(coll + " --nccl 2.30.7").out == coll_plain.out);  // the older spelling
  for (const std::string& cmd : {sim, coll, std::string("whatif --config ") + example("llama3.1-8b-fsdp-h100.toml") +
                                                " --vary training.seq_len=4096,8192",
                                 std::string("plan --model llama3.1-8b --gpus 8 --global-batch-tokens 1M"),
                                 std::string("capacity --model llama3.1-8b --tokens 1T --gpus 64")}) {
    const Run bad = run(cmd + " --nccl-version 9.9.9");
    CHECK_MESSAGE(bad.exit_code == 2, cmd);
    CHECK_MESSAGE(bad.err.find("--nccl-version: unknown NCCL version '9.9.9' (available: 2.30.7") != std::string::npos,
                  bad.err);
    CHECK(std::count(bad.err.begin(), bad.err.end(), '\n') == 1);
  }
}

TEST_CASE("calibrate --nccl-tests: the shipped series gives the shipped ramp; --json fields; misuse is exit 2") {
  const std::string series = (data_root() / "hardware_profiles" / "nccl" / "series" / "azure-nd-a100-v4-all-reduce.csv").string();
  const Run r = run("calibrate --nccl-tests " + series + " --json");
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j.at("small_message_efficiency").get<double>() == doctest::Approx(0.423).epsilon(0.005));
  CHECK(j.at("half_ramp_bytes").get<double>() == doctest::Approx(17690582).epsilon(0.005));
  CHECK(j.at("points_used").get<int>() == 14);
  CHECK(j.at("max_abs_relative_error").get<double>() < 0.10);
  CHECK(j.at("points").size() == 22);
  for (const char* k : {"bytes", "measured_busbw_bytes_per_s", "predicted_busbw_bytes_per_s", "used", "ranks"})
    CHECK(j.at("points").at(0).contains(k));
  const Run alone = run("calibrate --nccl-version 2.30.7");
  CHECK(alone.exit_code == 2);
  CHECK(alone.err.find("--nccl-version: goes with --nccl-tests") != std::string::npos);
  const Run both = run("calibrate --nccl-tests " + series + " --out x.toml");
  CHECK(both.exit_code == 2);
  CHECK(both.err.find("--nccl-tests fits the NCCL table's ramp on its own") != std::string::npos);
}

// The p6-b200 profile's EFA transport latency, fitted (docs/collectives.md "Transport latency"): the
// committed 4-node series gives the shipped 63.9 us with every point used within 6 %; a series with
// no point across nodes, or whose profile does not declare the key fitted, is exit 2 naming it.
TEST_CASE("calibrate --nccl-tests --transport-latency: the AWS series gives the shipped EFA latency; misuse is exit 2") {
  const fs::path dir = data_root() / "hardware_profiles" / "nccl" / "series";
  const std::string aws = (dir / "aws-p6-b200-all-reduce.csv").string();
  const Run r = run("calibrate --nccl-tests " + aws + " --transport-latency --json");
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j.at("cluster") == "p6-b200");
  CHECK(j.at("transport_latency_us").get<double>() == doctest::Approx(63.922).epsilon(0.005));
  CHECK(j.at("transport_latency_us").get<double>() ==
        doctest::Approx(meshplan::load_cluster("p6-b200").fabric.transport_latency_seconds * 1e6).epsilon(0.005));
  CHECK(j.at("points_used").get<int>() == 9);
  CHECK(j.at("max_abs_relative_error").get<double>() < 0.06);
  CHECK(j.at("at_bound") == false);
  const std::string azure = (dir / "azure-nd-a100-v4-all-reduce.csv").string();
  const Run one_node = run("calibrate --nccl-tests " + azure + " --transport-latency");
  CHECK(one_node.exit_code == 2);
  CHECK(one_node.err.find(azure + ": --transport-latency: 0 point(s) across nodes") != std::string::npos);
  const Run alone = run("calibrate --transport-latency");
  CHECK(alone.exit_code == 2);
  CHECK(alone.err.find("--transport-latency: goes with --nccl-tests") != std::string::npos);
}

TEST_CASE("calibrate --gemm-shapes: the H200 series gives the shipped stream-K threshold; --json fields; misuse is exit 2") {
  const std::string shapes = (data_root() / "tests" / "cost" / "measured_h200_shapes.csv").string();
  const Run r = run("calibrate --gemm-shapes " + shapes + " --cluster h200-141gb --json");
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j.at("gemm_stream_k_min_saving").get<double>() == doctest::Approx(0.235).epsilon(0.005));
  CHECK(j.at("interval").at(0).get<double>() < 0.235);
  CHECK(j.at("interval").at(1).get<double>() > 0.235);
  CHECK(j.at("points_read").get<int>() == 30);
  CHECK(j.at("points_used").get<int>() == 24);
  for (const char* k : {"m", "n", "k", "measured_seconds", "whole_tiles_seconds", "stream_k_seconds", "stream_k_saving",
                        "measured_stream_k", "reproduced"})
    CHECK(j.at("points").at(0).contains(k));
  // Only the square series: fewer GEMMs, the same threshold's interval still holds it.
  const Run squares = run("calibrate --gemm-shapes " + shapes + " --cluster h200-141gb --gemm-series gemm_square --json");
  REQUIRE(squares.exit_code == 0);
  CHECK(nlohmann::json::parse(squares.out).at("points_read").get<int>() == 13);
  const Run no_cluster = run("calibrate --gemm-shapes " + shapes);
  CHECK(no_cluster.exit_code == 2);
  CHECK(no_cluster.err.find("--gemm-shapes: needs --cluster") != std::string::npos);
  const Run both = run("calibrate --gemm-shapes " + shapes + " --cluster h200-141gb --out x.toml");
  CHECK(both.exit_code == 2);
  CHECK(both.err.find("fits the stream-K threshold on its own") != std::string::npos);
  const Run missing = run("calibrate --gemm-shapes /nonexistent/shapes.csv --cluster h200-141gb");
  CHECK(missing.exit_code == 2);
  CHECK(std::count(missing.err.begin(), missing.err.end(), '\n') == 1);
}

TEST_CASE("collective --explain: NCCL's tuner line, then the terms that add up to the reported time") {
  const std::string args = "collective --cluster a100-80gb --gpus 8 --sizes 1M:64M";
  const Run plain = run(args + " --json");
  const Run r = run(args + " --explain --json");
  REQUIRE(r.exit_code == 0);
  const auto rows = nlohmann::json::parse(r.out).at("rows");
  const auto plain_rows = nlohmann::json::parse(plain.out).at("rows");
  REQUIRE(rows.size() == 7);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& x = rows[i].at("explain");
    CHECK(plain_rows[i].count("explain") == 0);  // without --explain the rows are unchanged
    CHECK(rows[i].at("time_us") == plain_rows[i].at("time_us"));
    CHECK(x.at("latency_us").get<double>() + x.at("transfer_us").get<double>() ==
          doctest::Approx(rows[i].at("time_us").get<double>()));
    CHECK(x.at("latency_us").get<double>() + x.at("nccl_transfer_us").get<double>() ==
          doctest::Approx(x.at("nccl_time_us").get<double>()));
    CHECK(x.at("nccl_algo") == 1);  // Ring on A100 (no NVLS)
    CHECK(x.at("channels").get<int>() <= x.at("nccl_channels").get<int>());
    CHECK(x.at("ramp_us").get<double>() < x.at("transfer_us").get<double>());
  }
  const Run text = run(args + " --explain");
  CHECK(text.out.find("#   NCCL INFO AllReduce: 1048576 Bytes -> Algo 1 proto 0 time ") != std::string::npos);
  CHECK(text.out.find("#     NCCL: ring/LL on 12 channels = latency 15.00 us") != std::string::npos);
}

// --launch torch: a torch.distributed benchmark's timed call carries c10d's dispatch, 2 x 8 us on
// the H200's x86 host, at every size; --launch single-process puts nccl-tests -g 8's floor under it.
TEST_CASE("collective --launch: torch adds c10d's dispatch of each call; single-process floors small sizes") {
  const std::string args = "collective --cluster h200-141gb --gpus 8 --sizes 32K:1G --json";
  const auto rows = nlohmann::json::parse(run(args).out).at("rows");
  const Run t = run(args + " --launch torch --explain");
  REQUIRE(t.exit_code == 0);
  const auto torch_rows = nlohmann::json::parse(t.out).at("rows");
  REQUIRE(rows.size() == torch_rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    CHECK(torch_rows[i].at("time_us").get<double>() - rows[i].at("time_us").get<double>() == doctest::Approx(16.0));
    CHECK(torch_rows[i].at("explain").at("caller_us").get<double>() == doctest::Approx(16.0));
  }
  const auto g = nlohmann::json::parse(run(args + " --launch single-process").out).at("rows");
  CHECK(g.front().at("time_us").get<double>() >= 8 * 2.625 - 1e-9);  // Intel host: 8 launches of 2.625 us
  CHECK(g.back().at("time_us") == rows.back().at("time_us"));        // 1 GiB: GPU-bound either way
}

TEST_CASE("demo runs on built-in defaults") {
  const Run r = run("demo");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("fits:") != std::string::npos);
}

TEST_CASE("memory answers for every shipped model (FSDP over one node)") {
  for (const auto& e : fs::directory_iterator(data_root() / "models")) {
    if (e.path().extension() != ".toml") continue;
    const std::string name = e.path().stem().string();
    CAPTURE(name);
    const std::string plan = "[model]\nname = \"" + name + "\"\n[cluster]\ngpus = 8\n[layout]\ndp_shard = 8\n" +
                             "[activation_checkpoint]\nmode = \"full\"\n[batch]\nseq_len = 2048\nglobal_batch = 8\n" +
                             "micro_batch = 1\n";
    const Run r = run("memory --json --cluster h100-sxm-80gb --config " + write_temp(name + ".toml", plan).string());
    CHECK((r.exit_code == 0 || r.exit_code == 3));
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j.at("stages").size() == 1);
    CHECK(j.at("stages")[0].at("peak_bytes").get<double>() > 0);
    CHECK(j.at("fits").get<bool>() == (r.exit_code == 0));
  }
}

TEST_CASE("validate --row/--trace/--export-plan: one row looked into, and the exported plan simulates the same" *
          SKIP_UNLESS_SHARED("validation/dev.csv")) {
  const std::string dev = (meshplan::test::shared_root() / "validation" / "dev.csv").string();
  const std::string id = "kor22-gpt22b-selective-sp";
  const fs::path dir = fs::temp_directory_path() / ("meshplan_cli_test." + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string trace = (dir / "row_trace.json").string(), plan = (dir / "row_plan.toml").string();
  const Run v = run("validate " + dev + " --row " + id + " --trace " + trace + " --export-plan " + plan + " --json");
  REQUIRE(v.exit_code == 0);
  const auto j = nlohmann::json::parse(v.out);
  REQUIRE(j.at("rows").size() == 1);
  CHECK(j.at("rows")[0].at("id") == id);
  const double step_s = j.at("rows")[0].at("step_time_s").get<double>();

  std::ifstream t(trace);
  const auto tj = nlohmann::json::parse(t);
  CHECK(tj.at("traceEvents").size() > 10);

  // The exported plan carries the row's model, layout, precision and batch: simulating it on the
  // row's profile gives the same step.
  const Run s = run("simulate --config " + plan + " --cluster a100-80gb --json");
  REQUIRE(s.exit_code == 0);
  CHECK(nlohmann::json::parse(s.out).at("step_time_s").get<double>() == doctest::Approx(step_s).epsilon(1e-9));

  check_one_line_error("validate " + dev + " --row no-such-row", "no-such-row");
  check_one_line_error("validate " + dev + " --trace " + trace, "--row");
  check_one_line_error("validate " + dev + " --row " + id + " --row sc21-a100-gpt1.7b-32g --export-plan " + plan, "exactly one");

  // A row whose source documents its own network (BLOOM-176B's 4 Omni-Path links of 100 Gb/s per
  // node): the export warns that the plan's profile lacks it, and a profile that has it gives the
  // row's step again.
  const std::string bloom = "bloom176b-gbs16-mbs2";
  const Run b = run("validate " + dev + " --row " + bloom + " --export-plan " + plan + " --json");
  REQUIRE(b.exit_code == 0);
  CHECK(b.err.find("4 NICs of 100 Gb/s per node") != std::string::npos);
  const double bloom_step_s = nlohmann::json::parse(b.out).at("rows")[0].at("step_time_s").get<double>();
  std::ifstream in(data_root() / "hardware_profiles" / "a100-80gb.toml");
  std::stringstream profile;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("nics_per_node = ", 0) == 0) line = "nics_per_node = 4";
    if (line.rfind("nic_gbit_per_s = ", 0) == 0) line = "nic_gbit_per_s = 100";
    profile << line << '\n';
  }
  const fs::path jean_zay = dir / "a100-80gb-omnipath.toml";
  std::ofstream(jean_zay) << profile.str();
  const Run on_profile = run("simulate --config " + plan + " --json");
  const Run on_network = run("simulate --config " + plan + " --cluster " + jean_zay.string() + " --json");
  REQUIRE(on_profile.exit_code == 0);
  REQUIRE(on_network.exit_code == 0);
  CHECK(nlohmann::json::parse(on_network.out).at("step_time_s").get<double>() ==
        doctest::Approx(bloom_step_s).epsilon(1e-9));
  CHECK(nlohmann::json::parse(on_profile.out).at("step_time_s").get<double>() < 0.9 * bloom_step_s);
}

TEST_CASE("plan --json: each row names its equivalent settings (itself first); dropped plans have reasons") {
  const Run r = run("plan --model llama3.1-8b --gpus 8 --global-batch-tokens 1M --runtime megatron --json");
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j.at("plans").size() == 10);
  bool twin = false;
  for (const auto& row : j.at("plans")) {
    const auto& eq = row.at("equivalent_settings");
    REQUIRE(eq.size() >= 1);
    CHECK(eq.at(0).at("activation_ckpt") == row.at("activation_ckpt"));
    CHECK(eq.at(0).at("sharding") == row.at("sharding"));
    CHECK(eq.at(0).at("mixed_precision") == row.at("mixed_precision"));
    for (const auto& e : eq) twin = twin || e.at("activation_ckpt") == "selective-attn";
  }
  CHECK(twin);
  REQUIRE(j.at("dropped").is_array());
  for (const auto& d : j.at("dropped")) CHECK_FALSE(d.at("reason").get<std::string>().empty());
}

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// The shipped H100 profile with one line replaced.
std::string h100_with(const std::string& name, const std::string& from, const std::string& to) {
  std::string t = read_file(data_root() / "hardware_profiles" / "h100-sxm-80gb.toml");
  const auto pos = t.find(from);
  REQUIRE(pos != std::string::npos);
  t.replace(pos, from.size(), to);
  return write_temp(name, t).string();
}

// 512 GPUs of pure FSDP: Llama 3.1 8B, one 4K sequence per GPU.
const char* kFsdp512 = R"([model]
name = "llama3.1-8b"
[cluster]
gpus = 512
[layout]
dp_shard = 512
[batch]
seq_len = 4096
global_batch = 512
micro_batch = 1
)";

}  // namespace

TEST_CASE("goodput inputs: a negative rate, an interval longer than the run, a speed <= 0: one line, non-zero exit") {
  const std::string plan = write_temp("fsdp512.toml", kFsdp512).string();
  const std::string cap = "capacity --model llama3.1-8b --tokens 1T --gpus 64 --simulate-budget 1";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {cap + " --cluster " +
           h100_with("negative_rate.toml", "hbm_failures_per_gpu_year = 0.029724", "hbm_failures_per_gpu_year = -0.03"),
       "reliability.hbm_failures_per_gpu_year"},
      {cap + " --cluster " + h100_with("zero_storage.toml", "storage_write_gb_per_s = 0.651", "storage_write_gb_per_s = 0"),
       "reliability.storage_write_gb_per_s"},
      {cap + " --checkpoint-interval 400d", "--checkpoint-interval"},
      {cap + " --checkpoint-interval -5m", "--checkpoint-interval"},
      {cap + " --checkpoint-interval 10x", "--checkpoint-interval"},
      {"simulate --config " + plan + " --full --straggler 0.01:0", "--straggler"},
      {"simulate --config " + plan + " --full --straggler 0.01:-0.9", "--straggler"},
      {"simulate --config " + plan + " --full --straggler 1.5:0.9", "--straggler"},
      {"simulate --config " + plan + " --straggler 0.01:0.9", "--full"},
      {"simulate --config " + plan + " --full --gpu-speeds " + write_temp("speeds_zero.txt", "3 0.95\n7 0\n").string(),
       "line 2"},
      {"simulate --config " + plan + " --full --gpu-speeds " + write_temp("speeds_range.txt", "512 0.9\n").string(),
       "speeds_range.txt"},
  };
  for (const auto& [args, needle] : cases) check_one_line_error(args, needle);
}

TEST_CASE("capacity prices failures: Llama 3.1 405B on 16,384 H100 spends 85-95 % of its time training") {
  // The published run: 466 interruptions in 54 days, "higher than 90 % effective training time"
  // (Llama 3 Herd of Models, Sec. 3.3.4). The profile's rates are that paper's counts, not a fit.
  const Run r = run("capacity --model llama3.1-405b --tokens 15T --gpus 16384 --json");
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  const double ideal = j.at("days_ideal").get<double>(), with = j.at("days_with_failures").get<double>();
  CHECK(ideal / with > 0.85);
  CHECK(ideal / with < 0.95);
  CHECK(j.at("goodput_fraction").get<double>() == doctest::Approx(ideal / with));
  CHECK(j.at("checkpoint_interval_s").get<double>() > 0);
  const auto ans = std::find_if(j.at("rows").begin(), j.at("rows").end(), [](const nlohmann::json& x) { return x.at("answer").get<bool>(); });
  REQUIRE(ans != j.at("rows").end());
  CHECK(ans->at("days").get<double>() == doctest::Approx(with));  // the answer includes failures by default
  CHECK(ans->at("days_ideal").get<double>() == doctest::Approx(ideal));
  // The text names the interval; --no-failures gives the ideal.
  const Run t = run("capacity --model llama3.1-405b --tokens 15T --gpus 16384");
  REQUIRE(t.exit_code == 0);
  CHECK(t.out.find("interval        every ") != std::string::npos);
  CHECK(t.out.find("Young/Daly") != std::string::npos);
  const std::string small = "capacity --model llama3.1-8b --tokens 1T --gpus 64 --simulate-budget 1 --json";
  const Run a = run(small), n = run(small + " --no-failures");
  REQUIRE(a.exit_code == 0);
  REQUIRE(n.exit_code == 0);
  const auto aj = nlohmann::json::parse(a.out), nj = nlohmann::json::parse(n.out);
  CHECK(nj.at("days_ideal").get<double>() == doctest::Approx(aj.at("days_ideal").get<double>()));
  CHECK(nj.at("days_with_failures").is_null());
  CHECK(nj.at("goodput_fraction").is_null());
  CHECK(aj.at("days_with_failures").get<double>() > aj.at("days_ideal").get<double>());
}

TEST_CASE("simulate --full --straggler: 1 % of 512 FSDP GPUs at 0.9x slow the step as the synchronous hand calculation says") {
  const std::string plan = write_temp("fsdp512_straggler.toml", kFsdp512).string();
  const std::string base = "simulate --config " + plan + " --cluster h100-sxm-80gb --full --json";
  const Run ideal = run(base), slow = run(base + " --straggler 0.01:0.9");
  REQUIRE(ideal.exit_code == 0);
  REQUIRE(slow.exit_code == 0);
  const auto i = nlohmann::json::parse(ideal.out), s = nlohmann::json::parse(slow.out);
  const double t_ideal = i.at("step_time_s").get<double>();
  CHECK(s.at("step_time_ideal_s").get<double>() == doctest::Approx(t_ideal));
  CHECK(s.at("slow_ranks").get<int>() == 5);  // round(0.01 x 512)
  CHECK(s.at("pace_rank_speed").get<double>() == 0.9);
  // Every FSDP all-gather and reduce-scatter waits for its slowest member, so the slow GPU's
  // compute (forward, backward, recompute, optimizer) sits on the critical path at 1/0.9 of its
  // time while the communication stays hidden: T = T_ideal + T_compute x (1/0.9 - 1).
  const auto& b = i.at("breakdown_s");
  const double t_compute = b.at("compute").get<double>() + b.at("recompute").get<double>() + b.at("optimizer").get<double>();
  const double hand = t_ideal + t_compute * (1 / 0.9 - 1);
  CHECK(s.at("step_time_s").get<double>() == doctest::Approx(hand).epsilon(0.02));
  CHECK(s.at("step_time_s").get<double>() > t_ideal * 1.05);  // the effect is not lost in the tolerance
  // Seeded: the same draw every time.
  CHECK(run(base + " --straggler 0.01:0.9").out == slow.out);
  // A speed file with the same slowdown on one rank gives the same synchronous step.
  const std::string one = write_temp("speeds_one.txt", "# rank factor\n100 0.9\n").string();
  const Run f = run(base + " --gpu-speeds " + one);
  REQUIRE(f.exit_code == 0);
  const auto fj = nlohmann::json::parse(f.out);
  CHECK(fj.at("pace_rank").get<int>() == 100);
  CHECK(fj.at("step_time_s").get<double>() == doctest::Approx(hand).epsilon(0.02));
}

TEST_CASE("MoE: the Mixtral example simulates with EP all-to-alls forward and backward; bad ep exits 2") {
  const Run r = run("simulate --config " + example("plan-mixtral-8x7b-ep8-64gpu.toml") + " --cluster h100-sxm-80gb --json");
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  // Per rank and step: 32 layers x 8 micro-batches x 4 all-to-alls (dispatch, combine, and their
  // backward). The experts are TP-split like the rest (etp = tp), so each rank routes all 4096
  // tokens: x top-2 x d_model 4096 x 2 bytes = 67,108,864 bytes per all-to-all on the mean rank.
  // Dropless routing by the trained router: the rank simulated is the most-loaded of the 8, one
  // expert each, 1 + 1.4236 x sqrt(c^2 + 6 / (7 x 8192)) x the mean (docs/compute.md).
  REQUIRE(j.at("comm_bytes").contains("ep"));
  const double c = meshplan::load_cluster("h100-sxm-80gb").framework.moe_router_load_cv;
  const double hot = meshplan::routed_load(8, 2, 8, 4096, c).rank_load_factor;
  CHECK(hot > 1.5);
  CHECK(j.at("comm_bytes").at("ep").get<double>() == doctest::Approx(32.0 * 8 * 4 * 4096 * 2 * 4096 * 2 * hot));
  CHECK(j.at("exposed_comm_s").contains("ep"));
  // ep that does not divide the 8 experts: one line naming the key, exit 2 (bad input).
  std::ifstream in(example("plan-mixtral-8x7b-ep8-64gpu.toml"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto pos = text.find("ep = 8");
  REQUIRE(pos != std::string::npos);
  text.replace(pos, 6, "ep = 16");
  const std::string bad = write_temp("ep16.toml", text).string();
  check_one_line_error("simulate --cluster h100-sxm-80gb --config " + bad, "ep");
  CHECK(run("simulate --cluster h100-sxm-80gb --config " + bad).exit_code == 2);
}

TEST_CASE("plan --model mixtral-8x7b --gpus 64 considers ep > 1 and says why it chose its ep") {
  const Run r = run("plan --model mixtral-8x7b --cluster h100-sxm-80gb --gpus 64 --global-batch-tokens 4Mi "
                    "--seq 4096 --runtime megatron --top 20 --json");
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  bool ep_gt_1 = false, why = false;
  for (const auto& row : j.at("plans"))
    if (row.at("ep").get<int>() > 1) ep_gt_1 = true;
  for (const auto& n : j.at("notes"))
    if (n.get<std::string>().rfind("ep ", 0) == 0 && n.get<std::string>().find("chosen") != std::string::npos) why = true;
  CHECK(ep_gt_1);
  CHECK(why);
}

TEST_CASE("simulate --json names the Megatron flags it accepts but does not model") {
  const std::string args = write_temp("unmodelled.args",
                                      "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
                                      "--vocab-size 32000 --micro-batch-size 2 --global-batch-size 64 --bf16 "
                                      "--num-distributed-optimizer-instances 2 --distribute-saved-activations "
                                      "--moe-grouped-gemm --no-gradient-accumulation-fusion "
                                      "--overlap-p2p-communication --lr 3e-4 --seed 1\n")
                               .string();
  const Run r = run("simulate --config " + args + " --gpus 8 --json");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto j = nlohmann::json::parse(r.out);
  const std::vector<std::string> want = {"--distribute-saved-activations", "--moe-grouped-gemm",
                                         "--no-gradient-accumulation-fusion", "--num-distributed-optimizer-instances",
                                         "--overlap-p2p-communication"};
  CHECK(j.at("unmodelled_settings").get<std::vector<std::string>>() == want);
  // A plan file has nothing unmodelled: the field is there, empty.
  const Run p = run("simulate --config " + write_temp("plain.toml", kPlan).string() + " --json");
  REQUIRE_MESSAGE(p.exit_code == 0, p.err);
  CHECK(nlohmann::json::parse(p.out).at("unmodelled_settings").empty());
}

namespace {

// The lines of simulate --json's `assumptions` that start with `key`.
std::vector<std::string> assumed(const nlohmann::json& j, const std::string& key) {
  std::vector<std::string> out;
  for (const auto& a : j.at("assumptions"))
    if (a.get<std::string>().rfind(key, 0) == 0) out.push_back(a.get<std::string>());
  return out;
}

}  // namespace

TEST_CASE("simulate --json lists every setting it resolved from a default under `assumptions`") {
  // Megatron arguments without a micro-batch size, a vocabulary divisor, a GPU count or a cluster:
  // Megatron's divisor 128 pads 32001 to 32256 (128 x tp 2), the micro-batch is resolved as a tuned
  // run picks it, one node of the default cluster is assumed. The unmodelled flags are named too.
  const std::string args = write_temp("assumed.args",
                                      "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
                                      "--vocab-size 32001 --global-batch-size 64 --bf16 --tensor-model-parallel-size 2 "
                                      "--distribute-saved-activations --overlap-p2p-communication\n")
                               .string();
  const Run r = run("simulate --config " + args + " --json");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto j = nlohmann::json::parse(r.out);
  const auto vocab = assumed(j, "--make-vocab-size-divisible-by: not stated; 128: the vocabulary 32001 padded to 32256");
  CHECK(vocab.size() == 1);
  CHECK(assumed(j, "micro_batch not stated: ").size() == 1);
  CHECK(assumed(j, "GPU count: not stated; 8").size() == 1);
  CHECK(assumed(j, "cluster: not stated; h100-sxm-80gb").size() == 1);
  CHECK(j.at("unmodelled_settings").get<std::vector<std::string>>() ==
        std::vector<std::string>{"--distribute-saved-activations", "--overlap-p2p-communication"});
  // Stated, nothing is assumed of them: the same file with the divisor, the micro-batch, --gpus, --cluster.
  const std::string stated = write_temp("stated.args",
                                        "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
                                        "--vocab-size 32001 --global-batch-size 64 --bf16 --tensor-model-parallel-size 2 "
                                        "--micro-batch-size 2 --make-vocab-size-divisible-by 128\n")
                                 .string();
  const Run s = run("simulate --config " + stated + " --gpus 8 --cluster h100-sxm-80gb --json");
  REQUIRE_MESSAGE(s.exit_code == 0, s.err);
  CHECK(nlohmann::json::parse(s.out).at("assumptions").empty());

  // torchtitan with pipeline stages and no micro-batch size: torchtitan's default 1 (from the
  // framework-defaults table, with its source), and its uneven default split of 32 layers + the
  // embedding and output over 4 stages (8, 9, 8, 7).
  const std::string titan = write_temp("pp.toml",
                                       "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[training]\nlocal_batch_size = 8\n"
                                       "seq_len = 4096\n[parallelism]\npipeline_parallel_degree = 4\n"
                                       "data_parallel_shard_degree = 2\npipeline_parallel_layers_per_stage = 9\n")
                                .string();
  const Run t = run("simulate --config " + titan + " --gpus 8 --cluster h100-sxm-80gb --json");
  REQUIRE_MESSAGE(t.exit_code == 0, t.err);
  const auto tj = nlohmann::json::parse(t.out);
  const auto mb = assumed(tj, "parallelism.pipeline_parallel_microbatch_size: not stated; 1: 8 micro-batches");
  REQUIRE(mb.size() == 1);
  CHECK(mb[0].find("238fa9953e4a") != std::string::npos);
  CHECK(assumed(tj, "parallelism.pipeline_parallel_first_stage_less_layers: not stated; 1, stages of 8, 9, 8, 7").size() == 1);

  // A plan TOML for Megatron on pp 3 with 32 layers and no split: the layout Megatron needs,
  // inferred (ceil(32 / 3) = 11: 11, 11, 10) and said.
  const std::string plan = write_temp("pp3.toml",
                                      "[model]\nname = \"llama3.1-8b\"\n[cluster]\ngpus = 24\nprofile = \"h100-sxm-80gb\"\n"
                                      "[layout]\npp = 3\ndp_replicate = 8\n[sharding]\nstrategy = \"zero1\"\n"
                                      "[batch]\nseq_len = 4096\nglobal_batch = 48\nmicro_batch = 1\n"
                                      "[runtime]\nname = \"megatron\"\n")
                               .string();
  const Run p = run("simulate --config " + plan + " --json");
  REQUIRE_MESSAGE(p.exit_code == 0, p.err);
  const auto pj = nlohmann::json::parse(p.out);
  const auto layout = assumed(pj, "layout.pipeline_layout: not stated; 32 layers on pp 3 x vpp 1");
  REQUIRE(layout.size() == 1);
  CHECK(layout[0].find("\"Et*11|t*11|t*10L\"") != std::string::npos);
  std::vector<int> layers;
  for (const auto& st : pj.at("stages")) layers.push_back(st.at("layers").get<int>());
  CHECK(layers == std::vector<int>{11, 11, 10});
}

namespace {

// The llm-foundry 70B example with its Hugging Face id replaced by one meshplan does not ship.
std::string foundry_with_unshipped_id() {
  std::string t = read_file(data_root() / "plans" / "examples" / "llama3.1-70b-64xh100-foundry.yaml");
  const std::string id = "pretrained_model_name_or_path: meta-llama/Llama-3.1-70B";
  const auto pos = t.find(id);
  REQUIRE(pos != std::string::npos);
  t.replace(pos, id.size(), "pretrained_model_name_or_path: my-org/my-llama");
  return write_temp("my-llama.yaml", t).string();
}

}  // namespace

TEST_CASE("--model overrides the config's model in every command, also where the config's own model is unknown") {
  const std::string cfg = foundry_with_unshipped_id();
  // Without --model: the importer's one-line refusal, exit 2.
  check_one_line_error("memory --config " + cfg + " --gpus 64", "my-org/my-llama");
  for (const std::string cmd : {"memory", "simulate", "lint", "whatif --vary fsdp_config.mixed_precision=PURE,DEFAULT"}) {
    CAPTURE(cmd);
    const Run r = run(cmd + " --config " + cfg + " --gpus 64 --model llama3.1-70b --json");
    CAPTURE(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.err.find("not a model meshplan ships") == std::string::npos);
    CHECK(r.out.find("llama3.1-70b") != std::string::npos);
  }
  // The override gives the numbers of the shipped id it stands for.
  const Run a = run("memory --config " + cfg + " --gpus 64 --model llama3.1-70b --json");
  const Run b = run("memory --config " + example("llama3.1-70b-64xh100-foundry.yaml") + " --gpus 64 --json");
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  CHECK(nlohmann::json::parse(a.out).at("stages")[0].at("peak_bytes") ==
        nlohmann::json::parse(b.out).at("stages")[0].at("peak_bytes"));
}

// torchtitan's Llama-3.1-8B example at local batch 2 on 8 H100 80GB: its allocations with the CUDA
// context and NCCL buffers fit (67.4 GiB), its peak with the caching allocator's usual 20 % reserve
// does not (80.7 GiB of 79.65). It runs, as such runs do, with cudaMalloc retries: exit 0, `fits`
// true, `tight` true, a warning from lint instead of an error.
TEST_CASE("a step that fits only without the allocator's reserve is tight: it fits, and says so") {
  const std::string cfg = example("torchtitan-llama3.1-8b-8xh100.toml");
  const Run mem = run("memory --config " + cfg + " --json");
  CHECK(mem.exit_code == 0);
  const auto m = nlohmann::json::parse(mem.out);
  CHECK(m.at("fits") == true);
  CHECK(m.at("tight") == true);
  const double gib = 1024.0 * 1024 * 1024;
  CHECK(m.at("needed_bytes").get<double>() / gib == doctest::Approx(67.37).epsilon(0.001));
  CHECK(m.at("headroom_bytes").get<double>() < 0);
  const Run sim = run("simulate --config " + cfg + " --json");
  CHECK(sim.exit_code == 0);
  const auto s = nlohmann::json::parse(sim.out);
  CHECK(s.at("fits") == true);
  CHECK(s.at("tight") == true);
  CHECK(s.at("needed_bytes").get<double>() < s.at("gpu_memory_bytes").get<double>());
  CHECK(s.at("peak_bytes").get<double>() > s.at("gpu_memory_bytes").get<double>());
  CHECK(run("simulate --config " + cfg).out.find("fits: yes, but tight:") != std::string::npos);
  const Run lint = run("lint --config " + cfg);
  CHECK(lint.out.find("warning fits only without the caching allocator's usual reserve") != std::string::npos);
  CHECK(lint.out.find("does not fit") == std::string::npos);
  // whatif from local batch 1 (50.2 GiB with the reserve) to 2: its row and its explanation say so.
  const Run w = run("whatif --config " + cfg + " --vary training.local_batch_size=1,2");
  CHECK(w.exit_code == 0);
  CHECK(w.out.find("tight") != std::string::npos);
  CHECK(w.out.find("now fits in 79.65 GiB only without the caching allocator's usual reserve") != std::string::npos);
  const auto wj = nlohmann::json::parse(run("whatif --config " + cfg + " --vary training.local_batch_size=1,2 --json").out);
  CHECK(wj.at("variants").at(0).at("tight") == false);
  CHECK(wj.at("variants").at(1).at("tight") == true);
  CHECK(wj.at("variants").at(1).at("fits") == true);
}

TEST_CASE("simulate says when the step does not fit: `fits` in --json, exit 3, as memory") {
  const std::string cfg = example("llama3.1-70b-64xh100-foundry.yaml");
  // 8 GPUs: FULL_SHARD of 70B over one node, ~198 GiB on an 80 GiB H100.
  const Run small = run("simulate --config " + cfg + " --gpus 8 --json");
  CHECK(small.exit_code == 3);
  const auto j = nlohmann::json::parse(small.out);
  CHECK(j.at("fits") == false);
  CHECK(j.at("peak_bytes").get<double>() > j.at("gpu_memory_bytes").get<double>());
  CHECK(j.at("peak_bytes").get<double>() / (1024.0 * 1024 * 1024) == doctest::Approx(197.92).epsilon(0.001));
  CHECK(j.at("gpu_memory_bytes").get<double>() / (1024.0 * 1024 * 1024) == doctest::Approx(79.65).epsilon(0.001));
  const Run text = run("simulate --config " + cfg + " --gpus 8");
  CHECK(text.exit_code == 3);
  CHECK(text.out.find("fits: NO, stage 0 peaks at") != std::string::npos);
  // 64 GPUs, as the file is written for: fits, exit 0, no such line.
  const Run full = run("simulate --config " + cfg + " --gpus 64 --json");
  CHECK(full.exit_code == 0);
  CHECK(nlohmann::json::parse(full.out).at("fits") == true);
  CHECK(run("simulate --config " + cfg + " --gpus 64").out.find("fits: NO") == std::string::npos);
  // One name for one quantity: comm_bytes_per_step as whatif calls it, beside comm_bytes.
  const auto f = nlohmann::json::parse(full.out);
  CHECK(f.at("comm_bytes_per_step") == f.at("comm_bytes"));
}

TEST_CASE("simulate --config bundle/launch.sh reads the launch scripts meshplan writes, on their GPU count") {
  for (const std::string rt : {"torchtitan", "llm-foundry", "megatron"}) {
    CAPTURE(rt);
    const fs::path dir = fs::temp_directory_path() / ("meshplan_cli_test." + std::to_string(::getpid())) / ("bundle-" + rt);
    fs::remove_all(dir);
    const Run p = run("plan --model llama3.1-70b --gpus 64 --global-batch-tokens 4Mi --simulate-budget 4 --runtime " + rt +
                      " --json --out " + dir.string());
    REQUIRE(p.exit_code == 0);
    const double planned = nlohmann::json::parse(p.out).at("plans")[0].at("tokens_per_s_per_gpu").get<double>();
    // No --gpus: the script's launcher (torchrun --nnodes 8 --nproc_per_node 8, composer --world_size 64) says it.
    const Run s = run("simulate --json --config " + (dir / "launch.sh").string());
    CAPTURE(s.err);
    REQUIRE(s.exit_code == 0);
    const auto j = nlohmann::json::parse(s.out);
    CHECK(j.at("n_gpus") == 64);
    CHECK(j.at("tokens_per_s_per_gpu").get<double>() == doctest::Approx(planned).epsilon(0.005));
    for (const auto& w : j.at("warnings")) CHECK(w.get<std::string>().find("assuming one node") == std::string::npos);
    CHECK(run("memory --config " + (dir / "launch.sh").string()).exit_code == 0);
  }
  // The single-node bundle: torchrun --nproc_per_node=8.
  const Run one = run("simulate --json --config " + (data_root() / "plans" / "llama3.1-8b-8xh100" / "launch.sh").string());
  REQUIRE(one.exit_code == 0);
  CHECK(nlohmann::json::parse(one.out).at("n_gpus") == 8);
  // A script whose config cannot be located without running it: one line naming it, exit 2.
  const std::string bad = write_temp("bad_launch.sh", "#!/bin/bash\ntorchrun --nproc_per_node=8 -m torchtitan.train "
                                                      "--job.config_file \"$CONFIG_DIR/x.toml\" \"$@\"\n")
                              .string();
  check_one_line_error("simulate --config " + bad, "CONFIG_DIR");
  CHECK(run("simulate --config " + bad).exit_code == 2);
}

TEST_CASE("whatif: one bad value among good ones is bad input too: the table, the error named, exit 2") {
  const std::string cfg = example("llama3.1-70b-64xh100-foundry.yaml");
  const Run mixed = run("whatif --config " + cfg + " --gpus 64 --vary fsdp_config.mixed_precision=PURE,BOGUS");
  CHECK(mixed.exit_code == 2);
  CHECK(mixed.out.find("tokens/s/GPU") != std::string::npos);  // the good variant is still shown
  CHECK(mixed.err.find("variant #2 (fsdp_config.mixed_precision=BOGUS)") != std::string::npos);
  CHECK(mixed.err.find("BOGUS") != std::string::npos);
  // As for the bad value alone.
  CHECK(run("whatif --config " + cfg + " --gpus 64 --vary fsdp_config.mixed_precision=BOGUS").exit_code == 2);
  CHECK(run("whatif --config " + cfg + " --gpus 64 --vary fsdp_config.mixed_precision=PURE,DEFAULT").exit_code == 0);
}

TEST_CASE("capacity: a deadline nothing meets stars no row; the closest is marked as such") {
  // 15T tokens of 405B in 10 days: 512 sequences cap the run at 32,768 GPUs, 61 days.
  const std::string args = "capacity --model llama3.1-405b --tokens 15T --deadline 10d --simulate-budget 2";
  const Run t = run(args);
  CHECK(t.exit_code == 3);
  CHECK(t.err.find("no answer") != std::string::npos);
  CHECK(t.out.find("\n* ") == std::string::npos);
  CHECK(t.out.find("* the answer") == std::string::npos);
  CHECK(t.out.find("\n~ h100-sxm-80gb") != std::string::npos);
  CHECK(t.out.find("~ no answer: no GPU count meets the deadline") != std::string::npos);
  const Run j = run(args + " --json");
  CHECK(j.exit_code == 3);
  CHECK(nlohmann::json::parse(j.out).at("answered") == false);
  // A deadline that is met: its row starred, answered.
  const Run ok = run("capacity --model llama3.1-8b --tokens 1T --deadline 60d --simulate-budget 2 --json");
  CHECK(ok.exit_code == 0);
  CHECK(nlohmann::json::parse(ok.out).at("answered") == true);
}

TEST_CASE("calibrate --fit checks --out's folder before it fits") {
  const std::string fx = (data_root() / "tests" / "calibrate" / "data" / "model_generated_h100.json").string();
  const std::string out = (fs::temp_directory_path() / ("meshplan_cli_test." + std::to_string(::getpid())) / "no" / "such" / "x.toml").string();
  const Run r = run("calibrate --fit " + fx + " --base h100-sxm-80gb --out " + out);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("does not exist") != std::string::npos);
  CHECK(r.out.empty());  // no fit report: nothing was fitted
  check_one_line_error("calibrate --fit " + fx + " --base h100-sxm-80gb --out " + out, "--out");
  // The same for a trace that a simulation would fill.
  const Run s = run("simulate --config " + example("llama3.1-8b-fsdp-h100.toml") + " --trace " + out);
  CHECK(s.exit_code == 2);
  CHECK(s.out.empty());
}

TEST_CASE("names: plan --json says what was asked; one name per quantity; both runtime spellings; ep on the layout line") {
  // plan --json: the model, cluster and GPU count under the names simulate uses.
  const Run p = run("plan --model llama3.1-8b --gpus 8 --global-batch-tokens 1Mi --simulate-budget 2 --json");
  REQUIRE(p.exit_code == 0);
  const auto pj = nlohmann::json::parse(p.out);
  CHECK(pj.at("model") == "llama3.1-8b");
  CHECK(pj.at("cluster") == "h100-sxm-80gb");
  CHECK(pj.at("n_gpus") == 8);
  CHECK(pj.at("runtime") == "torchtitan");
  // --runtime takes the plan TOML's names too, for the same search.
  const Run p2 = run("plan --model llama3.1-8b --gpus 8 --global-batch-tokens 1Mi --simulate-budget 2 --json "
                     "--runtime torchtitan-fsdp2");
  REQUIRE(p2.exit_code == 0);
  CHECK(nlohmann::json::parse(p2.out).at("plans") == pj.at("plans"));
  check_one_line_error("plan --model llama3.1-8b --gpus 8 --global-batch 16 --runtime composer-fsdp2", "--runtime");
  // A plan TOML takes the CLI's name: runtime.name = "torchtitan" is torchtitan-fsdp2.
  std::string t = kPlan;
  t += "[runtime]\nname = \"torchtitan\"\n";
  std::string u = kPlan;
  u += "[runtime]\nname = \"torchtitan-fsdp2\"\n";
  const Run a = run("simulate --json --config " + write_temp("rt_cli_name.toml", t).string());
  const Run b = run("simulate --json --config " + write_temp("rt_toml_name.toml", u).string());
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  CHECK(nlohmann::json::parse(a.out).at("step_time_s") == nlohmann::json::parse(b.out).at("step_time_s"));
  // whatif carries simulate's comm_bytes beside its comm_bytes_per_step.
  const Run w = run("whatif --json --config " + example("mpt-7b-8gpu-pure-ac.yaml") +
                    " --cluster a100-80gb --vary fsdp_config.mixed_precision=PURE,DEFAULT");
  REQUIRE(w.exit_code == 0);
  const auto wj = nlohmann::json::parse(w.out);
  for (const auto& v : wj.at("variants")) {
    CHECK_FALSE(v.at("comm_bytes").empty());
    CHECK(v.at("comm_bytes") == v.at("comm_bytes_per_step"));
  }
  // simulate's layout line names ep for an MoE model.
  const Run m = run("simulate --config " + example("plan-mixtral-8x7b-ep8-64gpu.toml") + " --cluster h100-sxm-80gb");
  REQUIRE(m.exit_code == 0);
  CHECK(m.out.find("layout      pp 1 x dp_replicate 32 x dp_shard 1 x cp 1 x tp 2, ep 8; megatron zero1") !=
        std::string::npos);
}

TEST_CASE("plan: rows that differ only in precision say so; a Megatron why line never calls ZeRO-1 FSDP") {
  const Run f = run("plan --model llama3.1-70b --gpus 64 --global-batch-tokens 4Mi --runtime llm-foundry --top 10");
  REQUIRE(f.exit_code == 0);
  CHECK(f.out.find(" precision ") != std::string::npos);
  // Each row's label (layout to AC, the columns before the numbers) is distinct.
  std::set<std::string> labels;
  std::istringstream in(f.out);
  int rows = 0;
  std::size_t label_end = std::string::npos;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("rank  layout", 0) == 0) label_end = line.find(" AC ") + 1 + 14;
    if (label_end == std::string::npos || line.size() < label_end || !std::isdigit(static_cast<unsigned char>(line[3])))
      continue;
    CAPTURE(line);
    CHECK(labels.insert(line.substr(6, label_end - 6)).second);
    ++rows;
  }
  CHECK(rows == 10);
  CHECK(f.out.find("PURE") != std::string::npos);
  CHECK(f.out.find("DEFAULT") != std::string::npos);
  // Megatron's distributed optimizer shards optimizer state, no parameters: no "FSDP over" in why.
  const Run m = run("plan --model llama3.1-70b --gpus 256 --global-batch-tokens 4Mi --runtime megatron");
  REQUIRE(m.exit_code == 0);
  const auto why = m.out.find("\nwhy: ");
  REQUIRE(why != std::string::npos);
  const std::string line = m.out.substr(why, m.out.find('\n', why + 1) - why);
  CAPTURE(line);
  CHECK(line.find("CP") != std::string::npos);  // the winner has cp > 1, which the old rule counted as FSDP ranks
  CHECK(line.find("FSDP over") == std::string::npos);
  // No layout: the pipeline rule as the planner applies it (126 layers on 16 stages is a layout).
  const Run none = run("plan --model llama3.1-405b --gpus 65536 --global-batch 7");
  CHECK(none.exit_code == 3);
  CHECK(none.out.find("pp splitting the 126 layers evenly (or, with the embedding and the head counted as a layer "
                      "each, 126 + 2)") != std::string::npos);
  CHECK(none.out.find("pp dividing") == std::string::npos);
}

TEST_CASE("a config that states its world size runs on it; otherwise the first line says the GPU count was assumed") {
  const std::string foundry = example("llama3.1-70b-64xh100-foundry.yaml");
  // No count anywhere (the file name is not one): one node, said on the first line of every report.
  for (const std::string cmd : {"memory", "simulate", "lint", "whatif --vary fsdp_config.mixed_precision=PURE,DEFAULT"}) {
    CAPTURE(cmd);
    const Run r = run(cmd + " --config " + foundry);
    const std::string first = r.out.substr(0, r.out.find('\n'));
    CHECK(first.find("8 GPUs ASSUMED: no GPU count in the config or --gpus") != std::string::npos);
    const Run g = run(cmd + " --config " + foundry + " --gpus 64");
    CHECK(g.out.find("ASSUMED") == std::string::npos);
  }
  CHECK(nlohmann::json::parse(run("memory --json --config " + foundry).out).at("n_gpus_assumed") == true);
  CHECK(nlohmann::json::parse(run("simulate --json --config " + foundry + " --gpus 64").out).at("n_gpus_assumed") == false);
  CHECK(nlohmann::json::parse(run("lint --json --config " + foundry).out).at("assumed_gpus") == 8);
  // llm-foundry's logged config states it: n_gpus, or device_train_batch_size (256 / 4 = 64).
  const std::string text = read_file(foundry);
  for (const std::string extra : {"n_gpus: 64\n", "device_train_batch_size: 4\n"}) {
    CAPTURE(extra);
    const Run r = run("simulate --json --config " + write_temp("stated.yaml", text + extra).string());
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j.at("n_gpus") == 64);
    CHECK(j.at("n_gpus_assumed") == false);
    CHECK(j.at("fits") == true);
  }
  check_one_line_error("memory --config " + write_temp("bad_device.yaml", text + "device_train_batch_size: 3\n").string(),
                       "device_train_batch_size");
  check_one_line_error("memory --config " + write_temp("n_gpus_clash.yaml", text + "n_gpus: 64\n").string() + " --gpus 8",
                       "n_gpus");
  // A torchtitan mesh whose degrees multiply to 64 (no -1) is 64 GPUs.
  std::string tt = read_file(data_root() / "plans" / "examples" / "torchtitan-llama3.1-70b-tp8-64gpu-mid2025.toml");
  const auto pos = tt.find("data_parallel_shard_degree = -1");
  REQUIRE(pos != std::string::npos);
  tt.replace(pos, 31, "data_parallel_shard_degree = 8");
  const Run t = run("memory --json --config " + write_temp("tt64.toml", tt).string());
  CHECK(nlohmann::json::parse(t.out).at("n_gpus") == 64);
  CHECK(nlohmann::json::parse(t.out).at("n_gpus_assumed") == false);
}

TEST_CASE("plan draws its progress bar only on a terminal: no \\r frames in a pipe or a log") {
  // Several seconds of simulation (the bar used to start after one), stderr to a file.
  const auto t0 = std::chrono::steady_clock::now();
  const Run r = run("plan --model llama3.1-405b --gpus 1024 --global-batch-tokens 16Mi --simulate-budget 6 --threads 1");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(r.exit_code == 0);
  CHECK(seconds > 1.0);
  CHECK(r.err.find('\r') == std::string::npos);
  CHECK(r.err.find("simulating plans") == std::string::npos);
}

TEST_CASE("lint names the largest terms of a peak that does not fit, and says when a model family cannot be read") {
  if (!meshplan::test::have_shared()) return;  // the shared examples are not in the repository
  const std::string mpt70 = (meshplan::test::shared_root() / "examples" / "llm-foundry" / "mpt-70b.yaml").string();
  const Run r = run("lint --config " + mpt70);
  const auto at = r.out.find("(largest terms: ");
  REQUIRE(at != std::string::npos);
  const std::string terms = r.out.substr(at, r.out.find(')', at) - at);
  CAPTURE(terms);
  CHECK(terms.find("0.00 GiB") == std::string::npos);
  CHECK(terms.rfind("(largest terms: optimizer 90.61 GiB", 0) == 0);
  // DBRX (model_type dbrx): not a family meshplan reads, so a config.json would not help.
  const std::string dbrx = (meshplan::test::shared_root() / "examples" / "llm-foundry" / "dbrx-full-ft.yaml").string();
  const Run d = run("lint --config " + dbrx);
  CHECK(d.exit_code == 1);
  CHECK(d.out.find("'databricks/dbrx-instruct' is not a model meshplan ships, and its name is none of the families "
                   "meshplan reads") != std::string::npos);
  CHECK(d.out.find("meshplan cannot model it") != std::string::npos);
  // A family meshplan reads still gets the config.json hint.
  check_one_line_error("memory --config " + foundry_with_unshipped_id() + " --gpus 64",
                       "'my-org/my-llama' is not a model meshplan ships; pass --model path/to/config.json");
}

TEST_CASE("plan searches llm-foundry's backward_prefetch: the BACKWARD_PRE lint finds faster is in the search") {
  // lint on the 70B llm-foundry example: BACKWARD_PRE simulates faster at the same peak than
  // Composer's BACKWARD_POST default; the planner's winner has it.
  const Run p = run("plan --model llama3.1-70b --gpus 64 --global-batch-tokens 4Mi --runtime llm-foundry --json");
  REQUIRE(p.exit_code == 0);
  const auto j = nlohmann::json::parse(p.out);
  CHECK(j.at("plans")[0].at("backward_prefetch") == "BACKWARD_PRE");
  bool post = false;
  for (const auto& row : j.at("plans")) post = post || row.at("backward_prefetch") == "BACKWARD_POST";
  CHECK(post);  // both were simulated
  const Run l = run("lint --config " + example("llama3.1-70b-64xh100-foundry.yaml") + " --gpus 64");
  CHECK(l.out.find("fsdp_config.backward_prefetch=BACKWARD_PRE") != std::string::npos);
}

TEST_CASE("calibrate --runs on training logs, then simulate with the fitted profile reproduces each log") {
  const fs::path logs = data_root() / "tests" / "report" / "data" / "logs";
  const fs::path out = write_temp("fitted-logs.toml", "").parent_path() / "fitted-logs.toml";
  fs::remove(out);
  const Run fit = run("calibrate --runs " + (logs / "runs.toml").string() + " --out " + out.string() + " --json");
  CAPTURE(fit.err);
  REQUIRE(fit.exit_code == 0);
  const auto j = nlohmann::json::parse(fit.out);
  CHECK(j["runs_compared"] == 3);
  CHECK(j["parameters"][0]["name"] == "elementwise_fraction");
  // The logs' steady throughput (make_logs.py) per config, through `simulate --cluster OUT`.
  const std::vector<std::pair<std::string, double>> runs = {
      {(logs / "torchtitan-llama3.1-8b.toml").string(), 6697},
      {(data_root() / "plans" / "examples" / "mpt-7b-8gpu-pure-ac.yaml").string(), 8277.7},
      {(logs / "megatron-llama3.1-8b-tp2.args").string(), 8184.32}};
  for (const auto& run_and_log : runs) {
    const std::string config = run_and_log.first;  // a named copy: clang 14 cannot CAPTURE a structured binding
    const double logged = run_and_log.second;
    CAPTURE(config);
    const Run sim = run("simulate --config " + config + " --cluster " + out.string() + " --gpus 8 --json");
    REQUIRE(sim.exit_code == 0);
    const double tps = nlohmann::json::parse(sim.out)["tokens_per_s_per_gpu"].get<double>();
    CHECK(std::fabs(tps / logged - 1) < 0.02);
  }
  // One log needs the config it ran.
  check_one_line_error("calibrate --runs " + (logs / "torchtitan.log").string(), "--config");
  // simulate --log: the log's steady throughput is the observation the gap is explained against.
  const std::string megatron = "simulate --config " + (logs / "megatron-llama3.1-8b-tp2.args").string() + " --log " +
                               (logs / "megatron.log").string();
  const Run gap = run(megatron + " --gpus 8 --json");
  REQUIRE(gap.exit_code == 0);
  const auto g = nlohmann::json::parse(gap.out);
  REQUIRE(g.contains("diagnosis"));
  CHECK(g["diagnosis"]["observed_tokens_per_s_per_gpu"].get<double>() == doctest::Approx(8184.32).epsilon(0.0005));
  check_one_line_error(megatron + " --gpus 16", "line 1");
}

TEST_CASE("kernel --grouped-gemm: one grouped launch over the groups' own rows, schedule 'grouped'") {
  // measure_shapes.py's skewed 2048 tokens over 8 gpt-oss experts, up projection: 11 cluster steps
  // x 2 x 23 = 506 tiles, 4 waves on the H200's 132 SMs (tests/cost: by hand).
  const Run r = run("kernel --cluster h200-141gb --grouped-gemm 464,336,272,240,208,192,176,160x5760x2880 --json");
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["schedule"] == "grouped");
  CHECK(j["tiles"] == 506);
  CHECK(j["waves"] == 4);
  CHECK(j["flops"].get<double>() == doctest::Approx(2.0 * 2048 * 5760 * 2880));
  const Run bad = run("kernel --grouped-gemm 128,x5760x2880");
  CHECK(bad.exit_code == 2);
}

// Issue 32 item 6: a prediction above the highest MFU the published runs of its runtime, GPU,
// model kind and recipe reached is named (docs/validation.md, "Validated MFU envelope"). The
// shipped torchtitan 8B example on H200 predicts 50 % where torchtitan's validated Hopper dense runs
// reach 40 %.
TEST_CASE("simulate names an MFU above what the published runs reached, in text and JSON") {
  const std::string cfg = example("torchtitan-llama3.1-8b-8xh100.toml") + " --cluster h200-141gb";
  const Run t = run("simulate --config " + cfg);
  REQUIRE_MESSAGE(t.exit_code == 0, t.err);
  CHECK(t.out.find("is above every published torchtitan-fsdp2 run on sm90 that meshplan was validated on") !=
        std::string::npos);
  const Run r = run("simulate --config " + cfg + " --json");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j.at("beyond_validated_mfu").get<bool>());
  CHECK(j.at("mfu").get<double>() > j.at("validated_mfu_max").get<double>());
  // Within the envelope: no line, the field false. Megatron's 405B example predicts 39.6 % of 47.6 %.
  const std::string within = example("plan-llama3.1-405b-megatron-pp16-vpp8.toml");
  const Run w = run("simulate --config " + within);
  REQUIRE_MESSAGE(w.exit_code == 0, w.err);
  CHECK(w.out.find("validated on") == std::string::npos);
  const auto wj = nlohmann::json::parse(run("simulate --config " + within + " --json").out);
  CHECK_FALSE(wj.at("beyond_validated_mfu").get<bool>());
  CHECK(wj.at("validated_mfu_max").get<double>() == doctest::Approx(0.476).epsilon(0.01));
}

// lint names the expert all-to-all overlap a Megatron MoE run leaves off where Megatron-Core would
// accept it, with the simulated difference; a run that has it on, or dense, gets no such line.
TEST_CASE("lint suggests Megatron-Core's expert all-to-all overlap with its simulated effect") {
  const Run r = run("lint -c " + example("plan-mixtral-8x7b-ep8-64gpu.toml"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find("info    runtime.moe_a2a_overlap: ") != std::string::npos);
  CHECK(r.out.find("simulated with runtime.moe_a2a_overlap=true: tokens/s/GPU ") != std::string::npos);
  std::string on = read_file(example("plan-mixtral-8x7b-ep8-64gpu.toml"));
  const auto at = on.find("name = \"megatron\"");
  REQUIRE(at != std::string::npos);
  on.insert(at + std::string("name = \"megatron\"").size(), "\nmoe_a2a_overlap = true");
  const Run o = run("lint -c " + write_temp("overlap.toml", on).string());
  REQUIRE_MESSAGE(o.exit_code == 0, o.err);
  CHECK(o.out.find("moe_a2a_overlap") == std::string::npos);
  CHECK(run("lint -c " + example("plan-llama3.1-70b-pp4-tp8.toml")).out.find("moe_a2a_overlap") == std::string::npos);
}
