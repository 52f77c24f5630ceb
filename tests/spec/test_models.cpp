// Shipped models, model TOML loading, Hugging Face config import and their error messages.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "spec/error.hpp"
#include "spec/model_loader.hpp"
#include "spec/model_spec.hpp"
#include "test_paths.hpp"

namespace fs = std::filesystem;
using meshplan::InputError;
using meshplan::ModelSpec;
using nlohmann::json;

namespace {

// Real config.json files, verbatim.
constexpr const char* kLlama31_8B = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

constexpr const char* kMixtral8x7B = R"({
  "architectures": ["MixtralForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mixtral",
  "num_attention_heads": 32,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "num_local_experts": 8,
  "output_router_logits": false,
  "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0,
  "router_aux_loss_coef": 0.02,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.36.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
})";

// mosaicml/mpt-7b: ALiBi, no biases, vocab 50432. It says learned_pos_emb true, but MPT drops the
// position table when ALiBi is on.
constexpr const char* kMpt7BReleased = R"({
  "architectures": ["MPTForCausalLM"],
  "attn_config": {"alibi": true, "alibi_bias_max": 8, "attn_impl": "torch", "attn_pdrop": 0,
                  "attn_type": "multihead_attention", "attn_uses_sequence_id": false, "clip_qkv": null,
                  "prefix_lm": false, "qk_ln": false, "softmax_scale": null},
  "auto_map": {"AutoConfig": "configuration_mpt.MPTConfig", "AutoModelForCausalLM": "modeling_mpt.MPTForCausalLM"},
  "d_model": 4096,
  "emb_pdrop": 0,
  "embedding_fraction": 1.0,
  "expansion_ratio": 4,
  "init_config": {"emb_init_std": null, "emb_init_uniform_lim": null, "fan_mode": "fan_in",
                  "init_div_is_residual": true, "init_gain": 0, "init_nonlinearity": "relu",
                  "init_std": 0.02, "name": "kaiming_normal_", "verbose": 0},
  "init_device": "cpu",
  "learned_pos_emb": true,
  "logit_scale": null,
  "max_seq_len": 2048,
  "model_type": "mpt",
  "n_heads": 32,
  "n_layers": 32,
  "no_bias": true,
  "norm_type": "low_precision_layernorm",
  "resid_pdrop": 0,
  "tokenizer_name": "EleutherAI/gpt-neox-20b",
  "torch_dtype": "bfloat16",
  "transformers_version": "4.28.1",
  "use_cache": false,
  "verbose": 0,
  "vocab_size": 50432
})";

constexpr const char* kGpt2Small = R"({
  "activation_function": "gelu_new",
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 1024,
  "n_embd": 768,
  "n_head": 12,
  "n_layer": 12,
  "n_positions": 1024,
  "resid_pdrop": 0.1,
  "summary_activation": null,
  "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true,
  "summary_type": "cls_index",
  "summary_use_proj": true,
  "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
  "vocab_size": 50257
})";

constexpr const char* kPythia160M = R"({
  "architectures": ["GPTNeoXForCausalLM"],
  "bos_token_id": 0,
  "eos_token_id": 0,
  "hidden_act": "gelu",
  "hidden_size": 768,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "layer_norm_eps": 1e-05,
  "max_position_embeddings": 2048,
  "model_type": "gpt_neox",
  "num_attention_heads": 12,
  "num_hidden_layers": 12,
  "rotary_emb_base": 10000,
  "rotary_pct": 0.25,
  "tie_word_embeddings": false,
  "torch_dtype": "float16",
  "transformers_version": "4.24.0",
  "use_cache": true,
  "use_parallel_residual": true,
  "vocab_size": 50304
})";

// llm-foundry scripts/train/yamls/pretrain/mpt-7b.yaml `model:` node as the YAML importer hands it
// over (model_type added, ${variables.max_seq_len} resolved).
json foundry_mpt_node(std::int64_t d_model, int n_heads, int n_layers, std::int64_t max_seq_len) {
  return json{{"model_type", "mpt"},       {"name", "mpt_causal_lm"},      {"init_device", "meta"},
              {"d_model", d_model},        {"n_heads", n_heads},           {"n_layers", n_layers},
              {"expansion_ratio", 4},      {"max_seq_len", max_seq_len},   {"vocab_size", 50368},
              {"attn_config", {{"attn_impl", "flash"}}}};
}

class TempDir {
public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("meshplan-test-models-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  fs::path write(const std::string& name, const std::string& text) const {
    const fs::path p = path_ / name;
    std::ofstream(p) << text;
    return p;
  }

private:
  fs::path path_;
};

// A valid dense model TOML; error cases edit one line of it.
const std::string kGoodToml = R"(name = "tiny"
n_layers = 2
d_model = 64
n_heads = 4
n_kv_heads = 2
head_dim = 16
mlp = "swiglu"
ffn_hidden = 256
vocab = 1000
tied_embeddings = false
pos_emb = "rope"
max_seq_len = 128
norm = "rmsnorm"
norm_bias = false
linear_bias = false
)";

std::string replace_line(std::string text, const std::string& key, const std::string& new_line) {
  const auto start = text.find(key + " = ");
  REQUIRE(start != std::string::npos);
  const auto end = text.find('\n', start);
  return text.replace(start, end - start, new_line);
}

