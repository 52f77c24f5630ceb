#include "spec/model_loader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <toml++/toml.h>

#include "spec/data_root.hpp"
#include "spec/error.hpp"
#include "spec/input_file.hpp"
#include "spec/limits.hpp"

namespace meshplan {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Model TOML (schema in docs/models.md). Strict: every key is known, every value has its type.

constexpr std::array<std::string_view, 27> kTopKeys = {
    "name",        "n_layers",  "d_model",         "n_heads",         "n_kv_heads",
    "head_dim",    "mlp",       "ffn_hidden",      "vocab",           "tied_embeddings",
    "pos_emb",     "max_seq_len", "norm",          "norm_bias",       "linear_bias",
    "n_params_published", "n_params_source", "moe", "attention", "qk_norm", "n_mtp_layers", "mla",
    "rope_theta", "rope_scaling", "norm_eps", "sliding_window", "full_attention_every"};
constexpr std::array<std::string_view, 5> kRopeScalingKeys = {"type", "factor", "low_freq_factor", "high_freq_factor",
                                                              "original_max_position"};
constexpr std::array<std::string_view, 6> kMoeKeys = {"n_experts", "top_k", "expert_ffn",
                                                      "n_shared_experts", "n_dense_layers", "capacity_factor"};
constexpr std::array<std::string_view, 4> kMlaKeys = {"q_lora_rank", "kv_lora_rank", "rope_head_dim", "v_head_dim"};

std::string toml_type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    default: return "a date/time";
  }
}

class TomlReader {
public:
  TomlReader(const toml::table& t, std::string file, std::string prefix)
      : t_(t), file_(std::move(file)), prefix_(std::move(prefix)) {}

  std::string key(std::string_view k) const { return prefix_ + std::string(k); }

  InputError error(std::string_view k, const std::string& reason) const {
    return InputError(file_, key(k), reason);
  }

  std::optional<std::int64_t> opt_int(std::string_view k, std::int64_t min_value,
                                      std::int64_t max_value) const {
    const toml::node* n = t_.get(k);
    if (n == nullptr) return std::nullopt;
    if (!n->is_integer())
      throw error(k, fmt::format("expected an integer, got {}{}", toml_type_name(*n), where(*n)));
    const std::int64_t v = n->as_integer()->get();
    if (v < min_value || v > max_value)
      throw error(k, fmt::format("must be in [{}, {}], got {}{}", min_value, max_value, v, where(*n)));
    return v;
  }
  std::int64_t req_int(std::string_view k, std::int64_t min_value, std::int64_t max_value) const {
    auto v = opt_int(k, min_value, max_value);
    if (!v) throw error(k, "required key is missing");
    return *v;
  }
  std::optional<double> opt_float(std::string_view k) const {
    const toml::node* n = t_.get(k);
    if (n == nullptr) return std::nullopt;
    if (!n->is_number()) throw error(k, fmt::format("expected a number, got {}{}", toml_type_name(*n), where(*n)));
    return n->is_integer() ? static_cast<double>(n->as_integer()->get()) : n->as_floating_point()->get();
  }
  std::optional<bool> opt_bool(std::string_view k) const {
    const toml::node* n = t_.get(k);
    if (n == nullptr) return std::nullopt;
    if (!n->is_boolean())
      throw error(k, fmt::format("expected true or false, got {}{}", toml_type_name(*n), where(*n)));
    return n->as_boolean()->get();
  }
  std::optional<std::string> opt_string(std::string_view k) const {
    const toml::node* n = t_.get(k);
    if (n == nullptr) return std::nullopt;
    if (!n->is_string())
      throw error(k, fmt::format("expected a string, got {}{}", toml_type_name(*n), where(*n)));
    return n->as_string()->get();
  }
  std::string req_string(std::string_view k) const {
    auto v = opt_string(k);
    if (!v) throw error(k, "required key is missing");
    return *v;
  }
  // One of a fixed set of spellings: the canonical names only, so a TOML never relies on the
  // looser aliases the HF importer accepts.
  template <typename Enum, typename Parse>
  Enum req_enum(std::string_view k, Parse parse, std::string_view choices) const {
    const std::string s = req_string(k);
    const auto v = parse(s);
    if (!v || to_string(*v) != s)
      throw error(k, fmt::format("unknown value \"{}\" (expected one of {}){}", s, choices, where(*t_.get(k))));
    return *v;
  }

  void reject_unknown(std::span<const std::string_view> known) const {
    for (const auto& [k, node] : t_) {
      if (std::find(known.begin(), known.end(), k.str()) == known.end())
        throw error(k.str(), fmt::format("unknown key{} (allowed: {})", where(node),
                                         fmt::join(known.begin(), known.end(), ", ")));
    }
  }

private:
  static std::string where(const toml::node& n) {
    const auto& src = n.source();
    if (src.begin.line == 0) return "";
    return fmt::format(" (line {})", src.begin.line);
  }
  const toml::table& t_;
  std::string file_;
  std::string prefix_;
};

constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();
// Every width, vocabulary and context maximum (docs/limits.md) is at most 2^24; validate() then
// applies each field's own maximum.
constexpr std::int64_t kSizeMax = limits::kMaxSeqLen;

// [rope_scaling]: the llama3 frequency scaling, the one kind this reader knows.
void read_rope_scaling(const toml::table& root, const std::string& file, const TomlReader& r, ModelSpec& m) {
  const toml::node* rs_node = root.get("rope_scaling");
  if (rs_node == nullptr) return;
  const toml::table* rs = rs_node->as_table();
  if (rs == nullptr) throw r.error("rope_scaling", fmt::format("expected a table, got {}", toml_type_name(*rs_node)));
  const TomlReader sr(*rs, file, "rope_scaling.");
  sr.reject_unknown(kRopeScalingKeys);
  m.rope.scaling = sr.opt_string("type").value_or("");
  if (m.rope.scaling != "llama3")
    throw sr.error("type", fmt::format("'{}' is not a known RoPE scaling (\"llama3\")", m.rope.scaling));
  m.rope.factor = sr.opt_float("factor").value_or(8.0);
  m.rope.low_freq_factor = sr.opt_float("low_freq_factor").value_or(1.0);
  m.rope.high_freq_factor = sr.opt_float("high_freq_factor").value_or(4.0);
  m.rope.original_max_position = sr.opt_int("original_max_position", 1, kSizeMax).value_or(8192);
  if (!(m.rope.factor >= 1)) throw sr.error("factor", fmt::format("must be at least 1, got {}", m.rope.factor));
}

