// Catalogued bad inputs (files and arguments) from the reliability audit (issue 20) and the
// new-user report (issue 19 items 1, 12-14, 16): each one is refused with exit code 2 and one line
// on stderr naming the file or flag, the key and the reason; counts above their documented
// maximum (docs/limits.md) are refused at once; written files are all-or-nothing.
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../test_paths.hpp"
#include "cli/flag_ranges.hpp"

namespace fs = std::filesystem;
using meshplan::test::data_root;
using meshplan::test::meshplan_bin;

namespace {

struct Run {
  int exit_code = -1;
  std::string out, err;
  double seconds = 0;
};

fs::path scratch() {
  static const fs::path d = [] {
    const fs::path p = fs::temp_directory_path() / ("meshplan_limits_test_" + std::to_string(::getpid()));
    fs::remove_all(p);
    fs::create_directories(p);
    return p;
  }();
  return d;
}

// `prefix` goes before the binary ("timeout 20 " where a regression would hang).
Run run(const std::string& args, const fs::path& cwd = {}, const std::string& prefix = "") {
  const fs::path err_file = scratch() / "stderr.txt";
  std::string cmd = prefix + meshplan_bin().string() + " " + args + " 2>" + err_file.string();
  if (!cwd.empty()) cmd = "cd " + cwd.string() + " && " + cmd;
  Run r;
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), static_cast<int>(buf.size()), p) != nullptr) r.out += buf.data();
  const int status = pclose(p);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream f(err_file);
  r.err.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return r;
}

std::string write(const std::string& name, const std::string& text) {
  const fs::path p = scratch() / name;
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto pos = text.find(from);
  REQUIRE_MESSAGE(pos != std::string::npos, from);
  text.replace(pos, from.size(), to);
  return text;
}

std::string example(const std::string& name) { return read(data_root() / "plans" / "examples" / name); }
std::string corpus(const std::string& target, const std::string& name) {
  return (data_root() / "tests" / "fuzz" / "corpus" / target / name).string();
}

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

const char* kInline = R"([model]
name = "inline"
n_layers = 24
d_model = 2048
n_heads = 16
ffn_hidden = 8192
mlp = "gelu"
vocab = 50368
pos_emb = "learned"
max_seq_len = 2048
norm = "layernorm"
[cluster]
gpus = 8
[layout]
dp_shard = 8
[batch]
seq_len = 2048
global_batch = 64
micro_batch = 1
)";

struct Case {
  std::string args;
  std::vector<std::string> needles;  // the file or flag, the key, the reason (each must appear)
  std::string prefix = {};           // before the binary (run's `prefix`)
};

Run check_case(const Case& c) {
  CAPTURE(c.args);
  const Run r = run(c.args, {}, c.prefix);
  CAPTURE(r.err);
  CHECK(r.exit_code == 2);
  std::string err = r.err;
  while (!err.empty() && err.back() == '\n') err.pop_back();
  REQUIRE_FALSE(err.empty());
  CHECK(err.find('\n') == std::string::npos);
  CHECK(err.size() < 600);  // one readable line, not a 400-digit echo or a repeated message
  for (const auto& n : c.needles) CHECK_MESSAGE(err.find(n) != std::string::npos, n);
  return r;
}

}  // namespace

