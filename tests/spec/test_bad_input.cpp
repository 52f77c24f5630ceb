// Malformed and infeasible run configs: each must be an InputError whose one-line message names
// the file and the config's own key.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include "import/config_loader.hpp"
#include "spec/error.hpp"
#include "spec/input_file.hpp"
#include "spec/printable.hpp"
#include "spec/plan.hpp"
#include "spec/validated_mfu.hpp"
#include "spec/import_common.hpp"
#include "test_paths.hpp"

using namespace meshplan;
namespace fs = std::filesystem;

namespace {

struct Case {
  std::string name;                  // file name (its extension picks the parser)
  std::string text;
  std::optional<std::int64_t> gpus;  // resolve_layout is called when set (or when the file has gpus)
  std::string key;                   // expected InputError::key() (prefix match for syntax errors)
  std::string reason_has = {};       // optional substring of the reason
  bool resolve = true;
};

fs::path temp_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("meshplan_test_bad_input_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

// ---- valid bases, broken one key at a time
std::string foundry(const std::string& fsdp = "  mixed_precision: PURE\n", const std::string& top = "",
                    const std::string& model_extra = "") {
  return "max_seq_len: 2048\n"
         "global_train_batch_size: 64\n"
         "device_train_microbatch_size: 4\n" +
         top +
         "model:\n  name: mpt_causal_lm\n  d_model: 1024\n  n_heads: 16\n  n_layers: 8\n"
         "  expansion_ratio: 4\n  max_seq_len: 2048\n  vocab_size: 50368\n" +
         model_extra + "fsdp_config:\n" + fsdp;
}
std::string replace(std::string s, const std::string& from, const std::string& to) {
  const auto at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

std::string titan(const std::string& training = "", const std::string& parallelism = "",
                  const std::string& extra = "", const std::string& flavor = "8B") {
  return "[job]\ndescription = \"t\"\n[model]\nname = \"llama3\"\nflavor = \"" + flavor +
         "\"\n[training]\nlocal_batch_size = 1\nseq_len = 4096\n" + training + "[parallelism]\n" + parallelism +
         "[compile]\nenable = false\n" + extra;
}

std::string plan(const std::string& layout = "", const std::string& batch = "global_batch = 64\nmicro_batch = 1\n",
                 const std::string& cluster = "gpus = 8\n", const std::string& extra = "",
                 const std::string& model = "name = \"llama3.1-8b\"\n") {
  return "[model]\n" + model + "[cluster]\n" + cluster + "[layout]\n" + layout + "[batch]\nseq_len = 4096\n" + batch +
         extra;
}

std::vector<Case> cases() {
  return {
      // ---------------- torchtitan
      {"tt_unknown_key.toml", titan("batch_sz = 4\n"), 8, "training.batch_sz", "unknown key"},
      {"tt_unknown_section.toml", titan() + "[trainer]\nsteps = 1\n", 8, "trainer", "unknown section"},
      {"tt_other_layout_key.toml", titan("compile = true\n"), 8, "training.compile", "mid-2025"},
      {"tt_other_layout_section.toml", titan() + "[float8]\nenable_fsdp_float8_all_gather = false\n", 8, "float8",
       "mid-2025"},
      {"tt_wrong_type.toml", replace(titan(), "local_batch_size = 1", "local_batch_size = \"1\""), 8,
       "training.local_batch_size", "integer"},
      {"tt_zero_local_batch.toml", replace(titan(), "local_batch_size = 1", "local_batch_size = 0"), 8,
       "training.local_batch_size", "positive"},
      {"tt_negative_tp.toml", titan("", "tensor_parallel_degree = -2\n"), 8, "parallelism.tensor_parallel_degree"},
      {"tt_replicate_minus_one.toml", titan("", "data_parallel_replicate_degree = -1\n"), 8,
       "parallelism.data_parallel_replicate_degree"},
      {"tt_product_mismatch.toml", titan("", "data_parallel_shard_degree = 3\ntensor_parallel_degree = 2\n"), 8,
       "parallelism.data_parallel_shard_degree", "= 6 GPUs"},
      {"tt_minus_one_cannot_absorb.toml", titan("", "tensor_parallel_degree = 4\n"), 6,
       "parallelism.data_parallel_shard_degree", "not divisible"},
      {"tt_heads_tp.toml", titan("", "tensor_parallel_degree = 3\n", "", "70B"), 24, "parallelism.tensor_parallel_degree",
       "attention heads"},
      {"tt_kv_heads_tp.toml", titan("", "tensor_parallel_degree = 16\n"), 16, "parallelism.tensor_parallel_degree",
       "kv heads"},
      // 32 layers + the embedding and output weighed as one layer each: 34, fewer than 40 stages. (pp 3
      // runs: torchtitan places 11, 11, 10.)
      {"tt_layers_pp.toml", titan("", "pipeline_parallel_degree = 40\n"), 40, "parallelism.pipeline_parallel_degree",
       "34 weighted layers"},
      {"tt_seq_cp.toml", replace(titan("", "context_parallel_degree = 2\n"), "seq_len = 4096", "seq_len = 4098"), 2,
       "training.seq_len", "2 x cp 2"},
      {"tt_seq_tp.toml", replace(titan("", "tensor_parallel_degree = 8\n"), "seq_len = 4096", "seq_len = 4100"), 8,
       "training.seq_len", "tp 8"},
      {"tt_debugmodel.toml", titan("", "", "", "debugmodel"), 8, "model.flavor", "debugmodel"},
      {"tt_unknown_flavor.toml", titan("", "", "", "13B"), 8, "model.flavor"},
      {"tt_unknown_model.toml", replace(titan(), "name = \"llama3\"", "name = \"llama4\""), 8, "model.name",
       "--model"},
      {"tt_reduce_bf16.toml", titan("mixed_precision_reduce = \"bfloat16\"\n"), 8, "training.mixed_precision_reduce",
       "float32"},
      {"tt_param_fp16.toml", titan("mixed_precision_param = \"float16\"\n"), 8, "training.mixed_precision_param"},
      {"tt_ac_mode.toml", titan("", "", "[activation_checkpoint]\nmode = \"partial\"\n"), 8, "activation_checkpoint.mode"},
      {"tt_ac_option.toml", titan("", "", "[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"0\"\n"),
       8, "activation_checkpoint.selective_ac_option"},
      {"tt_schedule.toml", titan("", "pipeline_parallel_degree = 2\npipeline_parallel_schedule = \"2F2B\"\n"), 8,
       "parallelism.pipeline_parallel_schedule"},
      {"tt_global_batch.toml", titan("global_batch_size = 12\n"), 8, "training.global_batch_size", "not divisible"},
      {"tt_pp_microbatch.toml",
       replace(titan("", "pipeline_parallel_degree = 2\npipeline_parallel_microbatch_size = 2\n"), "local_batch_size = 1",
               "local_batch_size = 3"),
       8, "parallelism.pipeline_parallel_microbatch_size", "not divisible"},
      {"tt_converter.toml", titan("", "", "", "8B") + "", 8, "model.converters", "unknown converter", true},
      {"tt_syntax.toml", "[training\nseq_len = 4096\n", 8, "line ", "TOML syntax error"},
      {"tt_bad_value_type_section.toml", "[job]\ndescription = \"x\"\n[model]\nflavor = \"8B\"\ntraining = 3\n", 8,
       "model.training", "unknown key"},
      {"tt_no_gpus.toml", titan(), std::nullopt, "n_gpus", "--gpus"},

      // ---------------- llm-foundry
      {"lf_syntax.yaml", "model: [unclosed\nfsdp_config: {}\n", 8, "line ", "YAML syntax error"},
      {"lf_unknown_top_level.yaml", foundry("  mixed_precision: PURE\n", "trainer_cfg: 1\n"), 8, "trainer_cfg",
       "Unused parameters"},
      {"lf_sharding.yaml", foundry("  sharding_strategy: ZERO3\n"), 8, "fsdp_config.sharding_strategy"},
      {"lf_mixed_precision.yaml", foundry("  mixed_precision: HALF\n"), 8, "fsdp_config.mixed_precision"},
      {"lf_mp_dict_dtype.yaml", foundry("  mixed_precision:\n    param_dtype: bf17\n"), 8,
       "fsdp_config.mixed_precision.param_dtype"},
      {"lf_cpu_offload.yaml", foundry("  cpu_offload: true\n"), 8, "fsdp_config.cpu_offload", "ValueError"},
      {"lf_act_offload_orig_params.yaml", foundry("  activation_cpu_offload: true\n  use_orig_params: false\n"), 8,
       "fsdp_config.activation_cpu_offload", "use_orig_params"},
      {"lf_unknown_hf_id.yaml",
       replace(foundry(), "  name: mpt_causal_lm\n", "  name: hf_causal_lm\n  pretrained_model_name_or_path: acme/giant-1t\n"),
       8, "model.pretrained_model_name_or_path", "--model"},
      {"lf_unknown_model_class.yaml", replace(foundry(), "name: mpt_causal_lm", "name: bert_lm"), 8, "model.name"},
      {"lf_global_world.yaml", foundry(), 48, "global_train_batch_size", "world size 48"},
      {"lf_micro_zero.yaml", replace(foundry(), "device_train_microbatch_size: 4", "device_train_microbatch_size: 0"), 8,
       "device_train_microbatch_size"},
      {"lf_global_negative.yaml", replace(foundry(), "global_train_batch_size: 64", "global_train_batch_size: -64"), 8,
       "global_train_batch_size"},
      {"lf_unresolved_interp.yaml", replace(foundry(), "max_seq_len: 2048\nglobal", "max_seq_len: ${variables.nope}\nglobal"),
       8, "max_seq_len", "not defined"},
      {"lf_seq_type.yaml", replace(foundry(), "max_seq_len: 2048\nglobal", "max_seq_len: long\nglobal"), 8, "max_seq_len",
       "integer"},
      {"lf_tp_strategy.yaml", foundry("  mixed_precision: PURE\n", "tp_config:\n  strategy: attn\n  tensor_parallel_degree: 2\n"),
       8, "tp_config.strategy"},
      {"lf_tp_ffn_div.yaml", foundry("  mixed_precision: PURE\n", "tp_config:\n  strategy: ffn\n  tensor_parallel_degree: 3\n"),
       6, "tp_config.tensor_parallel_degree", "MLP width"},
      {"lf_hsdp_product.yaml", foundry("  data_parallel_shard_degree: 8\n  data_parallel_replicate_degree: 3\n"), 16,
       "fsdp_config.data_parallel_shard_degree", "= 24 GPUs"},
      {"lf_precision.yaml", foundry("  mixed_precision: PURE\n", "precision: amp_int8\n"), 8, "precision"},
      {"lf_shard_zero.yaml", foundry("  data_parallel_shard_degree: 0\n"), 8, "fsdp_config.data_parallel_shard_degree"},
      {"lf_bool_type.yaml", foundry("  activation_checkpointing: maybe\n"), 8, "fsdp_config.activation_checkpointing",
       "true or false"},
      {"lf_mpt_heads.yaml", replace(foundry(), "n_heads: 16", "n_heads: 0"), 8, "model.n_heads"},

      // ---------------- meshplan plan TOML
      {"plan_unknown_section.toml", plan() + "[layuot]\ntp = 2\n", std::nullopt, "layuot", "did you mean 'layout'"},
      {"plan_unknown_key.toml", plan("tpp = 2\n"), std::nullopt, "layout.tpp", "did you mean"},
      {"plan_unknown_model.toml", plan("", "global_batch = 64\n", "gpus = 8\n", "", "name = \"llama5-1t\"\n"),
       std::nullopt, "model.name", "unknown model"},
      {"plan_zero_gpus.toml", plan("", "global_batch = 64\n", "gpus = 0\n"), std::nullopt, "cluster.gpus"},
      {"plan_gpus_conflict.toml", plan(), 16, "cluster.gpus", "16 were requested"},
      {"plan_no_gpus.toml", plan("", "global_batch = 64\n", ""), std::nullopt, "cluster.gpus", "--gpus"},
      {"plan_seq_missing.toml", replace(plan(), "seq_len = 4096\n", ""), std::nullopt, "batch.seq_len", "required"},
      {"plan_sharding.toml", plan("", "global_batch = 64\n", "gpus = 8\n", "[sharding]\nstrategy = \"zero4\"\n"),
       std::nullopt, "sharding.strategy"},
      {"plan_dtype.toml", plan("", "global_batch = 64\n", "gpus = 8\n", "[precision]\nparam = \"fp12\"\n"), std::nullopt,
       "precision.param"},
      {"plan_vpp_schedule.toml", plan("pp = 2\nvpp = 2\nschedule = \"1f1b\"\n"), std::nullopt, "layout.vpp"},
      {"plan_global_div.toml", plan("", "global_batch = 12\nmicro_batch = 1\n"), std::nullopt, "batch.global_batch",
       "not divisible"},
      {"plan_inline_vocab.toml",
       plan("", "global_batch = 64\n", "gpus = 8\n", "", "name = \"x\"\nn_layers = 2\nd_model = 64\nn_heads = 4\nffn_hidden = 256\n"),
       std::nullopt, "model.vocab", "required"},
      {"plan_grad_accum.toml", plan("", "global_batch = 64\nmicro_batch = 1\ngrad_accum = 3\n"), std::nullopt,
       "batch.grad_accum", "disagrees"},
      {"plan_two_wildcards.toml", plan("tp = -1\n"), std::nullopt, "layout.tp", "only one"},
      {"plan_micro_type.toml", plan("", "global_batch = 64\nmicro_batch = \"big\"\n"), std::nullopt, "batch.micro_batch"},
      {"plan_heads_tp.toml", plan("tp = 3\n", "global_batch = 64\n", "gpus = 6\n", "", "name = \"llama2-13b\"\n"),
       std::nullopt, "layout.tp", "heads"},
      // Megatron's pipeline split rules (issue 15): a first stage larger than the model, a split
      // leaving a stage without a layer, and the two rule families together.
      {"plan_split_first_too_large.toml", plan("pp = 4\ndecoder_first_pipeline_num_layers = 40\n", "global_batch = 64\n",
                                               "gpus = 4\n", "[runtime]\nname = \"megatron\"\n"),
       std::nullopt, "layout.decoder_first_pipeline_num_layers", "the model has 32"},
      {"plan_split_first_empty.toml", plan("pp = 4\ndecoder_first_pipeline_num_layers = 0\n", "global_batch = 64\n",
                                           "gpus = 4\n", "[runtime]\nname = \"megatron\"\n"),
       std::nullopt, "layout.decoder_first_pipeline_num_layers", "empty"},
      {"plan_split_middle_empty.toml",
       plan("pp = 4\ndecoder_first_pipeline_num_layers = 16\ndecoder_last_pipeline_num_layers = 16\n",
            "global_batch = 64\n", "gpus = 4\n", "[runtime]\nname = \"megatron\"\n"),
       std::nullopt, "layout.decoder_first_pipeline_num_layers", "empty"},
      {"plan_split_embedding_indivisible.toml",
       plan("pp = 4\naccount_for_embedding_in_pipeline_split = true\n", "global_batch = 64\n", "gpus = 4\n",
            "[runtime]\nname = \"megatron\"\n"),
       std::nullopt, "layout.account_for_embedding_in_pipeline_split", "not divisible"},
      {"plan_split_both_rules.toml",
       plan("pp = 4\naccount_for_loss_in_pipeline_split = true\ndecoder_first_pipeline_num_layers = 8\n",
            "global_batch = 64\n", "gpus = 4\n", "[runtime]\nname = \"megatron\"\n"),
       std::nullopt, "layout.account_for_loss_in_pipeline_split", "cannot be combined"},
      {"plan_split_negative.toml", plan("pp = 4\ndecoder_last_pipeline_num_layers = -3\n", "global_batch = 64\n",
                                        "gpus = 4\n", "[runtime]\nname = \"megatron\"\n"),
       std::nullopt, "layout.decoder_last_pipeline_num_layers"},
      {"plan_megatron_zero2.toml",
       plan("", "global_batch = 64\n", "gpus = 8\n", "[sharding]\nstrategy = \"zero2\"\n[runtime]\nname = \"megatron\"\n"),
       std::nullopt, "sharding.strategy", "not modeled"},
      {"plan_deepspeed_zero3_pp.toml",
       plan("pp = 2\n", "global_batch = 64\n", "gpus = 4\n",
            "[sharding]\nstrategy = \"zero3\"\n[runtime]\nname = \"megatron\"\ndeepspeed = true\n"),
       std::nullopt, "runtime.deepspeed", "ZeRO stages 0 and 1"},
      {"plan_permute_fusion_torchtitan.toml",
       plan("", "global_batch = 64\n", "gpus = 8\n", "[runtime]\nname = \"torchtitan\"\nmoe_permute_fusion = true\n"),
       std::nullopt, "runtime.moe_permute_fusion", "Megatron-Core flag"},
      {"plan_graph_scope_unknown.toml",
       plan("", "global_batch = 64\n", "gpus = 8\n",
            "[runtime]\nname = \"megatron\"\ncuda_graphs = true\ncuda_graph_scope = [\"attn\", \"router\"]\n"),
       std::nullopt, "runtime.cuda_graph_scope", "'router' is not a scope"},
  };
}

}  // namespace

TEST_CASE("malformed and infeasible inputs are one-line InputErrors naming the file and key") {
  const auto all = cases();
  CHECK(all.size() >= 30);
  for (auto c : all) {
    // One real converter error, built here so the case list stays declarative.
    if (c.name == "tt_converter.toml") c.text = replace(c.text, "flavor = \"8B\"", "flavor = \"8B\"\nconverters = [\"fp8\"]");
    CAPTURE(c.name);
    const fs::path p = temp_dir() / c.name;
    std::ofstream(p, std::ios::binary) << c.text;
    bool threw = false;
    try {
      RunConfig rc = load_run_config(p.string());
      if (c.resolve) resolve_layout(rc, c.gpus);
    } catch (const InputError& e) {
      threw = true;
      const std::string what = e.what();
      CAPTURE(what);
      CHECK(what.find(p.string()) != std::string::npos);
      CHECK(e.key().rfind(c.key, 0) == 0);
      CHECK(what.find(c.key) != std::string::npos);
      CHECK(what.find('\n') == std::string::npos);
      if (!c.reason_has.empty()) CHECK(e.reason().find(c.reason_has) != std::string::npos);
    } catch (const std::exception& e) {
      FAIL("not an InputError: " << e.what());
    }
    CHECK_MESSAGE(threw, "no error for " << c.name);
  }
}

TEST_CASE("a missing file names the path") {
  const std::string p = (temp_dir() / "does_not_exist.toml").string();
  try {
    (void)load_run_config(p);
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find(p) != std::string::npos);
  }
}

TEST_CASE("an InputError's message is one line even when the key or reason quotes a line break") {
  // A YAML scalar folded over lines, or a stray control byte, quoted back in the reason.
  const InputError e("f.yaml", "run_name", "interpolation ${variables.ru\n_name}: 'variables.ru\r\n_name' is not\tdefined");
  const std::string what = e.what();
  CHECK(what.find('\n') == std::string::npos);
  CHECK(what.find('\r') == std::string::npos);
  CHECK(what == "f.yaml: run_name: interpolation ${variables.ru _name}: 'variables.ru  _name' is not defined");
  // The parts stay as given, for callers that compare them.
  CHECK(e.reason().find('\n') != std::string::npos);
}

TEST_CASE("InputFile reads lines and whole files; its size table is the one docs/limits.md lists") {
  const fs::path p = temp_dir() / "lines.txt";
  std::ofstream(p, std::ios::binary) << "a\r\nbb\n\nccc";
  {
    InputFile f(p.string(), InputKind::gpu_speeds);
    std::string line;
    std::vector<std::string> lines;
    while (f.getline(line)) lines.push_back(line);
    CHECK(lines == std::vector<std::string>{"a", "bb", "", "ccc"});
    CHECK(f.consumed() == f.size());
  }
  CHECK(read_input_file(p.string(), InputKind::gpu_speeds) == "a\r\nbb\n\nccc");
  // A line longer than the reader's 64 KiB chunk comes back whole.
  const std::string long_line(200'000, 'x');
  std::ofstream(p, std::ios::binary) << long_line << "\nend\n";
  {
    InputFile f(p.string(), InputKind::gpu_speeds);
    std::string line;
    REQUIRE(f.getline(line));
    CHECK(line == long_line);
    REQUIRE(f.getline(line));
    CHECK(line == "end");
    CHECK_FALSE(f.getline(line));
  }
  // The key given names the flag in the message.
  try {
    (void)read_input_file((temp_dir() / "absent.toml").string(), InputKind::run_config, "--config");
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK(e.key() == "--config");
    CHECK(e.reason() == "no such file");
  }

  std::ifstream d(meshplan::test::data_root() / "docs" / "limits.md");
  const std::string doc{std::istreambuf_iterator<char>(d), std::istreambuf_iterator<char>()};
  REQUIRE_FALSE(doc.empty());
  CHECK(input_kinds().size() == 14);
  for (const auto& k : input_kinds()) {
    CAPTURE(k.what);
    CHECK(&input_kind_info(k.kind) == &k);
    const auto row = doc.find("\n| " + std::string(k.what));
    REQUIRE(row != std::string::npos);
    const std::string line = doc.substr(row + 1, doc.find('\n', row + 1) - row - 1);
    const std::uint64_t mib = 1024 * 1024;
    const std::string size = k.max_bytes % (1024 * mib) == 0 ? std::to_string(k.max_bytes / (1024 * mib)) + " GiB"
                                                              : std::to_string(k.max_bytes / mib) + " MiB";
    CHECK(line.ends_with("| " + size + " |"));
  }
}

TEST_CASE("printable keeps UTF-8 and replaces control bytes and invalid sequences") {
  CHECK(printable("M\xc3\xbcller \xe2\x80\x94 8\xc3\x97H100") == "M\xc3\xbcller \xe2\x80\x94 8\xc3\x97H100");
  CHECK(printable(std::string("a\0b\x1b[0m\n", 8)) == "a?b?[0m?");
  CHECK(printable("\xff\xfe") == "??");
  CHECK(printable("\xc0\xaf") == "??");          // overlong '/'
  CHECK(printable("\xed\xa0\x80") == "???");     // a UTF-16 surrogate
  CHECK(printable("\xe2\x80") == "??");          // truncated at the end
  CHECK(printable("\xf0\x9f\x98\x80") == "\xf0\x9f\x98\x80");
}

TEST_CASE("closest: the same suggestion as the full edit distance, and a huge key costs nothing") {
  auto full = [](std::string_view a, std::string_view b) {
    std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (std::size_t j = 1; j <= b.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0u : 1u)});
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  auto reference = [&](std::string_view key, const std::vector<std::string>& cs) -> std::optional<std::string> {
    std::optional<std::string> best;
    std::size_t best_d = 0;
    for (const auto& c : cs) {
      const std::size_t d = full(key, c);
      if (!best || d < best_d) best = c, best_d = d;
    }
    if (best && best_d <= std::max<std::size_t>(2, key.size() / 3)) return best;
    return std::nullopt;
  };
  const std::vector<std::string> flags = {"--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length",
                                          "--micro-batch-size", "--global-batch-size", "--tensor-model-parallel-size",
                                          "--ffn-hidden-size", "--num-query-groups", "--vocab-size"};
  CHECK(importer::closest("--num-layer", flags) == std::optional<std::string>("--num-layers"));
  CHECK(importer::closest("--hiden-size", flags) == std::optional<std::string>("--hidden-size"));
  CHECK_FALSE(importer::closest("--zzz", flags));
  CHECK_FALSE(importer::closest(std::string(100000, 'x'), flags));
  // Deterministic pseudo-random keys: mutations of the flags and unrelated words.
  std::uint64_t state = 12345;
  auto next = [&] { return state = state * 6364136223846793005ULL + 1442695040888963407ULL; };
  for (int i = 0; i < 3000; ++i) {
    std::string key = flags[next() % flags.size()];
    const int edits = static_cast<int>(next() % 8);
    for (int e = 0; e < edits && !key.empty(); ++e) {
      const std::size_t at = next() % key.size();
      switch (next() % 3) {
        case 0: key.erase(at, 1); break;
        case 1: key.insert(at, 1, static_cast<char>('a' + next() % 26)); break;
        default: key[at] = static_cast<char>('a' + next() % 26);
      }
    }
    CAPTURE(key);
    CHECK(importer::closest(key, flags) == reference(key, flags));
  }
}

// plans/validated_mfu.toml (spec/validated_mfu.hpp): the shipped table loads and answers by group;
// a malformed one is a one-line InputError naming the key.
TEST_CASE("the validated MFU envelope: lookup by group, the note above it, malformed tables refused") {
  const auto v = validated_mfu("megatron", "sm90", false, "none", 4096);
  REQUIRE(v.has_value());
  // Megatron-LM's H100 weak-scaling runs (dev.csv): GPT-314B on 3,072 GPUs is the highest of nine.
  CHECK(v->run == "mlm-h100-weak-gpt314b-3072g");
  CHECK(v->runs == 9);
  CHECK(v->mfu == doctest::Approx(0.476).epsilon(0.01));
  CHECK_FALSE(validated_mfu("megatron", "sm90", false, "none", 16384).has_value());  // beyond 8192 tokens
  CHECK_FALSE(validated_mfu("megatron", "sm120", false, "none", 4096).has_value());  // nothing measured there
  Plan p;
  p.runtime = Runtime::megatron;
  CHECK(validated_mfu_of(p, "sm90", false, 4096)->run == v->run);
  CHECK(beyond_validated_note(v->mfu - 0.01, *v).empty());
  const std::string note = beyond_validated_note(0.551, *v);
  CHECK(note.find("MFU 55.1% is above every published megatron run on sm90") == 0);
  CHECK(note.find("9 runs, at most 47.6%, mlm-h100-weak-gpt314b-3072g") != std::string::npos);

  const std::string good = "max_seq_len = 8192\n[[group]]\nruntime = \"megatron\"\ngpu_arch = \"sm90\"\nmoe = false\n"
                           "fp8 = \"none\"\nmfu = 0.5\nrun = \"r\"\nruns = 1\n";
  auto error_of = [&](const std::string& text) -> std::pair<std::string, std::string> {
    const fs::path f = temp_dir() / "validated_mfu.toml";
    std::ofstream(f) << text;
    try {
      (void)load_validated_mfu(f.string());
    } catch (const InputError& e) {
      return {e.key(), e.reason()};
    }
    return {"", ""};
  };
  CHECK(error_of(good).first.empty());
  CHECK(error_of(replace(good, "mfu = 0.5", "mfu = 1.5")).first == "group[0].mfu");
  CHECK(error_of(replace(good, "max_seq_len = 8192", "max_seq_len = 4096")).first == "max_seq_len");
  CHECK(error_of(replace(good, "runs = 1\n", "")).first == "group[0].runs");
  CHECK(error_of(replace(good, "runs = 1", "runz = 1")).first.find("group[0]") == 0);
}