// [moe] and ffn_hidden, which a mixture of experts makes optional.
void read_moe_and_ffn(const toml::table& root, const std::string& file, const TomlReader& r, ModelSpec& m) {
  const toml::node* moe_node = root.get("moe");
  if (moe_node == nullptr) {
    m.ffn_hidden = r.req_int("ffn_hidden", 1, kSizeMax);
    return;
  }
  const toml::table* moe = moe_node->as_table();
  if (moe == nullptr) throw r.error("moe", fmt::format("expected a table, got {}", toml_type_name(*moe_node)));
  const TomlReader mr(*moe, file, "moe.");
  mr.reject_unknown(kMoeKeys);
  m.moe.n_experts = static_cast<int>(mr.req_int("n_experts", 1, kIntMax));
  m.moe.top_k = static_cast<int>(mr.req_int("top_k", 1, kIntMax));
  m.moe.expert_ffn = mr.req_int("expert_ffn", 1, kSizeMax);
  m.moe.n_shared_experts = static_cast<int>(mr.opt_int("n_shared_experts", 0, kIntMax).value_or(0));
  m.moe.n_dense_layers = static_cast<int>(mr.opt_int("n_dense_layers", 0, kIntMax).value_or(0));
  m.moe.capacity_factor = mr.opt_float("capacity_factor").value_or(0.0);
  if (m.moe.n_dense_layers > 0 && !root.get("ffn_hidden"))
    throw r.error("ffn_hidden", "required with moe.n_dense_layers (the dense layers' MLP width)");
  // The dense width of an all-MoE model is one expert's width (what one token's MLP sees).
  m.ffn_hidden = r.opt_int("ffn_hidden", 1, kSizeMax).value_or(m.moe.expert_ffn);
}

// attention, qk_norm, n_mtp_layers and [mla], which attention = "mla" requires and nothing else takes.
void read_attention(const toml::table& root, const std::string& file, const TomlReader& r, ModelSpec& m) {
  if (root.get("attention"))
    m.attention = r.req_enum<AttentionKind>("attention", parse_attention_kind, "\"gqa\", \"mla\"");
  m.qk_norm = r.opt_bool("qk_norm").value_or(false);
  m.n_mtp_layers = static_cast<int>(r.opt_int("n_mtp_layers", 0, kIntMax).value_or(0));
  m.sliding_window = r.opt_int("sliding_window", 0, kSizeMax).value_or(0);
  m.full_attention_every = static_cast<int>(r.opt_int("full_attention_every", 0, kIntMax).value_or(0));
  if (const char* why = sliding_window_conflict(m)) throw r.error("full_attention_every", why);
  const toml::node* mla_node = root.get("mla");
  if (mla_node == nullptr) {
    if (m.attention == AttentionKind::mla)
      throw r.error("mla", "required with attention = \"mla\" (kv_lora_rank, rope_head_dim, v_head_dim)");
    return;
  }
  const toml::table* mla = mla_node->as_table();
  if (mla == nullptr) throw r.error("mla", fmt::format("expected a table, got {}", toml_type_name(*mla_node)));
  if (m.attention != AttentionKind::mla) throw r.error("mla", "given, but attention is not \"mla\"");
  const TomlReader ar(*mla, file, "mla.");
  ar.reject_unknown(kMlaKeys);
  m.mla.q_lora_rank = ar.opt_int("q_lora_rank", 0, kSizeMax).value_or(0);
  m.mla.kv_lora_rank = ar.req_int("kv_lora_rank", 1, kSizeMax);
  m.mla.rope_head_dim = ar.req_int("rope_head_dim", 1, kSizeMax);
  m.mla.v_head_dim = ar.req_int("v_head_dim", 1, kSizeMax);
}

// The published parameter count and its citation: both or neither.
void read_published_count(const TomlReader& r, ModelSpec& m) {
  m.n_params_published = r.opt_int("n_params_published", 1, std::numeric_limits<std::int64_t>::max());
  m.n_params_source = r.opt_string("n_params_source").value_or("");
  if (m.n_params_published && m.n_params_source.empty())
    throw r.error("n_params_source", "required when n_params_published is given (cite where the count comes from)");
  if (!m.n_params_published && !m.n_params_source.empty())
    throw r.error("n_params_published", "n_params_source is given but the count it cites is missing");
}

ModelSpec model_from_toml(const toml::table& root, const std::string& file, const std::string& stem) {
  const TomlReader r(root, file, "");
  r.reject_unknown(kTopKeys);

  ModelSpec m;
  m.name = r.opt_string("name").value_or(stem);
  if (m.name.empty()) throw r.error("name", "must not be empty");
  m.n_layers = static_cast<int>(r.req_int("n_layers", 1, kIntMax));
  m.d_model = r.req_int("d_model", 1, kSizeMax);
  m.n_heads = static_cast<int>(r.req_int("n_heads", 1, kIntMax));
  m.n_kv_heads = static_cast<int>(r.opt_int("n_kv_heads", 1, kIntMax).value_or(m.n_heads));
  if (auto hd = r.opt_int("head_dim", 1, kSizeMax)) {
    m.head_dim = *hd;
  } else {
    if (m.d_model % m.n_heads != 0)
      throw r.error("head_dim", fmt::format("missing, and d_model {} is not divisible by n_heads {}",
                                            m.d_model, m.n_heads));
    m.head_dim = m.d_model / m.n_heads;
  }
  m.mlp = r.req_enum<MlpKind>("mlp", parse_mlp_kind, "\"swiglu\", \"gelu\", \"relu2\"");
  m.vocab = r.req_int("vocab", 1, kSizeMax);
  m.tied_embeddings = r.opt_bool("tied_embeddings").value_or(false);
  m.pos_emb = r.req_enum<PosEmb>("pos_emb", parse_pos_emb, "\"rope\", \"learned\", \"alibi\", \"none\"");
  m.max_seq_len = r.req_int("max_seq_len", 1, kSizeMax);
  m.norm = r.req_enum<NormKind>("norm", parse_norm_kind, "\"rmsnorm\", \"layernorm\"");
  m.norm_bias = r.opt_bool("norm_bias").value_or(false);
  if (m.norm_bias && m.norm == NormKind::rmsnorm)
    throw r.error("norm_bias", "RMSNorm has no bias; set norm = \"layernorm\" or norm_bias = false");
  m.linear_bias = r.opt_bool("linear_bias").value_or(false);
  if (auto theta = r.opt_float("rope_theta")) {
    if (!(*theta > 0)) throw r.error("rope_theta", fmt::format("must be positive, got {}", *theta));
    m.rope.theta = *theta;
  }
  if (auto eps = r.opt_float("norm_eps")) {
    if (!(*eps > 0 && *eps < 1)) throw r.error("norm_eps", fmt::format("must be in (0, 1), got {}", *eps));
    m.norm_eps = *eps;
  }
  read_rope_scaling(root, file, r, m);
  read_moe_and_ffn(root, file, r, m);
  read_attention(root, file, r, m);
  read_published_count(r, m);
  validate(m, file);
  return m;
}