TEST_CASE("catalogued bad inputs: exit 2, one line naming the file or flag, the key and the reason") {
  const std::string plan = write("plan.toml", kPlan);
  auto plan_with = [&](const std::string& name, const std::string& from, const std::string& to) {
    return write(name, replaced(kPlan, from, to));
  };
  auto inline_with = [&](const std::string& name, const std::string& from, const std::string& to) {
    return write(name, replaced(kInline, from, to));
  };
  const std::string yaml = example("mpt-7b-8gpu-pure-ac.yaml");
  auto yaml_with = [&](const std::string& name, const std::string& from, const std::string& to) {
    return write(name, replaced(yaml, from, to));
  };
  const std::string titan = example("torchtitan-llama3.1-8b-8xh100.toml");
  auto titan_with = [&](const std::string& name, const std::string& from, const std::string& to) {
    return write(name, replaced(titan, from, to));
  };
  const std::string hf = read(corpus("hf_config", "llama3.1-8b.json"));
  auto hf_with = [&](const std::string& name, const std::string& from, const std::string& to) {
    return write(name, replaced(hf, from, to));
  };
  const std::string nines(400, '9');
  const std::string plan8 = "plan --model llama3.1-8b --gpus 8 ";
  const std::string cap = "capacity --model llama3.1-8b ";
  const std::vector<Case> cases = {
      // ---- flags: counts above the maximum, non-finite and wrapped numbers (findings 4, 6, 7, 9, 10)
      {"topology --gpus 100000000", {"--gpus", "100000000", "maximum 1048576"}},
      {"topology --gpus 99999999999999999999", {"--gpus", "maximum"}},
      {"topology --mesh pp=2,dp_shard=100000000", {"--mesh", "dp_shard", "maximum"}},
      {"topology --mesh dp_shard=65536,tp=65536", {"--mesh", "4294967296", "maximum"}},
      {"topology --mesh pp=2147483647,dp_replicate=2147483647,dp_shard=2147483647,tp=2147483647",
       {"--mesh", "pp", "maximum"}},
      {"topology --mesh pp=99999999999999999999", {"--mesh", "pp", "maximum"}},
      {"layout --gpus 100000000 --dp-shard 100000000", {"--gpus", "maximum"}},
      {"layout --gpus 8 --dp-shard 8 --layers 2000000000", {"--layers", "maximum"}},
      {"layout --gpus 4096 --dp-shard 65536 --tp 65536", {"--dp-shard", "maximum"}},
      {"layout --gpus 8 --pp 99999999999", {"--pp", "maximum"}},
      {"plan --model llama3.1-8b --gpus 2000000 --global-batch 16", {"--gpus", "maximum"}},
      {plan8 + "--global-batch 9223372036854775807", {"--global-batch", "maximum"}},
      {plan8 + "--global-batch 1073741824 --seq 8192", {"--global-batch", "tokens per step"}},
      {plan8 + "--global-batch-tokens inf", {"--global-batch-tokens", "'inf' is not a number"}},
      {plan8 + "--global-batch-tokens 1e30", {"--global-batch-tokens", "maximum"}},
      {plan8 + "--global-batch-tokens nan", {"--global-batch-tokens", "not a number"}},
      {plan8 + "--global-batch-tokens -4M", {"--global-batch-tokens", "positive"}},
      {plan8 + "--global-batch-tokens 4Mx", {"--global-batch-tokens", "suffix 'Mx'"}},
      {plan8 + "--global-batch-tokens 100", {"--global-batch-tokens", "less than one sequence"}},
      {plan8 + "--global-batch-tokens 4M --headroom nan", {"--headroom", "range 0 .. 90 percent"}},
      {plan8 + "--global-batch-tokens 4M --seq 99999999999", {"--seq", "maximum"}},
      {plan8 + "--global-batch 16 --threads 0", {"--threads", "positive"}},
      {cap + "--tokens 1e30 --deadline 60d", {"--tokens", "maximum"}},
      {cap + "--tokens inf --deadline 60d", {"--tokens", "not a number"}},
      {cap + "--tokens 15T --deadline 1e-300d", {"--deadline", "outside one minute"}},
      {cap + "--tokens 15T --deadline inf", {"--deadline", "not a duration"}},
      {cap + "--tokens 15T --deadline 1e300w", {"--deadline", "outside"}},
      {cap + "--tokens 15T --deadline 60x", {"--deadline", "unit 'x'"}},
      {cap + "--tokens 15T --deadline 60d --global-batch-tokens inf", {"--global-batch-tokens", "not a number"}},
      {cap + "--tokens 15T --gpus 99999999999", {"--gpus", "maximum"}},
      {cap + "--tokens 15Q --deadline 60d", {"--tokens", "suffix 'Q'"}},
      {"collective --cluster h100-sxm-80gb --gpus 8 --sizes 1:" + nines, {"--sizes", "maximum"}},
      {"collective --cluster h100-sxm-80gb --gpus 8 --sizes 1K:2P", {"--sizes", "not a size"}},
      {"collective --cluster h100-sxm-80gb --gpus 99999999999 --sizes 1K", {"--gpus", "maximum"}},
      {"collective --cluster h100-sxm-80gb --gpus 8 --gpus-per-node 5000", {"--gpus-per-node", "maximum"}},
      {"kernel --cluster h100-sxm-80gb --gemm 9223372036854775807x8x8", {"--gemm", "M", "maximum"}},
      {"kernel --cluster h100-sxm-80gb --gemm 8x99999999999999999999x8", {"--gemm", "N", "maximum"}},
      {"kernel --cluster h100-sxm-80gb --attention b=1,heads=99999999999,seq=8192,head_dim=128",
       {"--attention", "maximum"}},
      {"kernel --cluster h100-sxm-80gb --attention b=1,heads=8,seq=8192,head_dim=128,causal=0,window=128",
       {"--attention", "window", "causal=1"}},
      {"memory --config " + plan + " --gpus 99999999999", {"--gpus", "maximum"}},
      {"simulate --config " + plan + " --gpus 2000000", {"--gpus", "maximum"}},
      // ---- plan TOML (findings 3, 7, 8, 9)
      {"memory --config " + inline_with("wrap-layers.toml", "n_layers = 24", "n_layers = 4294967320"),
       {"wrap-layers.toml", "model.n_layers", "maximum"}},
      {"memory --config " + inline_with("wrap-heads.toml", "n_heads = 16", "n_heads = 4294967312"),
       {"wrap-heads.toml", "model.n_heads", "maximum"}},
      {"memory --config " + inline_with("wrap-shard.toml", "dp_shard = 8", "dp_shard = 4294967304"),
       {"wrap-shard.toml", "layout.dp_shard", "maximum"}},
      {"simulate --config " + inline_with("layers1e9.toml", "n_layers = 24", "n_layers = 1000000000"),
       {"layers1e9.toml", "model.n_layers", "maximum"}},
      {"model " + inline_with("dmodel.toml", "d_model = 2048", "d_model = 4294967296"), {"dmodel.toml"}},
      {"memory --config " + inline_with("dmodel2.toml", "d_model = 2048", "d_model = 4294967296"),
       {"dmodel2.toml", "model.d_model", "maximum"}},
      {"memory --config " + inline_with("heads15.toml", "n_heads = 16", "n_heads = 15"),
       {"heads15.toml", "model.n_heads", "not divisible"}},
      {"memory --config " + plan_with("gb.toml", "global_batch = 16", "global_batch = 9223372036854775807"),
       {"gb.toml", "batch.global_batch", "maximum"}},
      {"memory --config " + plan_with("ga.toml", "global_batch = 16", "grad_accum = 1048577"),
       {"ga.toml", "batch.grad_accum", "maximum"}},
      {"memory --config " + plan_with("seq.toml", "seq_len = 4096", "seq_len = 99999999999"),
       {"seq.toml", "batch.seq_len", "maximum"}},
      {"simulate --config " + plan_with("seq2.toml", "seq_len = 4096", "seq_len = 99999999999"),
       {"seq2.toml", "batch.seq_len", "maximum"}},
      {"memory --config " + plan_with("mb.toml", "micro_batch = 1", "micro_batch = 1099511627776"),
       {"mb.toml", "batch.micro_batch", "maximum"}},
      {"topology --gpus 8 --mesh pp=0", {"--mesh", "pp", "at least 1"}},
      {"memory --config " +
           plan_with("world.toml", "dp_shard = 8", "pp = 2147483647\ndp_replicate = 2147483647\ncp = 2147483647\ntp = 2147483647"),
       {"world.toml", "layout.pp", "maximum"}},
      {"memory --config " + plan_with("gpus.toml", "gpus = 8", "gpus = 2000000"), {"gpus.toml", "cluster.gpus", "maximum"}},
      {"memory --config " + plan_with("prof.toml", "gpus = 8", "gpus = 8\nprofile = \"h100-typo\""),
       {"prof.toml", "cluster.profile", "'h100-typo'", "no such hardware profile"}},
      {"memory --config " + plan_with("vpp.toml", "dp_shard = 8", "dp_shard = 8\nvpp = 100000"),
       {"vpp.toml", "layout.vpp", "maximum"}},
      {"memory --config " + plan_with("ep.toml", "dp_shard = 8", "dp_shard = 8\nep = 2147483648"),
       {"ep.toml", "layout.ep", "maximum"}},
      {"memory --config " + plan_with("everyn.toml", "[batch]", "[activation_checkpoint]\nmode = \"selective-layer\"\nevery_n = 99999999999\n[batch]"),
       {"everyn.toml", "activation_checkpoint.every_n", "maximum"}},
      {"memory --config " + plan_with("fpl.toml", "[batch]", "[sharding]\nforward_prefetch_limit = 99999999999\n[batch]"),
       {"fpl.toml", "sharding.forward_prefetch_limit", "maximum"}},
      {"memory --config " + plan_with("ppmb.toml", "micro_batch = 1", "micro_batch = 1\npp_microbatches = 1099511627776"),
       {"ppmb.toml", "batch.pp_microbatches", "maximum"}},
      {"memory --config " + inline_with("vocab.toml", "vocab = 50368", "vocab = 1073741824"),
       {"vocab.toml", "model.vocab", "maximum"}},
      {"memory --config " + inline_with("maxseq.toml", "max_seq_len = 2048", "max_seq_len = 99999999999"),
       {"maxseq.toml", "model.max_seq_len", "maximum"}},
      {"memory --config " + inline_with("experts.toml", "vocab = 50368", "vocab = 50368\nmoe_experts = 2147483648"),
       {"experts.toml", "model.moe_experts", "maximum"}},
      {"simulate --config " + plan_with("steps.toml", "global_batch = 16", "global_batch = 65536"),
       {"steps.toml", "batch.grad_accum", "layers x 8192 micro-batches"}},
      {"memory --config " +
           inline_with("params.toml", "n_layers = 24\nd_model = 2048\nn_heads = 16\nffn_hidden = 8192",
                       "n_layers = 4096\nd_model = 1048576\nn_heads = 512\nffn_hidden = 1048576"),
       {"params.toml", "n_layers", "parameters"}},
      // ---- llm-foundry YAML (findings 3, 5, 8, 10; issue 19 item 14)
      {"memory --config " + corpus("foundry_yaml", "billion-laughs.yaml"), {"billion-laughs.yaml", "variables", "expands"}},
      {"memory --config " + corpus("foundry_yaml", "interpolation-bomb.yaml"), {"interpolation-bomb.yaml", "variables", "expands"}},
      {"memory --config " + corpus("foundry_yaml", "interpolation-index-20-digits.yaml"),
       {"interpolation-index-20-digits.yaml", "variables.x", "not defined"}},
      // An anchor holding its own alias is a cycle; refused by depth before the walk overflows.
      {"memory --config " + corpus("foundry_yaml", "alias-cycle-seq.yaml"), {"alias-cycle-seq.yaml", "x", "levels deep"}},
      {"memory --config " + corpus("foundry_yaml", "alias-cycle-map.yaml"), {"alias-cycle-map.yaml", "x", "levels deep"}},
      {"memory --config " + corpus("foundry_yaml", "duplicate-key.yaml"), {"duplicate-key.yaml", "max_seq_len", "duplicate key"}},
      {"memory --config " + yaml_with("layers.yaml", "n_layers: 32", "n_layers: 1000000000"),
       {"layers.yaml", "model.n_layers", "maximum"}},
      {"simulate --config " + yaml_with("seq.yaml", "  max_seq_len: 2048", "  max_seq_len: 99999999999"),
       {"seq.yaml", "max_seq_len", "maximum"}},
      {"memory --config " + write("tp.yaml", replaced(example("mpt-7b-tp2-16gpu.yaml"), "tensor_parallel_degree: 2",
                                                     "tensor_parallel_degree: 4294967297")),
       {"tp.yaml", "tp_config.tensor_parallel_degree", "maximum"}},
      {"memory --config " + yaml_with("shard.yaml", "fsdp_config:", "fsdp_config:\n  data_parallel_shard_degree: 4294967304"),
       {"shard.yaml", "fsdp_config.data_parallel_shard_degree", "maximum"}},
      {"memory --config " + yaml_with("gbs.yaml", "global_train_batch_size: 256", "global_train_batch_size: 4611686018427387904"),
       {"gbs.yaml", "global_train_batch_size", "maximum"}},
      {"memory --config " + yaml_with("fpl.yaml", "fsdp_config:", "fsdp_config:\n  forward_prefetch_limit: 99999999999"),
       {"fpl.yaml", "fsdp_config.forward_prefetch_limit", "maximum"}},
      // ---- torchtitan TOML (finding 8)
      {"memory --config " + titan_with("tp.toml", "tensor_parallel_degree = 1", "tensor_parallel_degree = 4294967297"),
       {"tp.toml", "parallelism.tensor_parallel_degree", "maximum"}},
      {"memory --config " + titan_with("tseq.toml", "seq_len = 8192", "seq_len = 99999999999"),
       {"tseq.toml", "training.seq_len", "maximum"}},
      {"memory --config " + titan_with("local.toml", "local_batch_size = 2", "local_batch_size = 9223372036854775807"),
       {"local.toml", "training.local_batch_size", "maximum"}},
      {"memory --config " + titan_with("lps.toml", "pipeline_parallel_degree = 1",
                                      "pipeline_parallel_degree = 2\n"
                                      "pipeline_parallel_layers_per_stage = 9223372036854775807"),
       {"lps.toml", "parallelism.pipeline_parallel_layers_per_stage", "maximum"}},
      {"memory --config " + titan_with("tshard.toml", "data_parallel_shard_degree = -1", "data_parallel_shard_degree = 2000000"),
       {"tshard.toml", "parallelism.data_parallel_shard_degree", "maximum"}},
      // ---- Hugging Face config.json (findings 1, 3, 10)
      {"model " + hf_with("hidden.json", "\"hidden_size\": 4096", "\"hidden_size\": 4294967296"),
       {"hidden.json", "hidden_size", "maximum"}},
      {"model " + hf_with("hidden31.json", "\"hidden_size\": 4096", "\"hidden_size\": 2147483648"),
       {"hidden31.json", "hidden_size", "maximum"}},
      {"model " + hf_with("layers.json", "\"num_hidden_layers\": 32", "\"num_hidden_layers\": 1000000000"),
       {"layers.json", "n_layers", "maximum"}},
      {"model " + corpus("hf_config", "number-overflow-400-digits.json"), {"number-overflow-400-digits.json", "out of range"}},
      {"plan --gpus 8 --global-batch 16 --model " + hf_with("hidden2.json", "\"hidden_size\": 4096", "\"hidden_size\": 4294967296"),
       {"hidden2.json", "hidden_size", "maximum"}},
      // ---- calibration measurements JSON (finding 10)
      {"calibrate --fit " + corpus("measurements", "number-overflow.json") + " --base h100-sxm-80gb --out " +
           (scratch() / "never.toml").string(),
       {"number-overflow.json", "out of range"}},
  };
  CHECK(cases.size() >= 80);
  for (const auto& c : cases) check_case(c);
  CHECK_FALSE(fs::exists(scratch() / "never.toml"));
}