// Runs `f`, expects an InputError naming `file` and `key`, returns the message.
template <typename F>
std::string expect_input_error(F&& f, const std::string& file, const std::string& key) {
  try {
    f();
  } catch (const InputError& e) {
    CHECK(e.file() == file);
    CHECK(e.key() == key);
    const std::string what = e.what();
    CHECK(what.find(file) != std::string::npos);
    if (!key.empty()) CHECK(what.find(key) != std::string::npos);
    return what;
  }
  FAIL("expected InputError for " << file << ": " << key);
  return {};
}

std::vector<std::string> split_csv_head(const std::string& line, std::size_t n_fields) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string cell;
  while (out.size() < n_fields && std::getline(ss, cell, ',')) out.push_back(cell);
  return out;
}

}  // namespace

TEST_CASE("every shipped model is within 0.5 % of its published count") {
  const std::vector<std::string> names = meshplan::list_models();
  const std::vector<std::string> expected = {"deepseek-v3", "gpt-oss-120b", "gpt3-175b",   "llama2-13b",
                                             "llama2-70b",  "llama2-7b",    "llama3.1-405b", "llama3.1-70b",
                                             "llama3.1-8b", "mixtral-8x7b", "mpt-30b",     "mpt-70b",
                                             "mpt-7b",      "qwen3-235b-a22b", "qwen3-30b-a3b"};
  CHECK(names == expected);
  for (const auto& name : names) {
    CAPTURE(name);
    const ModelSpec m = meshplan::load_model(name);
    CHECK(m.name == name);
    REQUIRE(m.n_params_published.has_value());
    CHECK_FALSE(m.n_params_source.empty());
    const double rel = std::abs(static_cast<double>(meshplan::n_params(m)) -
                                static_cast<double>(*m.n_params_published)) /
                       static_cast<double>(*m.n_params_published);
    CHECK(rel < 0.005);
  }
}