ModelSpec load_model_toml(const fs::path& path) {
  const std::string file = path.string();
  const std::string text = read_input_file(file, InputKind::model_toml);
  toml::table root;
  try {
    root = toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    throw InputError(file, "", fmt::format("TOML syntax error at line {}, column {}: {}",
                                           e.source().begin.line, e.source().begin.column,
                                           e.description()));
  }
  return model_from_toml(root, file, path.stem().string());
}

ModelSpec load_model_json(const fs::path& path) {
  const std::string file = path.string();
  const std::string text = read_input_file(file, InputKind::hf_config);
  json config;
  try {
    config = json::parse(text);
  } catch (const json::parse_error& e) {
    // e.what() carries "parse error at line L, column C: ..."; drop the library's "[json.exception...]" tag.
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    throw InputError(file, "", "JSON syntax error: " + what);
  } catch (const json::exception&) {
    // out_of_range 406: a number past a double; the library's message repeats the whole number.
    throw InputError(file, "", "JSON number out of range (larger than a 64-bit float holds)");
  }
  return import_hf_config(config, file);
}

// ---------------------------------------------------------------------------------------------
// Hugging Face config.json

std::string json_type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return fmt::format("the string \"{}\"", v.get<std::string>());
    case json::value_t::boolean: return v.get<bool>() ? "true" : "false";
    case json::value_t::number_float: return fmt::format("the float {}", v.get<double>());
    default: return fmt::format("{}", v.dump());
  }
}

// Reads one JSON object; null counts as absent (HF writes "head_dim": null for "use the default").
class JsonReader {
public:
  JsonReader(const json& j, std::string file, std::string prefix)
      : j_(j), file_(std::move(file)), prefix_(std::move(prefix)) {}

  InputError error(std::string_view k, const std::string& reason) const {
    return InputError(file_, prefix_ + std::string(k), reason);
  }
  const json* get(std::string_view k) const {
    auto it = j_.find(k);
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  bool has(std::string_view k) const { return get(k) != nullptr; }
  bool written(std::string_view k) const { return j_.find(k) != j_.end(); }  // even as null

  // Sizes are strictly positive: a zero width or head count is never a real model.
  std::optional<std::int64_t> opt_size(std::string_view k) const {
    const json* v = get(k);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number_integer())
      throw error(k, fmt::format("expected a positive integer, got {}", json_type_name(*v)));
    const std::int64_t x = v->is_number_unsigned() && v->get<std::uint64_t>() > static_cast<std::uint64_t>(kSizeMax)
                               ? kSizeMax + 1
                               : v->get<std::int64_t>();
    if (x <= 0) throw error(k, fmt::format("must be a positive integer, got {}", x));
    if (x > kSizeMax) throw error(k, fmt::format("{} is above the maximum {} (docs/limits.md)", v->dump(), kSizeMax));
    return x;
  }
  std::int64_t req_size(std::string_view k) const {
    auto v = opt_size(k);
    if (!v) throw error(k, "required field is missing");
    return *v;
  }
  int req_count(std::string_view k) const { return narrow(k, req_size(k)); }
  std::optional<int> opt_count(std::string_view k) const {
    auto v = opt_size(k);
    if (!v) return std::nullopt;
    return narrow(k, *v);
  }
  std::optional<double> opt_positive_number(std::string_view k) const {
    const json* v = get(k);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) throw error(k, fmt::format("expected a number, got {}", json_type_name(*v)));
    const double x = v->get<double>();
    if (!(x > 0.0) || !std::isfinite(x)) throw error(k, fmt::format("must be a positive number, got {}", v->dump()));
    return x;
  }
  std::optional<bool> opt_bool(std::string_view k) const {
    const json* v = get(k);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) throw error(k, fmt::format("expected true or false, got {}", json_type_name(*v)));
    return v->get<bool>();
  }
  std::optional<std::string> opt_string(std::string_view k) const {
    const json* v = get(k);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) throw error(k, fmt::format("expected a string, got {}", json_type_name(*v)));
    return v->get<std::string>();
  }
  // A nested object (MPT's attn_config/ffn_config, transformers v5's rope_parameters); absent -> {}.
  JsonReader sub(std::string_view k) const {
    static const json kEmpty = json::object();
    const json* v = get(k);
    if (v == nullptr) return JsonReader(kEmpty, file_, prefix_ + std::string(k) + ".");
    if (!v->is_object()) throw error(k, fmt::format("expected an object, got {}", json_type_name(*v)));
    return JsonReader(*v, file_, prefix_ + std::string(k) + ".");
  }

private:
  int narrow(std::string_view k, std::int64_t v) const {
    if (v > kIntMax) throw error(k, fmt::format("{} is implausibly large", v));
    return static_cast<int>(v);
  }
  const json& j_;
  std::string file_;
  std::string prefix_;
};

enum class HfFamily { llama, mixtral, mpt, gpt_neox, gpt2, qwen3, deepseek, gpt_oss };

std::optional<HfFamily> family_from_model_type(std::string_view t) {
  if (t == "llama" || t == "mistral") return HfFamily::llama;
  if (t == "mixtral") return HfFamily::mixtral;
  if (t == "mpt") return HfFamily::mpt;
  if (t == "gpt_neox") return HfFamily::gpt_neox;
  if (t == "gpt2") return HfFamily::gpt2;
  if (t == "qwen3" || t == "qwen3_moe") return HfFamily::qwen3;
  if (t == "deepseek_v3" || t == "deepseek_v2") return HfFamily::deepseek;
  if (t == "gpt_oss") return HfFamily::gpt_oss;
  return std::nullopt;
}