TEST_CASE("inputs that are not regular files, or are too large, are refused at once (issue 36 findings 1, 2, 5)") {
  // Before the one file-opening helper, a FIFO made `model` and `validate` wait forever and
  // /dev/zero grew them to gigabytes: every case runs under `timeout`, so a hang fails (exit 124)
  // instead of stalling the suite.
  const fs::path dir = scratch() / "not-files";
  fs::create_directories(dir);
  auto fifo = [&](const std::string& name) {
    const fs::path p = dir / name;
    REQUIRE(::mkfifo(p.c_str(), 0600) == 0);
    return p.string();
  };
  auto sparse = [&](const std::string& name, std::uintmax_t bytes) {
    const fs::path p = dir / name;
    std::ofstream(p, std::ios::binary) << "x";
    fs::resize_file(p, bytes);  // a hole: the size is checked before any byte is read
    return p.string();
  };
  const std::string plan = write("not-files/plan.toml", kPlan);
  const std::string fit = (data_root() / "tests" / "calibrate" / "data" / "model_generated_h100.json").string();
  const fs::path zero_link = dir / "zero.json";
  fs::create_symlink("/dev/zero", zero_link);
  const std::string t = "timeout 20 ";
  const std::string fifo_reason = "is a named pipe (FIFO), not a regular file";
  const std::string dev_reason = "is a character device, not a regular file";
  const std::vector<Case> cases = {
      // finding 1: FIFOs, devices, folders and links to them
      {"model " + fifo("f.json"), {"f.json", fifo_reason}},
      {"model " + fifo("f.toml"), {"f.toml", fifo_reason}},
      {"validate " + fifo("f.csv"), {"f.csv", fifo_reason}},
      {"memory --config " + fifo("cfg.yaml"), {"cfg.yaml", fifo_reason}},
      {"memory --config " + plan + " --cluster " + fifo("prof.toml"), {"prof.toml", fifo_reason}},
      {"simulate --config " + plan + " --full --gpu-speeds " + fifo("speeds.txt"), {"speeds.txt", fifo_reason}},
      {"calibrate --fit " + fifo("m.json") + " --base h100-sxm-80gb --out " + (dir / "never.toml").string(),
       {"m.json", fifo_reason}},
      {"calibrate --fit " + fit + " --base " + fifo("base.toml") + " --out " + (dir / "never.toml").string(),
       {"base.toml", fifo_reason}},
      {"collective --cluster h100-sxm-80gb --gpus 8 --nccl " + fifo("nccl.toml"), {"nccl.toml", fifo_reason}},
      {"validate /dev/zero", {"/dev/zero", dev_reason}},
      {"simulate --config " + plan + " --full --gpu-speeds /dev/zero", {"/dev/zero", dev_reason}},
      {"model " + zero_link.string(), {"zero.json", "is a symbolic link to a character device"}},
      // finding 5: what is wrong, not "empty file" or "no such file"
      {"validate " + dir.string(), {dir.string(), "is a folder, not a file"}},
      {"memory --config " + plan + " --cluster /dev/zero", {"/dev/zero", dev_reason}},
      // finding 2: a size limit per format, before reading
      {"model " + sparse("big.json", 50'000'000), {"big.json", "50000000 bytes", "maximum of 4 MiB", "config.json"}},
      {"model " + sparse("big.toml", 2 * 1024 * 1024), {"big.toml", "maximum of 1 MiB", "model TOML"}},
      {"memory --config " + sparse("big.yaml", 5 * 1024 * 1024), {"big.yaml", "maximum of 4 MiB", "training config"}},
      {"memory --config " + plan + " --cluster " + sparse("bigprof.toml", 5 * 1024 * 1024),
       {"bigprof.toml", "maximum of 4 MiB", "hardware profile"}},
      {"validate " + sparse("big.csv", 16ULL * 1024 * 1024 * 1024 + 1), {"big.csv", "maximum of 16 GiB", "validation CSV"}},
      {"validate --cross-validate source " + sparse("big-cv.csv", 128 * 1024 * 1024 + 1),
       {"big-cv.csv", "maximum of 128 MiB", "validation CSV read whole"}},
      {"simulate --config " + plan + " --full --gpu-speeds " + sparse("speeds-big.txt", 65 * 1024 * 1024),
       {"speeds-big.txt", "maximum of 64 MiB"}},
  };
  for (const auto& c : cases) CHECK(check_case({c.args, c.needles, t}).seconds < 10.0);
  CHECK_FALSE(fs::exists(dir / "never.toml"));
}

