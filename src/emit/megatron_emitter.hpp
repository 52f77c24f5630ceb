#pragma once
// Megatron-LM pretrain_gpt.py arguments, names as of tag core_v0.15.0 (megatron/training/
// arguments.py @ 0d7e02bd; argparse there rejects unknown flags).
#include <string>
#include <vector>

#include "emit/emit_common.hpp"
#include "spec/run_config.hpp"

namespace meshplan {

// The argument list for a resolved plan, one flag or value per element, in a fixed order:
// parallelism, model shape, batch, precision, recompute, fp8, optimizer, data/tokenizer, logging.
// Throws InputError ("megatron: <plan key>: <why>") for plans Megatron-LM cannot express as
// simulated (GPipe, FSDP-style ZeRO-2/3, MLP-only TP, per-op or per-N-layer AC, torchao fp8,
// offload, ALiBi, ...).
std::vector<std::string> emit_megatron_args(const RunConfig& rc);

// The same list as shell text: one "  --flag value \" line per flag.
std::string megatron_args_text(const std::vector<std::string>& args);

}  // namespace meshplan
