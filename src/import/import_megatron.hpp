#pragma once
// Megatron-LM launch arguments -> RunConfig (runtime megatron). Reads what users have: an
// arguments file (`--flag value` pairs, one per line with `\` continuations, as meshplan's
// Megatron bundle writes megatron_args.txt) or a launch script (`torchrun ... pretrain_gpt.py ...`,
// `NAME=value` and `NAME=( ... )` assignments expanded, `#` comments). Flag names and defaults
// follow megatron/training/arguments.py at core_v0.15.0. See docs/importers.md.
#include <string>
#include <string_view>
#include <vector>

#include "spec/import_common.hpp"
#include "spec/run_config.hpp"

namespace meshplan {

// Whether `text` reads as Megatron-LM arguments: it names --num-layers,
// --tensor-model-parallel-size or --pipeline-model-parallel-size, or runs pretrain_gpt.py.
bool looks_like_megatron_args(std::string_view text);

// The words of the Megatron command in `text` after shell-like expansion (continuations, quotes,
// comments, variables set in the file); the launcher prefix (torchrun ... script.py) is removed
// and returned in `launcher` when given. Throws InputError naming the file and the flag whose value
// is an unresolved variable.
std::vector<std::string> megatron_words(const std::string& path, const std::string& text,
                                        std::vector<std::string>* launcher = nullptr);

// The result is unresolved: the data-parallel degree is -1 (world / (tp x pp x cp)) and n_gpus is
// 0 unless a torchrun prefix fixes --nnodes x --nproc-per-node. Unknown flags are warnings
// ("--flag: ..."); malformed values are InputError(path, "--flag", reason).
RunConfig import_megatron_args(const std::string& path, const std::string& text, const ImportOptions& opts = {});

// Every flag the importer accepts, and of those the ones that change neither time nor memory
// (optimizer values, data, logging, checkpoints: never reported). A flag given that the mapping
// does not read and that is not of the second kind is named in RunConfig::unmodelled_settings.
std::vector<std::string> megatron_known_flags();
std::vector<std::string> megatron_no_effect_flags();

}  // namespace meshplan