TEST_CASE("numbers that are not numbers, or are out of range, are refused: FLAG: REASON (range ...) (issue 36 findings 4, 5)") {
  const std::string plan = write("ranges/plan.toml", kPlan);
  const std::string sim = "simulate --config " + plan + " ";
  const std::string cap = "capacity --model llama3.1-8b --tokens 15T --gpus 64 --simulate-budget 1 ";
  const std::string speeds = write("ranges/speeds.txt", "3 1e-300\n");
  auto flag = [](const std::string& f, const std::string& range) {
    // The message starts with the flag (no "<input>", no CLI11 range text of 300 digits).
    return std::vector<std::string>{"meshplan: error: " + f + ": ", "(range " + range};
  };
  const std::string obs = "0 (excluded) .. 1000000000 tokens/s per GPU";
  const std::vector<Case> cases = {
      {sim + "--observed-tokens-per-s nan", flag("--observed-tokens-per-s", obs)},
      {sim + "--observed-tokens-per-s inf", flag("--observed-tokens-per-s", obs)},
      {sim + "--observed-tokens-per-s -1", flag("--observed-tokens-per-s", obs)},
      {sim + "--observed-tokens-per-s 0", flag("--observed-tokens-per-s", obs)},
      {sim + "--observed-tokens-per-s 1e30", flag("--observed-tokens-per-s", obs)},
      {cap + "--price-per-gpu-hour nan", flag("--price-per-gpu-hour", "0 .. 1000000 per GPU-hour")},
      {cap + "--price-per-gpu-hour -1", flag("--price-per-gpu-hour", "0 .. 1000000 per GPU-hour")},
      {cap + "--price-per-gpu-hour inf", flag("--price-per-gpu-hour", "0 .. 1000000 per GPU-hour")},
      {sim + "--full --straggler 0.01:0.9 --seed -1", flag("--seed", "0 .. 18446744073709551615")},
      {sim + "--full --straggler 0.01:0.9 --seed 99999999999999999999", flag("--seed", "0 .. 18446744073709551615")},
      {cap + "--checkpoint-interval 1e-300s", flag("--checkpoint-interval", "1 .. 3155760000 seconds")},
      {cap + "--checkpoint-interval nan", flag("--checkpoint-interval", "1 .. 3155760000 seconds")},
      {"capacity --model llama3.1-8b --gpus 64 --tokens 1e-300", flag("--tokens", "1 .. 1e18 tokens")},
      {"kernel --memory-bytes 1e30", flag("--memory-bytes", "1 .. 1125899906842624 bytes")},
      {"kernel --memory-bytes 1e-300", flag("--memory-bytes", "1 .. 1125899906842624 bytes")},
      {"kernel --memory-bytes 0", flag("--memory-bytes", "1 .. 1125899906842624 bytes")},
      {"kernel --memory-bytes nan", flag("--memory-bytes", "1 .. 1125899906842624 bytes")},
      {sim + "--full --straggler 0.5:1e-300", flag("--straggler", "0.01 .. 100 x")},
      {sim + "--full --straggler 0.5:nan", flag("--straggler", "0.01 .. 100 x")},
      {sim + "--full --straggler nan:0.9", flag("--straggler", "0 .. 1 of the GPUs")},
      {"plan --model llama3.1-8b --gpus 8 --global-batch 16 --headroom inf", flag("--headroom", "0 .. 90 percent")},
      {"plan --model llama3.1-8b --gpus 8 --global-batch 16 --threads 1.5", flag("--threads", "1 .. 64 threads")},
      {"layout --gpus 8 --pp -2", flag("--pp", "1 .. 4096 stages")},
      {sim + "--full --gpu-speeds " + speeds, {"speeds.txt", "line 1", "between 0.01 and 100"}},
  };
  for (const auto& c : cases) {
    const Run r = check_case(c);
    CHECK(r.err.find("17976931348623") == std::string::npos);
  }
  // The seed is the whole 64-bit range: its largest value is a seed, not a wrapped -1.
  const std::string straggle = sim + "--full --straggler 0.25:0.9 --json --seed ";
  const Run top = run(straggle + "18446744073709551615");
  CAPTURE(top.err);
  CHECK(top.exit_code == 0);
  const Run one = run(straggle + "1");
  CHECK(one.exit_code == 0);
  CHECK(nlohmann::json::parse(top.out).at("pace_rank") != nlohmann::json::parse(one.out).at("pace_rank"));
}