std::optional<HfFamily> family_from_architecture(std::string_view a) {
  if (a == "LlamaForCausalLM" || a == "MistralForCausalLM") return HfFamily::llama;
  if (a == "MixtralForCausalLM") return HfFamily::mixtral;
  if (a == "MPTForCausalLM") return HfFamily::mpt;
  if (a == "GPTNeoXForCausalLM") return HfFamily::gpt_neox;
  if (a == "GPT2LMHeadModel" || a == "GPT2Model") return HfFamily::gpt2;
  if (a == "Qwen3ForCausalLM" || a == "Qwen3MoeForCausalLM") return HfFamily::qwen3;
  if (a == "DeepseekV3ForCausalLM" || a == "DeepseekV2ForCausalLM") return HfFamily::deepseek;
  if (a == "GptOssForCausalLM") return HfFamily::gpt_oss;
  return std::nullopt;
}

constexpr std::string_view kSupportedTypes =
    "llama, mistral, mixtral, mpt, gpt_neox, gpt2, qwen3, qwen3_moe, deepseek_v2, deepseek_v3, gpt_oss";
// How Hugging Face repository names spell those families (GPT-NeoX's models are Pythia and
// GPT-NeoX-20B; GPT-OSS's are gpt-oss-*).
constexpr std::array<std::string_view, 11> kFamilyNamesInRepoIds = {
    "llama", "mistral", "mixtral", "mpt", "neox", "pythia", "gpt2", "qwen3", "deepseek", "gpt-oss", "gpt_oss"};

}  // namespace

std::string_view hf_supported_model_types() { return kSupportedTypes; }

bool hf_id_names_a_supported_family(std::string_view hf_id) {
  std::string id(hf_id);
  std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return std::tolower(c); });
  return std::any_of(kFamilyNamesInRepoIds.begin(), kFamilyNamesInRepoIds.end(),
                     [&](std::string_view f) { return id.find(f) != std::string::npos; });
}

