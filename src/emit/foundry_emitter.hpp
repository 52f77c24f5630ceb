#pragma once
// llm-foundry / Composer training YAML, shaped like llm-foundry's scripts/train/yamls/pretrain/
// mpt-7b.yaml (@ 8c8dd48f7216). llm-foundry rejects unknown top-level
// keys, and Composer's FSDP1 path silently ignores misspelled fsdp_config keys, so both lists are
// fixed here and only fields of Composer's FSDPConfig / FSDP2Config dataclasses
// (composer/utils/parallelism.py) are written.
#include <optional>
#include <string>

#include "emit/emit_common.hpp"
#include "spec/run_config.hpp"

namespace meshplan {

// The Hugging Face id llm-foundry's hf_causal_lm loads for a shipped Llama-family model
// (llama2-*, llama3.1-*, mixtral-8x7b); nullopt for other models (they are emitted as
// mpt_causal_lm with the shape inline).
std::optional<std::string> foundry_hf_id(const ModelSpec& m);

// True when the plan is Composer on FSDP2 (plan.runtime composer_fsdp2): the YAML then holds
// FSDP2Config keys and the launch needs FSDP_VERSION=2 in the environment.
bool foundry_uses_fsdp2(const RunConfig& rc);

// The training YAML for a resolved plan. Throws InputError ("llm-foundry: <plan key>: <why>") for
// plans llm-foundry cannot express: full-style TP, PP, CP, EP, ZeRO-1, selective AC, param
// offload, non-fp32 master state, a batch that is not world x micro x accumulation, ...
std::string emit_foundry_yaml(const RunConfig& rc);

}  // namespace meshplan