TEST_CASE("docs/limits.md lists the flag range table row by row") {
  const std::string doc = read(data_root() / "docs" / "limits.md");
  REQUIRE_FALSE(doc.empty());
  // Finding 7: the --full cap is documented, and the refusal cites the page. The cap is on the
  // engine tasks, the step's ops times the distinct ranks per stage: 1,024 FSDP GPUs at one speed
  // are one rank; each at a speed of its own, 1,024, which one micro-batch fits (4.4 M tasks at 16
  // micro-batches, 0.8 s and 260 MB) and 64 do not (17 M).
  CHECK(doc.find("| engine tasks of a `simulate --full` run") != std::string::npos);
  const std::string plan1024 = write("full1024.toml", replaced(replaced(replaced(kPlan, "gpus = 8", "gpus = 1024"),
                                                                       "dp_shard = 8", "dp_shard = 1024"),
                                                              "global_batch = 16", "global_batch = 1024"));
  const Run alike = run("simulate --config " + plan1024 + " --full --json");
  REQUIRE(alike.exit_code == 0);
  CHECK(nlohmann::json::parse(alike.out).at("full_simulated_ranks").get<int>() == 1);
  std::string speeds;
  for (int r = 0; r < 1024; ++r) speeds += std::to_string(r) + " " + std::to_string(0.5 + r / 4096.0) + "\n";
  const std::string speeds1024 = write("speeds1024.txt", speeds);
  const Run each = run("simulate --config " + plan1024 + " --full --json --gpu-speeds " + speeds1024);
  REQUIRE(each.exit_code == 0);
  CHECK(nlohmann::json::parse(each.out).at("full_simulated_ranks").get<int>() == 1024);
  const std::string long1024 = write("full1024long.toml", replaced(read(plan1024), "global_batch = 1024", "global_batch = 65536"));
  const Run full = run("simulate --config " + long1024 + " --full --gpu-speeds " + speeds1024);
  CHECK(full.exit_code == 2);
  CHECK(full.err.find("1024 distinct ranks per stage x 1 stages to simulate") != std::string::npos);
  CHECK(full.err.find("over the limit of 8 million (about 2 GiB; docs/limits.md)") != std::string::npos);
  for (const auto& r : meshplan::cli::flag_ranges()) {
    CAPTURE(r.flag);
    CAPTURE(r.command);
    const std::string range = meshplan::cli::range_text(r);
    bool found = false;
    for (std::size_t at = doc.find("\n| `" + std::string(r.flag) + "` |"); at != std::string::npos && !found;
         at = doc.find("\n| `" + std::string(r.flag) + "` |", at + 1)) {
      const std::string line = doc.substr(at + 1, doc.find('\n', at + 1) - at - 1);
      bool command_ok = r.command.empty() ? line.find("every command") != std::string::npos : true;
      for (const auto& cmd : {"plan", "capacity", "simulate", "kernel", "collective", "layout", "topology"})
        if (meshplan::cli::lists(r.command, cmd)) command_ok = command_ok && line.find(std::string("`") + cmd + "`") != std::string::npos;
      found = command_ok && line.ends_with("| " + range + " |");
    }
    CHECK_MESSAGE(found, range);
  }
}