namespace {

HfFamily detect_family(const JsonReader& r) {
  std::optional<std::string> model_type = r.opt_string("model_type");
  if (model_type) {
    if (auto f = family_from_model_type(*model_type)) return *f;
  }
  if (const json* arch = r.get("architectures")) {
    if (!arch->is_array())
      throw r.error("architectures", fmt::format("expected an array of strings, got {}", json_type_name(*arch)));
    for (const json& a : *arch) {
      if (!a.is_string())
        throw r.error("architectures", fmt::format("expected strings, got {}", json_type_name(a)));
      if (auto f = family_from_architecture(a.get<std::string>())) return *f;
    }
  }
  if (model_type)
    throw r.error("model_type",
                  fmt::format("unsupported model_type \"{}\" (supported: {})", *model_type, kSupportedTypes));
  // No declared family: the field names alone are unambiguous for these five layouts.
  if (r.has("n_embd") || r.has("n_layer")) return HfFamily::gpt2;
  if (r.has("d_model") && r.has("n_layers")) return HfFamily::mpt;
  if (r.has("rotary_pct") || r.has("use_parallel_residual")) return HfFamily::gpt_neox;
  if (r.has("num_local_experts") || r.has("num_experts")) return HfFamily::mixtral;
  if (r.has("hidden_size") && r.has("num_hidden_layers")) return HfFamily::llama;
  throw r.error("model_type", fmt::format("missing, and the fields match no supported family ({})", kSupportedTypes));
}

std::int64_t head_dim_or_default(const JsonReader& r, std::int64_t d_model, int n_heads,
                                 std::string_view width_key, std::string_view heads_key) {
  if (auto hd = r.opt_size("head_dim")) return *hd;
  if (d_model % n_heads != 0)
    throw r.error(heads_key, fmt::format("{} {} is not divisible by {} {} and head_dim is not given",
                                         width_key, d_model, heads_key, n_heads));
  return d_model / n_heads;
}

void check_kv_heads(const JsonReader& r, int n_heads, int n_kv_heads, std::string_view kv_key) {
  if (n_kv_heads > n_heads || n_heads % n_kv_heads != 0)
    throw r.error(kv_key, fmt::format("{} query heads are not divisible into {} kv heads", n_heads, n_kv_heads));
}

// Both biases must agree: ModelSpec has one linear_bias flag for every projection.
bool one_bias_flag(const JsonReader& r, bool attn_bias, bool mlp_bias, std::string_view blame_key) {
  if (attn_bias != mlp_bias)
    throw r.error(blame_key, fmt::format("attention_bias {} with mlp_bias {} is not modelled (meshplan has one "
                                          "bias flag for every linear layer)", attn_bias, mlp_bias));
  return attn_bias;
}

// transformers' sliding window: `sliding_window` tokens (null: none) on the layers `layer_types`
// marks "sliding_attention" (absent: every layer, or every layer but each `full_every`-th, the
// family's default pattern), as ModelSpec's pattern (every N-th layer full); another pattern is an
// error naming layer_types.
void read_sliding_window(const JsonReader& r, ModelSpec& m, std::optional<std::int64_t> default_window, int full_every) {
  m.sliding_window = r.opt_size("sliding_window").value_or(r.written("sliding_window") ? 0 : default_window.value_or(0));
  m.full_attention_every = full_every;
  const json* types = r.get("layer_types");
  if (types == nullptr) {
    if (m.sliding_window == 0) m.full_attention_every = 0;
    return;
  }
  if (!types->is_array() || static_cast<int>(types->size()) != m.n_layers)
    throw r.error("layer_types", fmt::format("expected an array of {} layer kinds (num_hidden_layers)", m.n_layers));
  std::vector<bool> windowed;
  for (const json& t : *types) {
    if (!t.is_string() || (t != "sliding_attention" && t != "full_attention"))
      throw r.error("layer_types", "expected \"sliding_attention\" or \"full_attention\" for each layer");
    windowed.push_back(t == "sliding_attention");
  }
  const auto first_full = std::find(windowed.begin(), windowed.end(), false);
  const bool any_windowed = std::find(windowed.begin(), windowed.end(), true) != windowed.end();
  if (!any_windowed || m.sliding_window == 0) {
    m.sliding_window = 0;
    m.full_attention_every = 0;
    return;
  }
  m.full_attention_every = first_full == windowed.end() ? 0 : static_cast<int>(first_full - windowed.begin()) + 1;
  for (int layer = 0; layer < m.n_layers; ++layer)
    if (m.is_windowed_layer(layer) != windowed[static_cast<std::size_t>(layer)])
      throw r.error("layer_types", fmt::format("layer {} breaks the pattern of one full layer every {} (only periodic "
                                               "patterns ending each period with the full layer are modelled)",
                                               layer, m.full_attention_every));
}

// Llama, Mistral, Mixtral: gated (SwiGLU-shaped) MLP whatever hidden_act says, RMSNorm, RoPE.
ModelSpec import_llama(const JsonReader& r, bool is_mixtral, std::string_view model_type) {
  ModelSpec m;
  m.d_model = r.req_size("hidden_size");
  m.n_layers = r.req_count("num_hidden_layers");
  m.n_heads = r.req_count("num_attention_heads");
  // MixtralConfig defaults num_key_value_heads to 8; LlamaConfig/MistralConfig to the head count.
  m.n_kv_heads = r.opt_count("num_key_value_heads").value_or(is_mixtral ? 8 : m.n_heads);
  check_kv_heads(r, m.n_heads, m.n_kv_heads, "num_key_value_heads");
  m.head_dim = head_dim_or_default(r, m.d_model, m.n_heads, "hidden_size", "num_attention_heads");
  m.vocab = r.req_size("vocab_size");
  const bool mistral_defaults = is_mixtral || model_type == "mistral";
  m.max_seq_len = r.opt_size("max_position_embeddings").value_or(mistral_defaults ? 4096 * 32 : 2048);
  m.tied_embeddings = r.opt_bool("tie_word_embeddings").value_or(false);
  m.mlp = MlpKind::swiglu;
  r.opt_string("hidden_act");  // the MLP is gated whatever the activation; only its type is checked
  m.norm = NormKind::rmsnorm;
  m.norm_bias = false;
  m.pos_emb = PosEmb::rope;
  // RoPE base and scaling (transformers v5 folds both into rope_parameters): no shape depends on
  // them, but the emitters must pass them on.
  const JsonReader rope = r.sub("rope_parameters");
  if (auto t = rope.opt_positive_number("rope_theta")) m.rope.theta = *t;
  else if (auto t2 = r.opt_positive_number("rope_theta")) m.rope.theta = *t2;
  const JsonReader scaling = r.has("rope_scaling") ? r.sub("rope_scaling") : rope;
  const std::string kind = scaling.opt_string("rope_type").value_or(scaling.opt_string("type").value_or(""));
  if (kind == "llama3") {
    m.rope.scaling = kind;
    m.rope.factor = scaling.opt_positive_number("factor").value_or(8.0);
    m.rope.low_freq_factor = scaling.opt_positive_number("low_freq_factor").value_or(1.0);
    m.rope.high_freq_factor = scaling.opt_positive_number("high_freq_factor").value_or(4.0);
    m.rope.original_max_position =
        static_cast<std::int64_t>(scaling.opt_positive_number("original_max_position_embeddings").value_or(8192));
  }
  if (auto eps = r.opt_positive_number("rms_norm_eps")) m.norm_eps = *eps;
  m.linear_bias = one_bias_flag(r, r.opt_bool("attention_bias").value_or(false),
                                r.opt_bool("mlp_bias").value_or(false), "mlp_bias");
  // Mistral 7B v0.1 windows every layer (4096); later Mistral and Mixtral configs write null.
  if (model_type != "qwen3") read_sliding_window(r, m, std::nullopt, 0);

  const std::int64_t ffn = r.req_size("intermediate_size");
  const bool has_experts = r.has("num_local_experts") || r.has("num_experts");
  if (is_mixtral || has_experts) {
    // MixtralConfig defaults: 8 experts, top-2; num_experts is an alias of num_local_experts.
    const char* experts_key = r.has("num_local_experts") ? "num_local_experts" : "num_experts";
    m.moe.n_experts = r.opt_count(experts_key).value_or(8);
    m.moe.top_k = r.opt_count("num_experts_per_tok").value_or(2);
    if (m.moe.top_k > m.moe.n_experts)
      throw r.error("num_experts_per_tok", fmt::format("{} exceeds {} {}", m.moe.top_k, experts_key, m.moe.n_experts));
    m.moe.expert_ffn = ffn;
  }
  m.ffn_hidden = ffn;
  return m;
}

// Qwen3 and Qwen3-MoE (transformers Qwen3MoeConfig): Llama-shaped blocks with an RMSNorm over
// every query and key head (q_norm, k_norm), head_dim apart from hidden_size / heads; MoE layers
// of num_experts experts of moe_intermediate_size every decoder_sparse_step-th layer.
ModelSpec import_qwen3(const JsonReader& r, std::string_view model_type) {
  ModelSpec m = import_llama(r, false, "qwen3");
  m.qk_norm = true;
  // Qwen3 writes a sliding_window it leaves off (use_sliding_window false); on, it windows the
  // layers from max_window_layers on, a pattern not modelled.
  if (r.opt_bool("use_sliding_window").value_or(false))
    throw r.error("use_sliding_window", "Qwen's windowed layers from max_window_layers on are not modelled");
  m.max_seq_len = r.opt_size("max_position_embeddings").value_or(32768);
  // Qwen3MoeConfig's defaults: 128 experts, top-8, moe_intermediate_size 768, every layer sparse.
  const bool moe = model_type == "qwen3_moe" || r.has("moe_intermediate_size");
  if (!moe) return m;
  const int experts = r.opt_count("num_experts").value_or(128);
  const int top_k = r.opt_count("num_experts_per_tok").value_or(8);
  if (top_k > experts)
    throw r.error("num_experts_per_tok", fmt::format("{} exceeds num_experts {}", top_k, experts));
  if (r.opt_count("decoder_sparse_step").value_or(1) != 1)
    throw r.error("decoder_sparse_step", "MoE layers interleaved with dense ones are not modelled (only leading dense layers)");
  if (const json* only = r.get("mlp_only_layers"); only && !(only->is_array() && only->empty()))
    throw r.error("mlp_only_layers", "dense layers between MoE layers are not modelled (only leading dense layers)");
  m.moe.n_experts = experts;
  m.moe.top_k = top_k;
  m.moe.expert_ffn = r.opt_size("moe_intermediate_size").value_or(768);
  return m;
}

// DeepSeek-V2/V3 (modeling_deepseek.py): multi-head latent attention, first_k_dense_replace
// leading dense layers, then MoE layers of n_routed_experts + n_shared_experts experts;
// num_nextn_predict_layers MTP modules (V3).
ModelSpec import_deepseek(const JsonReader& r) {
  ModelSpec m;
  m.d_model = r.req_size("hidden_size");
  m.n_layers = r.req_count("num_hidden_layers");
  m.n_heads = r.req_count("num_attention_heads");
  m.n_kv_heads = m.n_heads;  // MLA: every head has its own key and value (from the shared latent)
  m.attention = AttentionKind::mla;
  m.mla.q_lora_rank = r.opt_size("q_lora_rank").value_or(0);  // null: a full-rank query (V2-Lite)
  m.mla.kv_lora_rank = r.req_size("kv_lora_rank");
  m.mla.rope_head_dim = r.req_size("qk_rope_head_dim");
  m.mla.v_head_dim = r.req_size("v_head_dim");
  m.head_dim = r.req_size("qk_nope_head_dim");
  m.vocab = r.req_size("vocab_size");
  m.max_seq_len = r.opt_size("max_position_embeddings").value_or(4096);
  m.tied_embeddings = r.opt_bool("tie_word_embeddings").value_or(false);
  m.mlp = MlpKind::swiglu;
  m.norm = NormKind::rmsnorm;
  m.pos_emb = PosEmb::rope;
  if (r.opt_bool("attention_bias").value_or(false)) throw r.error("attention_bias", "MLA with biases is not modelled");
  m.ffn_hidden = r.req_size("intermediate_size");
  if (r.has("n_routed_experts")) {
    m.moe.n_experts = r.req_count("n_routed_experts");
    m.moe.top_k = r.req_count("num_experts_per_tok");
    if (m.moe.top_k > m.moe.n_experts)
      throw r.error("num_experts_per_tok", fmt::format("{} exceeds n_routed_experts {}", m.moe.top_k, m.moe.n_experts));
    m.moe.expert_ffn = r.req_size("moe_intermediate_size");
    m.moe.n_shared_experts = r.opt_count("n_shared_experts").value_or(0);
    m.moe.n_dense_layers = r.opt_count("first_k_dense_replace").value_or(0);
    if (m.moe.n_dense_layers > m.n_layers)
      throw r.error("first_k_dense_replace", fmt::format("{} exceeds num_hidden_layers {}", m.moe.n_dense_layers, m.n_layers));
    if (r.opt_count("moe_layer_freq").value_or(1) != 1)
      throw r.error("moe_layer_freq", "MoE layers interleaved with dense ones are not modelled (only leading dense layers)");
  }
  m.n_mtp_layers = r.opt_count("num_nextn_predict_layers").value_or(0);
  return m;
}

// gpt-oss (transformers GptOssConfig): GQA with biases on q, k, v and o, num_local_experts
// SwiGLU-style experts of intermediate_size with biases, a router with a bias, untied head.
ModelSpec import_gpt_oss(const JsonReader& r) {
  ModelSpec m;
  m.d_model = r.req_size("hidden_size");
  m.n_layers = r.req_count("num_hidden_layers");
  m.n_heads = r.req_count("num_attention_heads");
  m.n_kv_heads = r.opt_count("num_key_value_heads").value_or(8);
  check_kv_heads(r, m.n_heads, m.n_kv_heads, "num_key_value_heads");
  m.head_dim = r.opt_size("head_dim").value_or(64);
  m.vocab = r.req_size("vocab_size");
  m.max_seq_len = r.opt_size("max_position_embeddings").value_or(131072);
  m.tied_embeddings = r.opt_bool("tie_word_embeddings").value_or(false);
  m.mlp = MlpKind::swiglu;
  m.norm = NormKind::rmsnorm;
  m.pos_emb = PosEmb::rope;
  m.linear_bias = r.opt_bool("attention_bias").value_or(true);
  m.moe.n_experts = r.opt_count("num_local_experts").value_or(128);
  m.moe.top_k = r.opt_count("num_experts_per_tok").value_or(4);
  if (m.moe.top_k > m.moe.n_experts)
    throw r.error("num_experts_per_tok", fmt::format("{} exceeds num_local_experts {}", m.moe.top_k, m.moe.n_experts));
  m.moe.expert_ffn = r.req_size("intermediate_size");
  m.ffn_hidden = m.moe.expert_ffn;
  // GptOssConfig: a 128-token window on every second layer, from layer 0.
  read_sliding_window(r, m, 128, 2);
  return m;
}

// MPT (mosaicml hub configs, and llm-foundry's `model:` YAML node for mpt_causal_lm).
ModelSpec import_mpt(const JsonReader& r) {
  ModelSpec m;
  m.d_model = r.req_size("d_model");
  m.n_layers = r.req_count("n_layers");
  m.n_heads = r.req_count("n_heads");
  if (m.d_model % m.n_heads != 0)
    throw r.error("n_heads", fmt::format("d_model {} is not divisible by n_heads {}", m.d_model, m.n_heads));
  m.head_dim = m.d_model / m.n_heads;
  m.vocab = r.opt_size("vocab_size").value_or(50368);
  m.max_seq_len = r.opt_size("max_seq_len").value_or(2048);
  const bool no_bias = r.opt_bool("no_bias").value_or(false);
  m.linear_bias = !no_bias;
  m.tied_embeddings = r.opt_bool("tie_word_embeddings").value_or(true);

  const std::string norm_type = r.opt_string("norm_type").value_or("low_precision_layernorm");
  if (norm_type.find("rmsnorm") != std::string::npos) {
    m.norm = NormKind::rmsnorm;
    m.norm_bias = false;
  } else if (norm_type.find("layernorm") != std::string::npos) {
    m.norm = NormKind::layernorm;
    m.norm_bias = !no_bias;
  } else {
    throw r.error("norm_type", fmt::format("unknown norm_type \"{}\"", norm_type));
  }

  const JsonReader attn = r.sub("attn_config");
  const std::string attn_type = attn.opt_string("attn_type").value_or("multihead_attention");
  if (attn_type == "multihead_attention") {
    m.n_kv_heads = m.n_heads;
  } else if (attn_type == "multiquery_attention") {
    m.n_kv_heads = 1;
  } else if (attn_type == "grouped_query_attention") {
    m.n_kv_heads = attn.opt_count("kv_n_heads").value_or(1);  // MPTConfig's attn_config default
    check_kv_heads(attn, m.n_heads, m.n_kv_heads, "kv_n_heads");
  } else {
    throw attn.error("attn_type", fmt::format("unknown attn_type \"{}\"", attn_type));
  }
  if (attn.opt_bool("qk_ln").value_or(false) || attn.opt_bool("qk_gn").value_or(false))
    throw attn.error("qk_ln", "query/key norms are not modelled");
  // MPTConfig turns learned_pos_emb off when ALiBi or RoPE provides positions (the released
  // mpt-7b config says both alibi: true and learned_pos_emb: true, and has no wpe table).
  const bool learned = r.opt_bool("learned_pos_emb").value_or(true);
  if (attn.opt_bool("alibi").value_or(false)) m.pos_emb = PosEmb::alibi;
  else if (attn.opt_bool("rope").value_or(false)) m.pos_emb = PosEmb::rope;
  else m.pos_emb = learned ? PosEmb::learned : PosEmb::none;

  const JsonReader ffn = r.sub("ffn_config");
  const std::string ffn_type = ffn.opt_string("ffn_type").value_or("mptmlp");
  if (ffn_type == "mptmlp" || ffn_type == "te_ln_mlp") m.mlp = MlpKind::gelu;
  else if (ffn_type == "mptglu") m.mlp = MlpKind::swiglu;
  else
    throw ffn.error("ffn_type",
                    fmt::format("unsupported ffn_type \"{}\" (supported: mptmlp, mptglu, te_ln_mlp)", ffn_type));
  // llm-foundry's resolve_ffn_hidden_size: an explicit ffn_hidden_size wins over the ratio.
  if (auto f = ffn.opt_size("ffn_hidden_size")) {
    m.ffn_hidden = *f;
  } else {
    const double ratio = r.opt_positive_number("expansion_ratio").value_or(4.0);
    const double width = static_cast<double>(m.d_model) * ratio;
    if (width != std::floor(width) || width < 1.0)
      throw r.error("expansion_ratio",
                    fmt::format("d_model {} x expansion_ratio {} is not a whole width", m.d_model, ratio));
    // Checked before the conversion: a double beyond the integer range has no integer value.
    if (width > static_cast<double>(kSizeMax))
      throw r.error("expansion_ratio", fmt::format("d_model {} x expansion_ratio {} is wider than {} (docs/limits.md)",
                                                   m.d_model, ratio, kSizeMax));
    m.ffn_hidden = static_cast<std::int64_t>(width);
  }
  return m;
}

// GPT-NeoX (Pythia): LayerNorm with bias, biases on every projection, partial rotary, untied.
ModelSpec import_gpt_neox(const JsonReader& r) {
  ModelSpec m;
  m.d_model = r.req_size("hidden_size");
  m.n_layers = r.req_count("num_hidden_layers");
  m.n_heads = r.req_count("num_attention_heads");
  m.n_kv_heads = m.n_heads;
  if (m.d_model % m.n_heads != 0)
    throw r.error("num_attention_heads", fmt::format("hidden_size {} is not divisible by num_attention_heads {}",
                                                     m.d_model, m.n_heads));
  m.head_dim = m.d_model / m.n_heads;
  m.ffn_hidden = r.req_size("intermediate_size");
  m.vocab = r.req_size("vocab_size");
  m.max_seq_len = r.opt_size("max_position_embeddings").value_or(2048);
  m.tied_embeddings = r.opt_bool("tie_word_embeddings").value_or(false);
  m.mlp = MlpKind::gelu;
  m.norm = NormKind::layernorm;
  m.norm_bias = true;
  m.pos_emb = PosEmb::rope;
  // transformers' GPTNeoXConfig.attention_bias (default true) covers only attention; the MLP keeps its biases.
  m.linear_bias = one_bias_flag(r, r.opt_bool("attention_bias").value_or(true), true, "attention_bias");
  r.opt_positive_number("rotary_pct");
  return m;
}

// GPT-2: Conv1D projections with biases, LayerNorm with bias, learned positions, tied head.
ModelSpec import_gpt2(const JsonReader& r) {
  ModelSpec m;
  m.d_model = r.req_size("n_embd");
  m.n_layers = r.req_count("n_layer");
  m.n_heads = r.req_count("n_head");
  m.n_kv_heads = m.n_heads;
  if (m.d_model % m.n_heads != 0)
    throw r.error("n_head", fmt::format("n_embd {} is not divisible by n_head {}", m.d_model, m.n_heads));
  m.head_dim = m.d_model / m.n_heads;
  m.ffn_hidden = r.opt_size("n_inner").value_or(4 * m.d_model);
  m.vocab = r.opt_size("vocab_size").value_or(50257);
  m.max_seq_len = r.opt_size("n_positions").value_or(1024);
  m.tied_embeddings = r.opt_bool("tie_word_embeddings").value_or(true);
  m.mlp = MlpKind::gelu;
  m.norm = NormKind::layernorm;
  m.norm_bias = true;
  m.linear_bias = true;
  m.pos_emb = PosEmb::learned;
  return m;
}

std::string name_from_file(const std::string& file) {
  const fs::path p(file);
  // ".../Llama-3.1-8B/config.json" names the model by its directory.
  if (p.stem() == "config" && p.has_parent_path() && !p.parent_path().filename().empty())
    return p.parent_path().filename().string();
  return p.stem().string();
}

std::vector<std::string> list_models_in(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return names;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_regular_file() && entry.path().extension() == ".toml") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

// The shipped models are data that does not change while meshplan runs, and the Megatron
// importer compares an args file's shape with every one of them: listing the folder and parsing
// 15 TOMLs per input was nearly all of its cost (issue 36 finding 9). Both are kept per path.
const std::vector<std::string>& shipped_names(const fs::path& dir) {
  static std::mutex mu;
  static std::map<std::string, std::vector<std::string>> cache;
  const std::lock_guard lock(mu);
  auto it = cache.find(dir.string());
  if (it == cache.end()) it = cache.emplace(dir.string(), list_models_in(dir)).first;
  return it->second;
}

ModelSpec shipped_model(const fs::path& file) {
  static std::mutex mu;
  static std::map<std::string, ModelSpec> cache;
  {
    const std::lock_guard lock(mu);
    if (const auto it = cache.find(file.string()); it != cache.end()) return it->second;
  }
  ModelSpec m = load_model_toml(file);  // a broken file throws every time: only loaded models are kept
  const std::lock_guard lock(mu);
  cache.emplace(file.string(), m);
  return m;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

ModelSpec import_hf_config(const json& config, const std::string& file) {
  if (!config.is_object())
    throw InputError(file, "", fmt::format("expected a JSON object (a config.json), got {}", json_type_name(config)));
  const JsonReader r(config, file, "");
  const std::string model_type = r.opt_string("model_type").value_or("");
  ModelSpec m;
  switch (detect_family(r)) {
    case HfFamily::llama: m = import_llama(r, false, model_type); break;
    case HfFamily::mixtral: m = import_llama(r, true, model_type); break;
    case HfFamily::mpt: m = import_mpt(r); break;
    case HfFamily::gpt_neox: m = import_gpt_neox(r); break;
    case HfFamily::gpt2: m = import_gpt2(r); break;
    case HfFamily::qwen3: m = import_qwen3(r, model_type); break;
    case HfFamily::deepseek: m = import_deepseek(r); break;
    case HfFamily::gpt_oss: m = import_gpt_oss(r); break;
  }
  const std::string hf_name = r.opt_string("_name_or_path").value_or("");
  m.name = hf_name.empty() ? name_from_file(file) : hf_name;
  if (m.name.empty()) m.name = "hf-model";
  validate(m, file);
  return m;
}

std::vector<std::string> list_models() { return shipped_names(data_root() / "models"); }

ModelSpec load_model(const std::string& name_or_path) {
  if (name_or_path.empty()) throw InputError("", "model", "empty model name");
  if (ends_with(name_or_path, ".toml")) return load_model_toml(fs::path(name_or_path));
  if (ends_with(name_or_path, ".json")) return load_model_json(fs::path(name_or_path));

  const fs::path dir = data_root() / "models";
  const std::vector<std::string>& names = shipped_names(dir);
  const bool bare = name_or_path.find('/') == std::string::npos && name_or_path.find('\\') == std::string::npos;
  if (!bare || std::find(names.begin(), names.end(), name_or_path) == names.end()) {
    std::string hint;
    if (!bare) {
      hint = "; a path must end in .toml (a model TOML) or .json (a Hugging Face config.json)";
      if (shipped_model_for_hf_id(name_or_path))
        hint += fmt::format("; the Hugging Face id has the architecture of shipped model \"{}\"",
                            *shipped_model_for_hf_id(name_or_path));
    }
    throw InputError(dir.string(), name_or_path,
                     fmt::format("unknown model (available: {}){}",
                                 names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", ")),
                                 hint));
  }
  return shipped_model(dir / (name_or_path + ".toml"));
}