TEST_CASE("shipped counts match the published numbers exactly where those are exact") {
  // Hand derivation, llama3.1-8b: attention 4096*4096*2 + 2*4096*1024 = 41,943,040; SwiGLU
  // 3*4096*14336 = 176,160,768; two RMSNorms 8,192; per layer 218,112,000 x 32 = 6,979,584,000;
  // embedding + untied head 2*128256*4096 = 1,050,673,152; final norm 4,096.
  const ModelSpec l8 = meshplan::load_model("llama3.1-8b");
  const meshplan::ParamCounts c = meshplan::param_counts(l8);
  CHECK(c.attention_per_layer == 41'943'040);
  CHECK(c.mlp_per_layer == 176'160'768);
  CHECK(c.norm_per_layer == 8'192);
  CHECK(c.embedding == 525'336'576);
  CHECK(c.lm_head == 525'336'576);
  CHECK(meshplan::n_params(l8) == 8'030'261'248);

  // mpt-7b preset at seq 2048: attention 4d^2 + 4d = 67,125,248; MLP 8d^2 + 5d = 134,238,208;
  // two biased LayerNorms 16,384; x32 = 6,444,154,880; tied wte 206,307,328; wpe 2048*4096 =
  // 8,388,608; final LayerNorm 8,192.
  const ModelSpec mpt = meshplan::load_model("mpt-7b");
  const meshplan::ParamCounts cm = meshplan::param_counts(mpt);
  CHECK(cm.attention_per_layer == 67'125'248);
  CHECK(cm.mlp_per_layer == 134'238'208);
  CHECK(cm.norm_per_layer == 16'384);
  CHECK(cm.position == 8'388'608);
  CHECK(cm.lm_head == 0);
  CHECK(meshplan::n_params(mpt) == 6'658'859'008);

  CHECK(meshplan::n_params(meshplan::load_model("mpt-30b")) == 29'975'214'080);
  CHECK(meshplan::n_params(meshplan::load_model("mpt-70b")) == 64'862'437'376);
  CHECK(meshplan::n_params(meshplan::load_model("llama3.1-70b")) == 70'553'706'496);
  CHECK(meshplan::n_params(meshplan::load_model("llama3.1-405b")) == 405'853'388'800);
  CHECK(meshplan::n_params(meshplan::load_model("llama2-7b")) == 6'738'415'616);
  CHECK(meshplan::n_params(meshplan::load_model("llama2-13b")) == 13'015'864'320);
  CHECK(meshplan::n_params(meshplan::load_model("llama2-70b")) == 68'976'648'192);
  const ModelSpec mix = meshplan::load_model("mixtral-8x7b");
  CHECK(meshplan::n_params(mix) == 46'702'792'704);
  CHECK(meshplan::n_active_params(mix) == 12'879'925'248);
  // GPT-3: 50257-token vocabulary, tied, learned 2048 positions, biases everywhere.
  CHECK(meshplan::n_params(meshplan::load_model("gpt3-175b")) == 174'604'259'328);
}

TEST_CASE("MoE models: total and active counts by hand, and the published figures") {
  // Published totals and active counts are rounded (30.5B / 3.3B, 235B / 22B, 671B / 37B,
  // 116.83B / 5.13B): two or three significant figures, so within 2 % of the exact count.
  auto near = [](std::int64_t got, double published) {
    return std::abs(static_cast<double>(got) - published) / published < 0.02;
  };
  // Qwen3-30B-A3B, per layer: attention 2048x4096 x2 + 2x2048x512 + QK-norm 2x128 = 18,874,624;
  // experts 128 x 3 x 2048 x 768 = 603,979,776, router 262,144; norms 4,096 -> 623,120,640 x 48
  // = 29,909,790,720; embedding + head 2 x 151936 x 2048 = 622,329,856; final norm 2,048.
  const ModelSpec q30 = meshplan::load_model("qwen3-30b-a3b");
  CHECK(q30.qk_norm);
  CHECK(q30.head_dim * q30.n_heads == 2 * q30.d_model);
  CHECK(meshplan::param_counts(q30).attention_per_layer == 18'874'624);
  CHECK(meshplan::n_params(q30) == 30'532'122'624);
  // Active: 8 of 128 experts: (18,874,624 + 37,748,736 + 262,144 + 4,096) x 48 + 622,331,904.
  CHECK(meshplan::n_active_params(q30) == 3'353'032'704);
  CHECK(near(meshplan::n_active_params(q30), 3.3e9));

  const ModelSpec q235 = meshplan::load_model("qwen3-235b-a22b");
  CHECK(q235.head_dim == 128);
  CHECK(q235.d_model / q235.n_heads == 64);
  CHECK(meshplan::n_params(q235) == 235'093'634'560);
  CHECK(meshplan::n_active_params(q235) == 22'190'763'520);
  CHECK(near(meshplan::n_active_params(q235), 22e9));

  // DeepSeek-V3: MLA per layer q_a 7168x1536 + 1536 + q_b 1536x128x192 + kv_a 7168x576 + 512 +
  // kv_b 512x128x256 + o 16384x7168 = 187,107,328; MoE layer 257 experts x 3 x 7168 x 2048 +
  // router 7168 x 256; 3 dense layers of 3 x 7168 x 18432.
  const ModelSpec ds = meshplan::load_model("deepseek-v3");
  CHECK(ds.attention == meshplan::AttentionKind::mla);
  CHECK(ds.moe.n_dense_layers == 3);
  CHECK(ds.moe.n_shared_experts == 1);
  const meshplan::ParamCounts dc = meshplan::param_counts(ds);
  CHECK(dc.attention_per_layer == 187'107'328);
  CHECK(dc.dense_mlp_per_layer == 3LL * 7168 * 18432);
  CHECK(meshplan::n_params(ds) == 671'026'404'352);
  CHECK(near(meshplan::n_params(ds), 671e9));
  CHECK(meshplan::n_active_params(ds) == 37'552'282'624);
  CHECK(near(meshplan::n_active_params(ds), 37e9));
  // The MTP module as an option: one more MoE block, its 2d -> d projection and three norms; the
  // embedding and head are shared (the 685B checkpoint stores copies of them: 1.85B).
  ModelSpec ds_mtp = ds;
  ds_mtp.n_mtp_layers = 1;
  CHECK(meshplan::n_params(ds_mtp) - meshplan::n_params(ds) == dc.per_layer() + 2LL * 7168 * 7168 + 3 * 7168);
  CHECK(near(meshplan::n_params(ds_mtp) + 2 * dc.embedding, 685e9));

  // gpt-oss-120b: biases on q, k, v, o, on every expert and on the router; active counts the
  // unembedding but not the embedding (model card).
  const ModelSpec oss = meshplan::load_model("gpt-oss-120b");
  CHECK(meshplan::n_params(oss) == 116'829'154'368);
  CHECK(near(meshplan::n_params(oss), 116.83e9));
  const std::int64_t oss_active = meshplan::n_active_params(oss) - meshplan::param_counts(oss).embedding;
  CHECK(oss_active == 5'132'847'168);
  CHECK(near(oss_active, 5.13e9));
}

TEST_CASE("HF import: Qwen3-MoE, DeepSeek-V3 and gpt-oss config.json fields") {
  // The shape fields of the hub config.json files (Qwen/Qwen3-30B-A3B, deepseek-ai/DeepSeek-V3,
  // openai/gpt-oss-120b).
  const json qwen = json::parse(R"({
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "attention_bias": false,
    "decoder_sparse_step": 1, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 6144, "max_position_embeddings": 40960, "mlp_only_layers": [],
    "moe_intermediate_size": 768, "norm_topk_prob": true, "num_attention_heads": 32,
    "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": false, "vocab_size": 151936})");
  const ModelSpec q = meshplan::import_hf_config(qwen, "Qwen3-30B-A3B/config.json");
  CHECK(q.qk_norm);
  CHECK(q.moe.n_experts == 128);
  CHECK(q.moe.expert_ffn == 768);
  CHECK(meshplan::n_params(q) == meshplan::n_params(meshplan::load_model("qwen3-30b-a3b")));
  json interleaved = qwen;
  interleaved["decoder_sparse_step"] = 2;
  CHECK_THROWS_AS(meshplan::import_hf_config(interleaved, "x.json"), InputError);

  const json dsv3 = json::parse(R"({
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "first_k_dense_replace": 3,
    "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
    "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
    "n_shared_experts": 1, "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
    "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06, "tie_word_embeddings": false, "topk_group": 4,
    "v_head_dim": 128, "vocab_size": 129280})");
  const ModelSpec d = meshplan::import_hf_config(dsv3, "DeepSeek-V3/config.json");
  CHECK(d.attention == meshplan::AttentionKind::mla);
  CHECK(d.mla.q_lora_rank == 1536);
  CHECK(d.n_mtp_layers == 1);
  ModelSpec d_main = d;
  d_main.n_mtp_layers = 0;
  CHECK(meshplan::n_params(d_main) == meshplan::n_params(meshplan::load_model("deepseek-v3")));

  const json oss = json::parse(R"({
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": true, "head_dim": 64,
    "hidden_size": 2880, "intermediate_size": 2880, "max_position_embeddings": 131072,
    "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 36, "num_key_value_heads": 8,
    "num_local_experts": 128, "sliding_window": 128, "tie_word_embeddings": false, "vocab_size": 201088})");
  const ModelSpec o = meshplan::import_hf_config(oss, "gpt-oss/config.json");
  const ModelSpec shipped = meshplan::load_model("gpt-oss-120b");
  CHECK(meshplan::n_params(o) == meshplan::n_params(shipped));
  // GptOssConfig's default layer_types: sliding at even layers, full at odd ones.
  CHECK(o.sliding_window == 128);
  CHECK(o.full_attention_every == 2);
  CHECK(shipped.sliding_window == 128);
  CHECK(shipped.full_attention_every == 2);
  CHECK(o.is_windowed_layer(0));
  CHECK_FALSE(o.is_windowed_layer(1));
  CHECK(o.is_windowed_layer(34));
  CHECK_FALSE(o.is_windowed_layer(35));
  // The written layer_types agree; null sliding_window switches the window off.
  json typed = oss;
  typed["layer_types"] = json::array();
  for (int i = 0; i < 36; ++i) typed["layer_types"].push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
  CHECK(meshplan::import_hf_config(typed, "x.json").full_attention_every == 2);
  json off = oss;
  off["sliding_window"] = nullptr;
  CHECK(meshplan::import_hf_config(off, "x.json").sliding_window == 0);
  // Gemma-3-style five windowed layers then a full one: every 6th full.
  typed["layer_types"] = json::array();
  for (int i = 0; i < 36; ++i) typed["layer_types"].push_back(i % 6 == 5 ? "full_attention" : "sliding_attention");
  CHECK(meshplan::import_hf_config(typed, "x.json").full_attention_every == 6);
  // A pattern that is not one full layer every N is refused, naming the key.
  typed["layer_types"][7] = "sliding_attention";
  typed["layer_types"][8] = "full_attention";
  CHECK(expect_input_error([&] { (void)meshplan::import_hf_config(typed, "x.json"); }, "x.json", "layer_types")
            .find("layer 8") != std::string::npos);
  typed["layer_types"] = json::array({"sliding_attention"});
  CHECK(expect_input_error([&] { (void)meshplan::import_hf_config(typed, "x.json"); }, "x.json", "layer_types")
            .find("36") != std::string::npos);
  // Qwen3 writes a window it leaves off; turned on, its pattern is not modelled.
  json qwen_window = qwen;
  qwen_window["sliding_window"] = 4096;
  CHECK(meshplan::import_hf_config(qwen_window, "x.json").sliding_window == 0);
  qwen_window["use_sliding_window"] = true;
  CHECK_THROWS_AS(meshplan::import_hf_config(qwen_window, "x.json"), InputError);
}

TEST_CASE("HF import: Llama-3.1-8B") {
  const ModelSpec m = meshplan::import_hf_config(json::parse(kLlama31_8B), "Llama-3.1-8B/config.json");
  CHECK(m.name == "Llama-3.1-8B");
  CHECK(m.n_layers == 32);
  CHECK(m.n_kv_heads == 8);
  CHECK(m.head_dim == 128);
  CHECK(m.mlp == meshplan::MlpKind::swiglu);
  CHECK(m.norm == meshplan::NormKind::rmsnorm);
  CHECK(m.pos_emb == meshplan::PosEmb::rope);
  CHECK(m.max_seq_len == 131072);
  CHECK_FALSE(m.tied_embeddings);
  CHECK_FALSE(m.n_params_published.has_value());
  CHECK(meshplan::n_params(m) == 8'030'261'248);
  // Same shapes as the shipped file.
  CHECK(meshplan::n_params(m) == meshplan::n_params(meshplan::load_model("llama3.1-8b")));

  // transformers v5 folds rope_theta into rope_parameters; both spellings are accepted.
  json v5 = json::parse(kLlama31_8B);
  v5.erase("rope_theta");
  v5["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "llama3"}, {"factor", 8.0}};
  CHECK(meshplan::n_params(meshplan::import_hf_config(v5, "v5.json")) == 8'030'261'248);

  // Without num_key_value_heads Llama is multi-head.
  json mha = json::parse(kLlama31_8B);
  mha.erase("num_key_value_heads");
  CHECK(meshplan::import_hf_config(mha, "mha.json").n_kv_heads == 32);
}

TEST_CASE("HF import: Mixtral-8x7B") {
  const ModelSpec m = meshplan::import_hf_config(json::parse(kMixtral8x7B), "config.json");
  CHECK(m.moe.n_experts == 8);
  CHECK(m.moe.top_k == 2);
  CHECK(m.moe.expert_ffn == 14336);
  CHECK(m.max_seq_len == 32768);
  CHECK(meshplan::n_params(m) == 46'702'792'704);
  CHECK(meshplan::n_active_params(m) == 12'879'925'248);

  // MixtralConfig defaults: 8 kv heads, 8 experts, top-2; num_experts aliases num_local_experts.
  json bare = json::parse(kMixtral8x7B);
  bare.erase("num_key_value_heads");
  bare.erase("num_local_experts");
  bare.erase("num_experts_per_tok");
  CHECK(meshplan::n_params(meshplan::import_hf_config(bare, "bare.json")) == 46'702'792'704);
  json alias = json::parse(kMixtral8x7B);
  alias.erase("num_local_experts");
  alias["num_experts"] = 4;
  CHECK(meshplan::import_hf_config(alias, "alias.json").moe.n_experts == 4);
}

TEST_CASE("HF import: MPT-7B released (ALiBi, no_bias)") {
  const ModelSpec m = meshplan::import_hf_config(json::parse(kMpt7BReleased), "mpt-7b/config.json");
  CHECK(m.pos_emb == meshplan::PosEmb::alibi);
  CHECK_FALSE(m.linear_bias);
  CHECK_FALSE(m.norm_bias);
  CHECK(m.norm == meshplan::NormKind::layernorm);
  CHECK(m.tied_embeddings);
  CHECK(m.ffn_hidden == 16384);
  CHECK(m.vocab == 50432);
  CHECK(meshplan::n_params(m) == 6'649'286'656);
}

TEST_CASE("HF import: llm-foundry mpt_causal_lm YAML node reproduces the benchmark table") {
  CHECK(meshplan::n_params(meshplan::import_hf_config(foundry_mpt_node(4096, 32, 32, 2048), "mpt-7b.yaml")) ==
        6'658'859'008);
  CHECK(meshplan::n_params(meshplan::import_hf_config(foundry_mpt_node(4096, 32, 32, 8192), "mpt-7b.yaml")) ==
        6'684'024'832);
  CHECK(meshplan::n_params(meshplan::import_hf_config(foundry_mpt_node(7168, 56, 48, 8192), "mpt-30b.yaml")) ==
        30'019'254'272);
  // The importer's defaults are MPTConfig's: a node with only the shape keys is the same model.
  const json minimal = {{"model_type", "mpt"}, {"d_model", 4096}, {"n_heads", 32}, {"n_layers", 32}};
  CHECK(meshplan::n_params(meshplan::import_hf_config(minimal, "min.yaml")) == 6'658'859'008);
  // Same shapes as the shipped preset.
  CHECK(meshplan::n_params(meshplan::import_hf_config(foundry_mpt_node(4096, 32, 32, 2048), "x")) ==
        meshplan::n_params(meshplan::load_model("mpt-7b")));

  // Grouped-query attention and a GLU FFN through the nested configs.
  json gqa = foundry_mpt_node(4096, 32, 32, 2048);
  gqa["attn_config"] = {{"attn_type", "grouped_query_attention"}, {"kv_n_heads", 8}};
  gqa["ffn_config"] = {{"ffn_type", "mptglu"}, {"ffn_hidden_size", 11008}};
  const ModelSpec g = meshplan::import_hf_config(gqa, "gqa.yaml");
  CHECK(g.n_kv_heads == 8);
  CHECK(g.mlp == meshplan::MlpKind::swiglu);
  CHECK(g.ffn_hidden == 11008);
}

TEST_CASE("llm-foundry benchmark rows: every MPT n_params reproduces exactly" *
          SKIP_UNLESS_SHARED("validation/dev.csv")) {
  std::ifstream csv(meshplan::test::shared_root() / "validation" / "dev.csv");
  REQUIRE(csv);
  std::string line;
  // header: id,source,model,n_params,n_layers,d_model,n_heads,n_kv_heads,ffn_hidden,vocab,seq_len,...
  std::getline(csv, line);
  int n_checked = 0;
  while (std::getline(csv, line)) {
    const auto f = split_csv_head(line, 11);
    if (f.size() < 11 || f[1] != "llm-foundry" || f[2].rfind("MPT-", 0) != 0) continue;
    CAPTURE(f[0]);
    json node = foundry_mpt_node(std::stoll(f[5]), std::stoi(f[6]), std::stoi(f[4]), std::stoll(f[10]));
    node["vocab_size"] = std::stoll(f[9]);
    CHECK(meshplan::n_params(meshplan::import_hf_config(node, f[0])) == std::stoll(f[3]));
    ++n_checked;
  }
  CHECK(n_checked > 10);
}

TEST_CASE("HF import: GPT-2 small and GPT-NeoX (pythia-160m)") {
  const ModelSpec g = meshplan::import_hf_config(json::parse(kGpt2Small), "gpt2/config.json");
  CHECK(g.name == "gpt2");
  CHECK(g.ffn_hidden == 3072);
  CHECK(g.pos_emb == meshplan::PosEmb::learned);
  CHECK(g.max_seq_len == 1024);
  CHECK(g.tied_embeddings);
  CHECK(meshplan::n_params(g) == 124'439'808);

  // Pythia table: 162,322,944 total parameters for pythia-160m (untied embed_in/embed_out).
  const ModelSpec p = meshplan::import_hf_config(json::parse(kPythia160M), "pythia-160m/config.json");
  CHECK(p.pos_emb == meshplan::PosEmb::rope);
  CHECK(p.linear_bias);
  CHECK(p.norm_bias);
  CHECK_FALSE(p.tied_embeddings);
  CHECK(meshplan::n_params(p) == 162'322'944);
}

TEST_CASE("HF import: family detection falls back on field names") {
  json llama = json::parse(kLlama31_8B);
  llama.erase("model_type");
  llama.erase("architectures");
  CHECK(meshplan::n_params(meshplan::import_hf_config(llama, "x.json")) == 8'030'261'248);
  json gpt2 = json::parse(kGpt2Small);
  gpt2.erase("model_type");
  gpt2.erase("architectures");
  CHECK(meshplan::n_params(meshplan::import_hf_config(gpt2, "x.json")) == 124'439'808);
  json neox = json::parse(kPythia160M);
  neox.erase("model_type");
  neox.erase("architectures");
  CHECK(meshplan::n_params(meshplan::import_hf_config(neox, "x.json")) == 162'322'944);
  json mpt = json::parse(kMpt7BReleased);
  mpt.erase("model_type");
  mpt.erase("architectures");
  CHECK(meshplan::n_params(meshplan::import_hf_config(mpt, "x.json")) == 6'649'286'656);
  // architectures alone is enough.
  json arch = json::parse(kMixtral8x7B);
  arch.erase("model_type");
  CHECK(meshplan::import_hf_config(arch, "x.json").moe.n_experts == 8);
}

TEST_CASE("load_model reads a config.json and a model TOML by path") {
  TempDir dir;
  const fs::path cfg = dir.write("config.json", kGpt2Small);
  CHECK(meshplan::n_params(meshplan::load_model(cfg.string())) == 124'439'808);
  const fs::path toml = dir.write("tiny.toml", kGoodToml);
  const ModelSpec t = meshplan::load_model(toml.string());
  CHECK(t.name == "tiny");
  // 2 * (64*64 + 2*64*32 + 64*64 + 3*64*256 + 2*64) + 2*1000*64 + 64
  CHECK(meshplan::n_params(t) == 2 * (4096 + 4096 + 4096 + 49152 + 128) + 128000 + 64);
  // Defaults: name from the file, n_kv_heads = n_heads, head_dim = d_model / n_heads.
  std::string defaults = kGoodToml;
  defaults = replace_line(defaults, "name", "");
  defaults = replace_line(defaults, "n_kv_heads", "");
  defaults = replace_line(defaults, "head_dim", "");
  const ModelSpec d = meshplan::load_model(dir.write("defaults.toml", defaults).string());
  CHECK(d.name == "defaults");
  CHECK(d.n_kv_heads == 4);
  CHECK(d.head_dim == 16);
}

TEST_CASE("Hugging Face ids map to shipped models") {
  using meshplan::shipped_model_for_hf_id;
  CHECK(shipped_model_for_hf_id("meta-llama/Meta-Llama-3.1-8B") == "llama3.1-8b");
  CHECK(shipped_model_for_hf_id("meta-llama/Llama-3.1-8B") == "llama3.1-8b");
  CHECK(shipped_model_for_hf_id("meta-llama/Meta-Llama-3-8B") == "llama3.1-8b");
  CHECK(shipped_model_for_hf_id("meta-llama/Meta-Llama-3-8B-Instruct") == "llama3.1-8b");
  CHECK(shipped_model_for_hf_id("meta-llama/Llama-3.1-8B-Instruct") == "llama3.1-8b");
  CHECK(shipped_model_for_hf_id("META-LLAMA/llama-3.1-70b") == "llama3.1-70b");
  CHECK(shipped_model_for_hf_id("meta-llama/Meta-Llama-3.1-405B-Instruct") == "llama3.1-405b");
  CHECK(shipped_model_for_hf_id("meta-llama/Llama-2-7b-hf") == "llama2-7b");
  CHECK(shipped_model_for_hf_id("meta-llama/Llama-2-13b-chat-hf") == "llama2-13b");
  CHECK(shipped_model_for_hf_id("meta-llama/Llama-2-70b-hf") == "llama2-70b");
  CHECK(shipped_model_for_hf_id("mistralai/Mixtral-8x7B-v0.1") == "mixtral-8x7b");
  CHECK(shipped_model_for_hf_id("Qwen/Qwen3-30B-A3B") == "qwen3-30b-a3b");
  CHECK(shipped_model_for_hf_id("Qwen/Qwen3-235B-A22B") == "qwen3-235b-a22b");
  CHECK(shipped_model_for_hf_id("deepseek-ai/DeepSeek-V3") == "deepseek-v3");
  CHECK(shipped_model_for_hf_id("openai/gpt-oss-120b") == "gpt-oss-120b");
  CHECK(shipped_model_for_hf_id("mistralai/Mixtral-8x7B-Instruct-v0.1") == "mixtral-8x7b");
  CHECK(shipped_model_for_hf_id("mosaicml/mpt-7b") == "mpt-7b");
  CHECK(shipped_model_for_hf_id("https://huggingface.co/meta-llama/Llama-3.1-8B/") == "llama3.1-8b");
  CHECK_FALSE(shipped_model_for_hf_id("mosaicml/mpt-30b").has_value());  // 64 heads, not the preset
  CHECK_FALSE(shipped_model_for_hf_id("Qwen/Qwen2-7B").has_value());
  CHECK_FALSE(shipped_model_for_hf_id("").has_value());
  // Every target exists.
  const auto names = meshplan::list_models();
  for (const char* id : {"meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-405B",
                         "meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-13b-hf", "meta-llama/Llama-2-70b-hf",
                         "mistralai/Mixtral-8x7B-v0.1", "mosaicml/mpt-7b"})
    CHECK(std::find(names.begin(), names.end(), *shipped_model_for_hf_id(id)) != names.end());
}

TEST_CASE("bad model TOML: each error names the file and the key") {
  TempDir dir;
  auto load = [&](const std::string& stem, const std::string& text) {
    const std::string path = dir.write(stem + ".toml", text).string();
    return std::make_pair(path, [path] { (void)meshplan::load_model(path); });
  };
  {
    auto [path, f] = load("missing", replace_line(kGoodToml, "d_model", ""));
    CHECK(expect_input_error(f, path, "d_model").find("missing") != std::string::npos);
  }
  {
    auto [path, f] = load("unknown", kGoodToml + "n_layer = 3\n");
    const std::string msg = expect_input_error(f, path, "n_layer");
    CHECK(msg.find("unknown key") != std::string::npos);
    CHECK(msg.find("line 16") != std::string::npos);
  }
  {
    auto [path, f] = load("type", replace_line(kGoodToml, "d_model", "d_model = \"64\""));
    CHECK(expect_input_error(f, path, "d_model").find("expected an integer") != std::string::npos);
  }
  {
    auto [path, f] = load("zero", replace_line(kGoodToml, "n_heads", "n_heads = 0"));
    expect_input_error(f, path, "n_heads");
  }
  {
    auto [path, f] = load("kv", replace_line(kGoodToml, "n_kv_heads", "n_kv_heads = 3"));
    CHECK(expect_input_error(f, path, "n_kv_heads").find("not divisible") != std::string::npos);
  }
  {
    auto [path, f] = load("enum", replace_line(kGoodToml, "mlp", "mlp = \"silu\""));
    CHECK(expect_input_error(f, path, "mlp").find("swiglu") != std::string::npos);
  }
  {
    auto [path, f] = load("window", kGoodToml + "full_attention_every = 2\n");
    CHECK(expect_input_error(f, path, "full_attention_every").find("sliding_window") != std::string::npos);
  }
  {
    auto [path, f] = load("window_negative", kGoodToml + "sliding_window = -1\n");
    expect_input_error(f, path, "sliding_window");
  }
  {
    auto [path, f] = load("normbias", replace_line(kGoodToml, "norm_bias", "norm_bias = true"));
    expect_input_error(f, path, "norm_bias");
  }
  {
    auto [path, f] = load("moekey", kGoodToml + "[moe]\nn_experts = 8\ntop_k = 2\nexpert_ffn = 128\nrouter = 1\n");
    expect_input_error(f, path, "moe.router");
  }
  {
    auto [path, f] = load("dense", kGoodToml + "[moe]\nn_experts = 8\ntop_k = 2\nexpert_ffn = 128\nn_dense_layers = 99\n");
    CHECK(expect_input_error(f, path, "moe.n_dense_layers").find("n_layers") != std::string::npos);
  }
  {
    auto [path, f] = load("mla", "attention = \"mla\"\n" + kGoodToml);
    CHECK(expect_input_error(f, path, "mla").find("kv_lora_rank") != std::string::npos);
  }
  {
    auto [path, f] = load("mlakey", "attention = \"mla\"\n" + kGoodToml + "[mla]\nkv_lora_rank = 8\nrope_head_dim = 8\n");
    expect_input_error(f, path, "mla.v_head_dim");
  }
  {
    auto [path, f] = load("topk", kGoodToml + "[moe]\nn_experts = 2\ntop_k = 4\nexpert_ffn = 128\n");
    expect_input_error(f, path, "moe.top_k");
  }
  {
    auto [path, f] = load("source", kGoodToml + "n_params_published = 12345\n");
    expect_input_error(f, path, "n_params_source");
  }
  {
    auto [path, f] = load("syntax", "name = \"x\"\nn_layers = 2\nd_model = = 64\n");
    const std::string msg = expect_input_error(f, path, "");
    CHECK(msg.find("line 3") != std::string::npos);
  }
}

TEST_CASE("bad config.json: each error names the file and the key") {
  const std::string file = "bad/config.json";
  auto expect = [&](json cfg, const std::string& key) {
    return expect_input_error([&] { (void)meshplan::import_hf_config(cfg, file); }, file, key);
  };
  {
    json c = json::parse(kLlama31_8B);
    c.erase("hidden_size");
    CHECK(expect(c, "hidden_size").find("missing") != std::string::npos);
  }
  {
    json c = json::parse(kLlama31_8B);
    c["num_attention_heads"] = "32";
    CHECK(expect(c, "num_attention_heads").find("string") != std::string::npos);
  }
  {
    json c = json::parse(kLlama31_8B);
    c["vocab_size"] = -5;
    expect(c, "vocab_size");
  }
  {
    json c = json::parse(kLlama31_8B);
    c["intermediate_size"] = 0;
    expect(c, "intermediate_size");
  }
  {
    json c = json::parse(kLlama31_8B);
    c["num_key_value_heads"] = 5;
    expect(c, "num_key_value_heads");
  }
  {
    json c = json::parse(kLlama31_8B);
    c["tie_word_embeddings"] = "false";
    expect(c, "tie_word_embeddings");
  }
  {
    json c = json::parse(kLlama31_8B);
    c["hidden_size"] = 4096.5;
    expect(c, "hidden_size");
  }
  {
    json c = json::parse(kLlama31_8B);
    c["model_type"] = "qwen2";
    c["architectures"] = {"Qwen2ForCausalLM"};
    CHECK(expect(c, "model_type").find("supported") != std::string::npos);
  }
  {
    json c = json::parse(kMpt7BReleased);
    c["attn_config"]["attn_type"] = "grouped_query_attention";
    c["attn_config"]["kv_n_heads"] = 3;
    expect(c, "attn_config.kv_n_heads");
  }
  {
    json c = json::parse(kMpt7BReleased);
    c["attn_config"] = "flash";
    expect(c, "attn_config");
  }
  {
    json c = json::parse(kMpt7BReleased);
    c["n_heads"] = 30;  // 4096 is not divisible by 30
    expect(c, "n_heads");
  }
  {
    json c = json::parse(kMixtral8x7B);
    c["num_experts_per_tok"] = 9;
    expect(c, "num_experts_per_tok");
  }
  {
    json c = json::parse(kLlama31_8B);
    c["attention_bias"] = true;  // mlp_bias stays false: not representable
    expect(c, "mlp_bias");
  }
}

TEST_CASE("bad paths and names") {
  TempDir dir;
  {
    const std::string path = dir.write("broken.json", "{\n  \"hidden_size\": 4096,\n  \"vocab_size\": }\n").string();
    const std::string msg = expect_input_error([&] { (void)meshplan::load_model(path); }, path, "");
    CHECK(msg.find("line 3") != std::string::npos);
  }
  {
    const std::string path = (dir.write("x", "") .parent_path() / "absent.toml").string();
    expect_input_error([&] { (void)meshplan::load_model(path); }, path, "");
  }
  {
    const std::string models_dir = (meshplan::test::data_root() / "models").string();
    try {
      (void)meshplan::load_model("llama-9000");
      FAIL("expected InputError");
    } catch (const InputError& e) {
      CHECK(e.key() == "llama-9000");
      const std::string msg = e.what();
      CHECK(msg.find("unknown model") != std::string::npos);
      for (const auto& name : meshplan::list_models()) CHECK(msg.find(name) != std::string::npos);
    }
  }
}

TEST_CASE("meshplan model --json keeps its contract") {
  const fs::path bin = meshplan::test::meshplan_bin();
  if (!fs::exists(bin)) return;
  auto run = [&](const std::string& args) {
    const std::string cmd = bin.string() + " " + args + " 2>/dev/null";
    std::string out;
    FILE* pipe = ::popen(cmd.c_str(), "r");
    REQUIRE(pipe != nullptr);
    std::array<char, 4096> buf{};
    while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
    CHECK(::pclose(pipe) == 0);
    return json::parse(out);
  };
  const json j = run("model llama3.1-8b --json");
  CHECK(j.at("name") == "llama3.1-8b");
  CHECK(j.at("n_params") == 8'030'261'248);
  CHECK(j.at("n_params_published") == 8'030'261'248);
  CHECK(j.at("n_layers") == 32);
  CHECK(j.at("d_model") == 4096);
  CHECK(j.at("n_kv_heads") == 8);
  const json& b = j.at("params_breakdown");
  CHECK(b.at("attention").get<std::int64_t>() + b.at("mlp").get<std::int64_t>() + b.at("norms").get<std::int64_t>() +
            b.at("embedding").get<std::int64_t>() + b.at("position").get<std::int64_t>() +
            b.at("lm_head").get<std::int64_t>() ==
        8'030'261'248);

  const json mix = run("model mixtral-8x7b --json");
  CHECK(mix.at("moe").at("n_experts") == 8);
  CHECK(mix.at("n_active_params") == 12'879'925'248);

  // DeepSeek-V3: the breakdown adds up with 3 dense layers and MLA; the added fields are there.
  const json ds = run("model deepseek-v3 --json");
  const json& db = ds.at("params_breakdown");
  CHECK(db.at("attention").get<std::int64_t>() + db.at("mlp").get<std::int64_t>() +
            db.at("norms").get<std::int64_t>() + db.at("embedding").get<std::int64_t>() +
            db.at("position").get<std::int64_t>() + db.at("lm_head").get<std::int64_t>() +
            db.at("mtp").get<std::int64_t>() ==
        ds.at("n_params").get<std::int64_t>());
  CHECK(ds.at("attention") == "mla");
  CHECK(ds.at("mla").at("kv_lora_rank") == 512);
  CHECK(ds.at("moe").at("n_dense_layers") == 3);

  const json list = run("model --list --json");
  CHECK(list.at("models").size() == meshplan::list_models().size());
}