TEST_CASE("a count above its maximum is refused at once") {
  // The audit saw these run for seconds to minutes and gigabytes; refused before any allocation
  // they take a process start. The bound is loose for loaded CI machines and sanitizer builds.
  for (const std::string args : {"topology --gpus 100000000", "layout --gpus 100000000 --dp-shard 100000000",
                                 "plan --model llama3.1-8b --gpus 100000000 --global-batch 16",
                                 "capacity --model llama3.1-8b --tokens 15T --gpus 100000000",
                                 "capacity --model llama3.1-8b --tokens 1e30 --deadline 60d"}) {
    CAPTURE(args);
    const Run r = run(args);
    CHECK(r.exit_code == 2);
    CHECK(r.seconds < 5.0);
  }
}

TEST_CASE("validation rows with counts past 32 bits are skipped with the reason, not crashed or wrapped") {
  // Findings 2 (n_heads 2^32 cast to 0, then d_model % 0) and 8 (tp 2^32+1 compared as tp 1).
  for (const char* name : {"crash-n-heads-2p32.csv", "wrap-tp-2p32p1.csv", "crash-n-layers-1e9.csv", "huge-dp-shard.csv"}) {
    CAPTURE(name);
    const Run r = run("validate " + corpus("validation_csv", name) + " --json");
    CAPTURE(r.err);
    REQUIRE(r.exit_code != -1);
    const auto j = nlohmann::json::parse(r.out);
    const std::string dump = j.dump();
    CHECK(dump.find("maximum") != std::string::npos);
  }
}

TEST_CASE("token counts are SI, binary with Mi") {
  // 4M = 4e6 tokens = 488.3 sequences of 8192 (rounded to whole sequences), 4Mi = 512.
  const Run si = run("capacity --model llama3.1-8b --tokens 15T --gpus 64 --global-batch-tokens 4M --simulate-budget 1 --json");
  const Run bin = run("capacity --model llama3.1-8b --tokens 15T --gpus 64 --global-batch-tokens 4Mi --simulate-budget 1 --json");
  REQUIRE(si.exit_code == 0);
  REQUIRE(bin.exit_code == 0);
  CHECK(nlohmann::json::parse(si.out).at("tokens").get<double>() == doctest::Approx(15e12));
  const Run text = run("capacity --model llama3.1-8b --tokens 15T --gpus 64 --global-batch-tokens 4Mi --simulate-budget 1");
  CHECK(text.out.find("512 x 8192 tokens per step") != std::string::npos);
  const Run text_si = run("capacity --model llama3.1-8b --tokens 15T --gpus 64 --global-batch-tokens 4M --simulate-budget 1");
  CHECK(text_si.out.find("488 x 8192 tokens per step") != std::string::npos);
}

