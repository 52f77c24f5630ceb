#pragma once
// Reading ModelSpecs: shipped models/*.toml by name, a model TOML by path, or a Hugging Face
// config.json (Llama, Mistral/Mixtral, MPT, GPT-NeoX, GPT-2 field names).
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spec/model_spec.hpp"

namespace meshplan {

// NAME (a file in models/ without .toml), or a path to a .toml or config.json.
// Throws InputError naming the file, the key and the reason.
ModelSpec load_model(const std::string& name_or_path);

// Names of the shipped models, sorted.
std::vector<std::string> list_models();

// A Hugging Face config.json already parsed; `file` is used in error messages.
ModelSpec import_hf_config(const nlohmann::json& config, const std::string& file);

// "meta-llama/Meta-Llama-3.1-8B" -> "llama3.1-8b" when a shipped model has that architecture.
std::optional<std::string> shipped_model_for_hf_id(std::string_view hf_id);

// The config.json model_types import_hf_config reads, as a comma-separated list.
std::string_view hf_supported_model_types();
// Whether a Hugging Face id's name spells one of those families ("meta-llama/...", "Qwen/Qwen3-...");
// false for e.g. "databricks/dbrx-instruct", whose model_type (dbrx) meshplan does not read.
bool hf_id_names_a_supported_family(std::string_view hf_id);

}  // namespace meshplan