std::optional<std::string> shipped_model_for_hf_id(std::string_view hf_id) {
  // Ids of checkpoints whose architecture is exactly a shipped model. Fine-tunes (-Instruct, -chat)
  // share their base's shapes; Llama 3 8B/70B differ from 3.1 only in RoPE scaling and context.
  struct Entry {
    std::string_view id;
    std::string_view model;
  };
  static constexpr Entry kIds[] = {
      {"meta-llama/llama-3.1-8b", "llama3.1-8b"},
      {"meta-llama/llama-3.1-8b-instruct", "llama3.1-8b"},
      {"meta-llama/meta-llama-3.1-8b", "llama3.1-8b"},
      {"meta-llama/meta-llama-3.1-8b-instruct", "llama3.1-8b"},
      {"meta-llama/meta-llama-3-8b", "llama3.1-8b"},
      {"meta-llama/meta-llama-3-8b-instruct", "llama3.1-8b"},
      {"meta-llama/llama-3.1-70b", "llama3.1-70b"},
      {"meta-llama/llama-3.1-70b-instruct", "llama3.1-70b"},
      {"meta-llama/meta-llama-3.1-70b", "llama3.1-70b"},
      {"meta-llama/meta-llama-3.1-70b-instruct", "llama3.1-70b"},
      {"meta-llama/meta-llama-3-70b", "llama3.1-70b"},
      {"meta-llama/meta-llama-3-70b-instruct", "llama3.1-70b"},
      {"meta-llama/llama-3.3-70b-instruct", "llama3.1-70b"},
      {"meta-llama/llama-3.1-405b", "llama3.1-405b"},
      {"meta-llama/llama-3.1-405b-instruct", "llama3.1-405b"},
      {"meta-llama/meta-llama-3.1-405b", "llama3.1-405b"},
      {"meta-llama/meta-llama-3.1-405b-instruct", "llama3.1-405b"},
      {"meta-llama/llama-2-7b", "llama2-7b"},
      {"meta-llama/llama-2-7b-hf", "llama2-7b"},
      {"meta-llama/llama-2-7b-chat-hf", "llama2-7b"},
      {"meta-llama/llama-2-13b", "llama2-13b"},
      {"meta-llama/llama-2-13b-hf", "llama2-13b"},
      {"meta-llama/llama-2-13b-chat-hf", "llama2-13b"},
      {"meta-llama/llama-2-70b", "llama2-70b"},
      {"meta-llama/llama-2-70b-hf", "llama2-70b"},
      {"meta-llama/llama-2-70b-chat-hf", "llama2-70b"},
      {"mistralai/mixtral-8x7b-v0.1", "mixtral-8x7b"},
      {"mistralai/mixtral-8x7b-instruct-v0.1", "mixtral-8x7b"},
      {"qwen/qwen3-30b-a3b", "qwen3-30b-a3b"},
      {"qwen/qwen3-30b-a3b-base", "qwen3-30b-a3b"},
      {"qwen/qwen3-235b-a22b", "qwen3-235b-a22b"},
      {"deepseek-ai/deepseek-v3", "deepseek-v3"},
      {"deepseek-ai/deepseek-v3-base", "deepseek-v3"},
      {"openai/gpt-oss-120b", "gpt-oss-120b"},
      // The hub MPT-7B is ALiBi, bias-free and 50432-vocab, the shipped mpt-7b is llm-foundry's
      // preset (learned positions, biases, 50368): same layers and widths, 0.14 % apart in count,
      // so it maps. Not mapped: the 8k/storywriter variants (their context exceeds the preset's
      // 2048-row position table) and mosaicml/mpt-30b (64 heads, not the preset's 56).
      {"mosaicml/mpt-7b", "mpt-7b"},
      {"mosaicml/mpt-7b-instruct", "mpt-7b"},
      {"mosaicml/mpt-7b-chat", "mpt-7b"},
      {"meta-llama/llama-2-7b-chat", "llama2-7b"},
      {"meta-llama/llama-2-13b-chat", "llama2-13b"},
      {"meta-llama/llama-2-70b-chat", "llama2-70b"},
  };
  std::string id = lower(hf_id);
  // Accept the URL form and a trailing slash users paste from the browser.
  for (std::string_view prefix : {"https://huggingface.co/", "huggingface.co/", "hf://"})
    if (id.rfind(prefix, 0) == 0) id = id.substr(prefix.size());
  while (!id.empty() && id.back() == '/') id.pop_back();
  for (const Entry& e : kIds)
    if (e.id == id) return std::string(e.model);
  return std::nullopt;
}

}  // namespace meshplan
