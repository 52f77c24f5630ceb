#pragma once
// Editing a user's run config in its own syntax (llm-foundry YAML, torchtitan TOML, meshplan plan
// TOML) and re-importing the edited text through the same importer, so that a what-if variant gets
// exactly the runtime semantics, defaults and warnings the real file would get.
#include <string>
#include <string_view>

#include "spec/import_common.hpp"
#include "spec/run_config.hpp"

namespace meshplan {

struct ConfigDocument {
  std::string path;  // the file the text came from: messages, model names, relative paths
  ConfigFormat format = ConfigFormat::meshplan_plan;
  std::string text;
  // A launch script given as the config (launch_script.hpp) is edited as the config it starts;
  // this is the GPU count its launcher gives (0: none).
  std::int64_t launched_gpus = 0;
};

// Reads the file and detects its format with the regular loader. Throws InputError.
ConfigDocument read_config_document(const std::string& path, const ImportOptions& opts = {});

// The document with `dotted_key` (the file's own names: "fsdp_config.mixed_precision",
// "parallelism.tensor_parallel_degree", "batch.micro_batch") set to `value`. The value keeps the
// type the key already has in the file; a new key gets the type its text parses as (bool, integer,
// float, else string), or a string when `as_string`. An llm-foundry value that is an
// interpolation "${variables.x}" is changed at variables.x, so every use of it follows.
// Missing parent maps/tables are created. Throws InputError when a parent is not a map.
ConfigDocument with_value(const ConfigDocument& doc, std::string_view dotted_key, std::string_view value,
                          bool as_string = false);

// The current value of `dotted_key` as text ("" when absent), interpolations resolved as above.
std::string value_of(const ConfigDocument& doc, std::string_view dotted_key);

// Imports the document's text with the importer of its format (unresolved, like load_run_config).
RunConfig import_document(const ConfigDocument& doc, const ImportOptions& opts = {});

}  // namespace meshplan