TEST_CASE("written files: atomic, never replace a non-regular file, bare names are the current folder") {
  const fs::path dir = scratch() / "files";
  fs::create_directories(dir);
  const std::string fit = (data_root() / "tests" / "calibrate" / "data" / "model_generated_h100.json").string();
  SUBCASE("calibrate --fit with a bare --out name (issue 19 item 1)") {
    const Run r = run("calibrate --fit " + fit + " --base h100-sxm-80gb --out mine.toml", dir);
    CAPTURE(r.err);
    CHECK(r.exit_code == 0);
    CHECK(fs::is_regular_file(dir / "mine.toml"));
    for (const auto& e : fs::directory_iterator(dir)) CHECK(e.path().filename().string().find("tmp") == std::string::npos);
    const Run again = run("topology --cluster " + (dir / "mine.toml").string() + " --gpus 8");
    CHECK(again.exit_code == 0);
  }
  SUBCASE("--out an existing folder is refused and leaves nothing (finding 11)") {
    fs::create_directories(dir / "adir");
    const Run r = run("calibrate --fit " + fit + " --base h100-sxm-80gb --out adir", dir);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("adir: --out: is a folder") != std::string::npos);
    CHECK(fs::is_directory(dir / "adir"));
    CHECK(fs::is_empty(dir / "adir"));
    for (const auto& e : fs::directory_iterator(dir)) CHECK(e.path().filename().string().find("tmp") == std::string::npos);
  }
  SUBCASE("--out a FIFO or a socket is refused, never replaced (finding 11: /dev/full)") {
    const fs::path fifo = dir / "pipe";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    const Run r = run("calibrate --fit " + fit + " --base h100-sxm-80gb --out " + fifo.string());
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("not a regular file") != std::string::npos);
    CHECK(fs::is_fifo(fifo));
    const fs::path sock = dir / "sock";
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", sock.c_str());
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    const Run t = run("simulate --config " + write("p.toml", kPlan) + " --trace " + sock.string());
    CHECK(t.exit_code == 2);
    CHECK(t.err.find("--trace") != std::string::npos);
    CHECK(fs::is_socket(sock));
    ::close(fd);
  }
  SUBCASE("simulate --trace to a folder is refused") {
    fs::create_directories(dir / "tdir");
    const Run r = run("simulate --config " + write("p2.toml", kPlan) + " --trace " + (dir / "tdir").string());
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("is a folder") != std::string::npos);
  }
  SUBCASE("plan --out under a file: one line, said once (finding 10)") {
    write("files/afile", "x");
    const Run r = run("plan --model llama3.1-8b --gpus 8 --global-batch 16 --simulate-budget 2 --out " +
                      (dir / "afile" / "bundle").string());
    CHECK(r.exit_code == 2);
    std::string err = r.err;
    while (!err.empty() && err.back() == '\n') err.pop_back();
    CHECK(err.find('\n') == std::string::npos);
    CHECK(err.find("--out") != std::string::npos);
    const auto first = err.find("Not a directory");
    CHECK((first == std::string::npos || err.find("Not a directory", first + 1) == std::string::npos));
  }
  SUBCASE("whatif with no evaluable variant says why and writes no HTML (finding 10)") {
    const Run r = run("whatif --config " + write("w.toml", kPlan) + " --vary batch.seq_len=abc --html " +
                      (dir / "w.html").string());
    CHECK(r.exit_code == 2);
    CHECK_FALSE(r.err.empty());
    CHECK(r.err.find("seq_len") != std::string::npos);
    CHECK_FALSE(fs::exists(dir / "w.html"));
  }
  SUBCASE("a bundle is written whole") {
    const Run r = run("plan --model llama3.1-8b --gpus 8 --global-batch 16 --simulate-budget 2 --out " +
                      (dir / "bundle").string());
    CAPTURE(r.err);
    CHECK(r.exit_code == 0);
    CHECK(fs::is_regular_file(dir / "bundle" / "launch.sh"));
    CHECK((fs::status(dir / "bundle" / "launch.sh").permissions() & fs::perms::owner_exec) != fs::perms::none);
    for (const auto& e : fs::directory_iterator(dir / "bundle"))
      CHECK(e.path().filename().string().find("tmp") == std::string::npos);
  }
}

TEST_CASE("plan --out swaps a whole bundle in or leaves the old one whole (issue 36 finding 3)") {
  const fs::path dir = scratch() / "swap";
  fs::create_directories(dir);
  const fs::path bdl = dir / "bdl";
  const std::string plan = "plan --model llama3.1-8b --global-batch-tokens 1M --simulate-budget 2 --out " + bdl.string();
  auto snapshot = [&] {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::directory_iterator(bdl))
      files[e.path().filename().string()] = e.is_regular_file() ? read(e.path()) : std::string("<folder>");
    return files;
  };
  auto no_leftovers = [&] {
    for (const auto& e : fs::directory_iterator(dir)) CHECK(e.path().filename().string() == "bdl");
  };
  REQUIRE(run(plan + " --gpus 8").exit_code == 0);
  const auto eight = snapshot();
  CHECK(eight.size() == 3);  // llama3.1-8b.toml, launch.sh, plan.md
  CHECK(eight.at("launch.sh").find("--nproc_per_node=8") != std::string::npos);

  SUBCASE("the audit's case: plan.md replaced by a folder, then a 16-GPU bundle written over it") {
    fs::remove(bdl / "plan.md");
    fs::create_directory(bdl / "plan.md");
    const Run r = run(plan + " --gpus 16");
    CAPTURE(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("plan.md") != std::string::npos);
    auto after = snapshot();
    CHECK(after.at("plan.md") == "<folder>");
    after.erase("plan.md");
    auto before = eight;
    before.erase("plan.md");
    CHECK(after == before);  // launch.sh and the TOML still describe 8 GPUs
    no_leftovers();
  }
  SUBCASE("a failure while writing the new bundle leaves the old one and no temporary folder") {
    // llm-foundry names the YAML after the model; an id with a slash cannot be a file name there.
    const std::string hf = replaced(read(corpus("hf_config", "llama3.1-8b.json")), "\"hidden_size\"",
                                    "\"_name_or_path\": \"meta-llama/Llama-3.1-8B\", \"hidden_size\"");
    const Run r = run("plan --model " + write("swap-hf/config.json", hf) +
                      " --gpus 16 --global-batch 128 --seq 8192 --simulate-budget 2 --runtime llm-foundry --out " +
                      bdl.string());
    CAPTURE(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(".tmp-") == std::string::npos);
    CHECK(snapshot() == eight);
    no_leftovers();
  }
  SUBCASE("a bundle replaces the old one whole: no stale sbatch.slurm of a multi-node plan") {
    REQUIRE(run(plan + " --gpus 16").exit_code == 0);
    CHECK(fs::is_regular_file(bdl / "sbatch.slurm"));
    REQUIRE(run(plan + " --gpus 8").exit_code == 0);
    CHECK(snapshot() == eight);
    no_leftovers();
  }
  SUBCASE("a folder holding other files is refused, not emptied") {
    write("swap/bdl/notes.txt", "mine");
    const Run r = run(plan + " --gpus 16");
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("notes.txt") != std::string::npos);
    auto with_notes = eight;
    with_notes["notes.txt"] = "mine";
    CHECK(snapshot() == with_notes);
    fs::create_directories(dir / "other");
    write("swap/other/data.csv", "a,b\n");
    const Run o = run("plan --model llama3.1-8b --global-batch-tokens 1M --simulate-budget 2 --gpus 8 --out " +
                      (dir / "other").string());
    CHECK(o.exit_code == 2);
    CHECK(o.err.find("not a meshplan bundle") != std::string::npos);
    CHECK(read(dir / "other" / "data.csv") == "a,b\n");
    fs::remove_all(dir / "other");
  }
  fs::remove_all(dir);
}

