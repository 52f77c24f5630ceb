// `meshplan model NAME|PATH [--json]`, `meshplan model --list`: what the planner will assume about
// a model's shape, and whether its parameter count matches the published one.
#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/command.hpp"
#include "spec/error.hpp"
#include "spec/model_loader.hpp"
#include "spec/model_spec.hpp"

namespace meshplan::cli {
namespace {

using nlohmann::json;

std::string grouped(std::int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string billions(std::int64_t v) { return fmt::format("{:.2f}B", static_cast<double>(v) / 1e9); }

std::optional<double> diff_pct(const ModelSpec& m) {
  if (!m.n_params_published) return std::nullopt;
  const auto published = static_cast<double>(*m.n_params_published);
  return (static_cast<double>(n_params(m)) - published) / published * 100.0;
}

// A Hugging Face id of a shipped architecture is accepted as a convenience; anything else that
// is not a .toml/.json path goes to load_model, whose error lists the shipped names.
ModelSpec resolve(const std::string& target) {
  const bool is_path = target.ends_with(".toml") || target.ends_with(".json");
  if (!is_path && target.find('/') != std::string::npos) {
    if (auto shipped = shipped_model_for_hf_id(target)) {
      fmt::print(stderr, "meshplan: {} has the architecture of shipped model {}\n", target, *shipped);
      return load_model(*shipped);
    }
    throw InputError("", target,
                     "not a shipped model, a model TOML or a config.json, and not a Hugging Face id "
                     "meshplan knows; download that model's config.json and pass its path");
  }
  return load_model(target);
}

json params_breakdown_json(const ModelSpec& m) {
  const ParamCounts c = param_counts(m);
  const std::int64_t layers = m.n_layers;
  // Leading dense layers count their dense MLP (ParamCounts::total).
  const std::int64_t mlp = c.mlp_per_layer * (layers - c.n_dense_layers) + c.dense_mlp_per_layer * c.n_dense_layers;
  return json{{"attention", c.attention_per_layer * layers},
              {"mlp", mlp},
              {"mtp", c.mtp},
              {"norms", c.norm_per_layer * layers + c.final_norm},
              {"embedding", c.embedding},
              {"position", c.position},
              {"lm_head", c.lm_head},
              {"per_layer", c.per_layer()}};
}

json model_json(const ModelSpec& m) {
  json j;
  j["name"] = m.name;
  j["n_params"] = n_params(m);
  j["n_params_published"] = m.n_params_published ? json(*m.n_params_published) : json(nullptr);
  j["n_params_diff_pct"] = diff_pct(m) ? json(*diff_pct(m)) : json(nullptr);
  j["n_params_source"] = m.n_params_source.empty() ? json(nullptr) : json(m.n_params_source);
  j["n_active_params"] = n_active_params(m);
  j["n_layers"] = m.n_layers;
  j["d_model"] = m.d_model;
  j["n_heads"] = m.n_heads;
  j["n_kv_heads"] = m.n_kv_heads;
  j["head_dim"] = m.head_dim;
  j["ffn_hidden"] = m.ffn_hidden;
  j["mlp"] = std::string(to_string(m.mlp));
  j["vocab"] = m.vocab;
  j["tied_embeddings"] = m.tied_embeddings;
  j["pos_emb"] = std::string(to_string(m.pos_emb));
  j["max_seq_len"] = m.max_seq_len;
  j["norm"] = std::string(to_string(m.norm));
  j["norm_bias"] = m.norm_bias;
  j["linear_bias"] = m.linear_bias;
  j["moe"] = json{{"enabled", m.moe.enabled()},
                  {"n_experts", m.moe.n_experts},
                  {"top_k", m.moe.top_k},
                  {"expert_ffn", m.moe.expert_ffn},
                  {"n_shared_experts", m.moe.n_shared_experts},
                  {"n_dense_layers", m.moe.n_dense_layers},
                  {"capacity_factor", m.moe.capacity_factor}};
  j["attention"] = std::string(to_string(m.attention));
  j["qk_norm"] = m.qk_norm;
  j["n_mtp_layers"] = m.n_mtp_layers;
  j["sliding_window"] = m.sliding_window;
  j["full_attention_every"] = m.full_attention_every;
  if (m.attention == AttentionKind::mla)
    j["mla"] = json{{"q_lora_rank", m.mla.q_lora_rank},
                    {"kv_lora_rank", m.mla.kv_lora_rank},
                    {"rope_head_dim", m.mla.rope_head_dim},
                    {"v_head_dim", m.mla.v_head_dim}};
  j["params_breakdown"] = params_breakdown_json(m);
  return j;
}

std::string attention_text(const ModelSpec& m) {
  if (m.attention == AttentionKind::mla)
    return fmt::format("{} heads, multi-head latent: q rank {}, kv rank {}, head_dim {} + rope {}, v {}", m.n_heads,
                       m.mla.q_lora_rank, m.mla.kv_lora_rank, m.head_dim, m.mla.rope_head_dim, m.mla.v_head_dim);
  std::string kind;
  if (m.n_kv_heads == m.n_heads) kind = "multi-head";
  else if (m.n_kv_heads == 1) kind = "multi-query";
  else kind = fmt::format("grouped-query, {} query heads per kv head", m.n_heads / m.n_kv_heads);
  std::string window;
  if (m.sliding_window > 0)
    window = m.full_attention_every > 0
                 ? fmt::format(", a {}-token window (one layer in {} full)", m.sliding_window, m.full_attention_every)
                 : fmt::format(", a {}-token window on every layer", m.sliding_window);
  return fmt::format("{} heads, {} kv heads ({}), head_dim {}{}{}", m.n_heads, m.n_kv_heads, kind, m.head_dim,
                     m.qk_norm ? ", QK-norm" : "", window);
}

std::string mlp_text(const ModelSpec& m) {
  const char* shape = m.mlp == MlpKind::swiglu ? "gated, 3 matrices" : "2 matrices";
  return fmt::format("{} ({}), ffn_hidden {}", to_string(m.mlp), shape, m.ffn_hidden);
}

std::string moe_text(const ModelSpec& m) {
  if (!m.moe.enabled()) return "none (dense)";
  std::string s = fmt::format("{} experts, top-{}, expert_ffn {}", m.moe.n_experts, m.moe.top_k, m.moe.expert_ffn);
  if (m.moe.n_shared_experts > 0) s += fmt::format(", {} shared", m.moe.n_shared_experts);
  if (m.moe.capacity_factor > 0) s += fmt::format(", capacity factor {}", m.moe.capacity_factor);
  if (m.moe.n_dense_layers > 0) return s + fmt::format(", after {} dense layers", m.moe.n_dense_layers);
  return s + ", in every layer";
}

void print_model_text(const ModelSpec& m) {
  const ParamCounts c = param_counts(m);
  const std::int64_t total = n_params(m);
  const std::int64_t layers = m.n_layers;

  fmt::print("{}\n\narchitecture\n", m.name);
  auto row = [](std::string_view k, const std::string& v) { fmt::print("  {:<15}{}\n", k, v); };
  row("layers", std::to_string(m.n_layers));
  row("d_model", std::to_string(m.d_model));
  row("attention", attention_text(m));
  row("mlp", mlp_text(m));
  row("moe", moe_text(m));
  row("vocab", fmt::format("{}, {}", m.vocab, m.tied_embeddings ? "tied (LM head shares the embedding)"
                                                                : "untied (separate LM head)"));
  row("positions", fmt::format("{}, max_seq_len {}{}", to_string(m.pos_emb), m.max_seq_len,
                               m.pos_emb == PosEmb::learned ? " (learned table)" : ""));
  const bool has_norm_bias = m.norm == NormKind::layernorm && m.norm_bias;
  row("norm", fmt::format("{}{}", to_string(m.norm), has_norm_bias ? " (weight + bias)" : " (weight only)"));
  row("linear biases", m.linear_bias ? "yes" : "no");

  fmt::print("\nparameters {:>22} {:>18} {:>8}\n", "per layer", "total", "share");
  auto prow = [&](std::string_view k, std::optional<std::int64_t> per_layer, std::int64_t v) {
    fmt::print("  {:<16}{:>22} {:>18} {:>7.2f}%\n", k, per_layer ? grouped(*per_layer) : std::string(),
               grouped(v), 100.0 * static_cast<double>(v) / static_cast<double>(total));
  };
  prow("attention", c.attention_per_layer, c.attention_per_layer * layers);
  prow(m.moe.enabled() ? "mlp (experts)" : "mlp", c.mlp_per_layer, c.mlp_per_layer * (layers - c.n_dense_layers));
  if (c.n_dense_layers > 0) prow("mlp (dense)", c.dense_mlp_per_layer, c.dense_mlp_per_layer * c.n_dense_layers);
  if (c.mtp > 0) prow("mtp modules", std::nullopt, c.mtp);
  prow("norms (+final)", c.norm_per_layer, c.norm_per_layer * layers + c.final_norm);
  prow("embedding", std::nullopt, c.embedding);
  prow("position", std::nullopt, c.position);
  prow("lm head", std::nullopt, c.lm_head);
  fmt::print("  {:<16}{:>22} {:>18}  ({})\n", "total", "", grouped(total), billions(total));
  if (m.moe.enabled())
    fmt::print("  {:<16}{:>22} {:>18}  ({}, top-{} of {} experts)\n", "active/token", "",
               grouped(n_active_params(m)), billions(n_active_params(m)), m.moe.top_k, m.moe.n_experts);
  if (m.n_params_published) {
    fmt::print("  {:<16}{:>22} {:>18}  (computed {:+.3f}%)\n", "published", "", grouped(*m.n_params_published),
               *diff_pct(m));
    fmt::print("  source: {}\n", m.n_params_source);
  } else {
    fmt::print("  {:<16}{:>22} {:>18}\n", "published", "", "none");
  }
}

int run_list(bool as_json) {
  const std::vector<std::string> names = list_models();
  if (as_json) {
    json arr = json::array();
    for (const auto& n : names) {
      const ModelSpec m = load_model(n);
      arr.push_back(json{{"name", m.name},
                         {"n_params", n_params(m)},
                         {"n_params_published", m.n_params_published ? json(*m.n_params_published) : json(nullptr)},
                         {"n_layers", m.n_layers},
                         {"d_model", m.d_model}});
    }
    fmt::print("{}\n", json{{"models", arr}}.dump(2));
    return 0;
  }
  fmt::print("{:<16}{:>7}{:>8}{:>7}{:>6}{:>9}  {:<12}{:>10}{:>11}{:>9}\n", "name", "layers", "d_model", "heads",
             "kv", "vocab", "mlp", "params", "published", "diff");
  for (const auto& n : names) {
    const ModelSpec m = load_model(n);
    std::string mlp(to_string(m.mlp));
    if (m.moe.enabled()) mlp += fmt::format(" {}x{}", m.moe.n_experts, m.moe.top_k);
    fmt::print("{:<16}{:>7}{:>8}{:>7}{:>6}{:>9}  {:<12}{:>10}{:>11}{:>9}\n", m.name, m.n_layers, m.d_model,
               m.n_heads, m.n_kv_heads, m.vocab, mlp, billions(n_params(m)),
               m.n_params_published ? billions(*m.n_params_published) : std::string("-"),
               diff_pct(m) ? fmt::format("{:+.3f}%", *diff_pct(m)) : std::string("-"));
  }
  return 0;
}

struct Options {
  std::string target;
  bool list = false;
  bool as_json = false;
};

}  // namespace

Command add_model_command(CLI::App& root) {
  auto opts = std::make_shared<Options>();
  Command c;
  c.app = root.add_subcommand("model", "Show a model's architecture and parameter count");
  c.app->description(
      "Show a model's architecture and its parameter breakdown, with the computed count beside the "
      "published one.\n"
      "NAME|PATH is one of:\n"
      "  a shipped model name          meshplan model llama3.1-8b\n"
      "  a model TOML (docs/models.md) meshplan model my-model.toml\n"
      "  a Hugging Face config.json    meshplan model ~/Llama-3.1-8B/config.json\n"
      "                                (Llama, Mistral, Mixtral, MPT, GPT-NeoX, GPT-2 families)\n"
      "  a Hugging Face id of a shipped architecture, e.g. meta-llama/Llama-3.1-8B");
  std::string names;
  for (const auto& n : list_models()) names += (names.empty() ? "" : ", ") + n;
  c.app->footer("Shipped models: " + (names.empty() ? std::string("(none found; set MESHPLAN_DATA_DIR)") : names) +
                "\n`meshplan model --list` compares each with its published count.\n");
  c.app->add_option("model", opts->target, "NAME, model .toml path or config.json path");
  c.app->add_flag("--list", opts->list, "list the shipped models with their parameter counts");
  c.app->add_flag("--json", opts->as_json, "print JSON instead of text");
  c.run = [opts]() -> int {
    if (opts->list) {
      if (!opts->target.empty()) throw InputError("", "--list", "takes no model argument");
      return run_list(opts->as_json);
    }
    if (opts->target.empty())
      throw InputError("", "model", "name a model (or use --list); see `meshplan model --help`");
    const ModelSpec m = resolve(opts->target);
    if (opts->as_json) fmt::print("{}\n", model_json(m).dump(2));
    else print_model_text(m);
    return 0;
  };
  return c;
}

}  // namespace meshplan::cli