// Peak resident memory of one run of the binary, in bytes (getrusage of the waited-for child).
std::uint64_t peak_rss_bytes(const std::vector<std::string>& args) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::vector<char*> argv;
    const std::string bin = meshplan_bin().string();
    argv.push_back(const_cast<char*>(bin.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    if (std::freopen("/dev/null", "w", stdout) == nullptr) ::_exit(126);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  int status = 0;
  struct rusage ru {};
  REQUIRE(::wait4(pid, &status, 0, &ru) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  return static_cast<std::uint64_t>(ru.ru_maxrss) * 1024;  // Linux: kilobytes
}

TEST_CASE("validate streams its CSV: a file past the old 128 MiB limit runs in bounded memory (issue 36 finding 8)") {
  // One row of dev.csv and 1,400 rows of 100 KB each (an empty id: skipped at once, so the test
  // costs a read of the file, not a simulation): 140 MB, which the whole-file reader refused and
  // held twice over (text and table). Streamed, memory is the row in flight.
  const std::string dev = read(corpus("validation_csv", "dev-5-rows.csv"));
  const std::size_t header_end = dev.find('\n') + 1;
  const std::string header = dev.substr(0, header_end);
  const std::string first_row = dev.substr(header_end, dev.find('\n', header_end) + 1 - header_end);
  const std::size_t n_columns = static_cast<std::size_t>(std::count(header.begin(), header.end(), ',')) + 1;
  const fs::path big = scratch() / "streamed-140mb.csv";
  {
    std::ofstream f(big, std::ios::binary);
    f << header << first_row;
    const std::string filler_row = std::string(n_columns - 1, ',') + std::string(100'000, 'n') + "\n";
    for (int i = 0; i < 1400; ++i) f << filler_row;
  }
  REQUIRE(fs::file_size(big) > 128ULL * 1024 * 1024);
  const Run r = run("validate " + big.string());
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("(1401 rows,") != std::string::npos);
  CHECK(r.out.find("SKIPPED: id is empty") != std::string::npos);
  // Holding the file would take 140 MB at least; the streamed run is the binary, its profiles and
  // one row.
  // Under AddressSanitizer the binary's own shadow memory and quarantine hold hundreds of MB
  // whatever it reads (653 MB measured), so the bound says nothing there and is not checked.
#if defined(__SANITIZE_ADDRESS__)
  constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  constexpr bool kAddressSanitizer = true;
#else
  constexpr bool kAddressSanitizer = false;
#endif
#else
  constexpr bool kAddressSanitizer = false;
#endif
  if (!kAddressSanitizer) {
    const std::uint64_t rss = peak_rss_bytes({"validate", big.string()});
    CAPTURE(rss);
    CHECK(rss < 100ULL * 1000 * 1000);
  }
  fs::remove(big);

  // A record that never ends is not a row: refused at 1 MiB instead of being held whole.
  const fs::path endless = scratch() / "one-long-record.csv";
  std::ofstream(endless, std::ios::binary) << header << std::string(2 * 1024 * 1024, 'x');
  const Run e = run("validate " + endless.string());
  CHECK(e.exit_code == 2);
  CHECK(e.err.find("one-long-record.csv") != std::string::npos);
  CHECK(e.err.find("a record longer than 1048576 bytes") != std::string::npos);
}

TEST_CASE("validate echoes a row's bytes cleaned, never raw (issue 36 finding 6)") {
  std::string csv = read(corpus("validation_csv", "dev-5-rows.csv"));
  const auto row = csv.find('\n') + 1;
  csv.replace(row, csv.find(',', row) - row, std::string("bad\0id\xff\xfe\x1b[31m", 13));
  const std::string file = write("raw-bytes.csv", csv);
  auto raw_free = [](const std::string& out) {
    for (const char c : out) {
      const auto u = static_cast<unsigned char>(c);
      if ((u < 0x20 && c != '\n') || u == 0xff || u == 0xfe) return false;
    }
    return true;
  };
  const Run text = run("validate " + file);
  CAPTURE(text.err);
  CHECK(text.exit_code == 0);
  CHECK(text.out.find("bad?id???[31m") != std::string::npos);
  CHECK(raw_free(text.out));
  const Run js = run("validate --json " + file);
  CAPTURE(js.err);
  REQUIRE(js.exit_code == 0);
  CHECK(raw_free(js.out));
  const auto j = nlohmann::json::parse(js.out);
  bool found = false;
  for (const auto& r : j.at("rows")) found = found || r.at("id") == "bad?id???[31m";
  CHECK(found);
}

TEST_CASE("plan --json is byte-identical for 1 and 2 threads and across reruns (search_seconds aside)") {
  auto plan_json = [](int threads) {
    const Run r = run("plan --model llama3.1-8b --gpus 16 --global-batch-tokens 1Mi --simulate-budget 6 --json --threads " +
                      std::to_string(threads));
    REQUIRE(r.exit_code == 0);
    auto j = nlohmann::json::parse(r.out);
    REQUIRE(j.contains("search_seconds"));
    j.erase("search_seconds");  // wall clock
    return j.dump();
  };
  const std::string one = plan_json(1);
  CHECK(one.size() > 200);
  CHECK(plan_json(2) == one);
  CHECK(plan_json(2) == one);
}
