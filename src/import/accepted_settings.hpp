#pragma once
// What the importers do with the settings they accept but do not read into the plan. Two kinds:
// settings that change neither the simulated step's time nor its memory (logging, data, optimizer
// values, checkpoints written between steps), and settings that change the real step in a way
// meshplan's model lacks. The second are named at import, with a warning and an entry of
// RunConfig::unmodelled_settings, whenever the file gives them a value other than the one the
// model assumes (the runtime's default, unless noted). docs/importers.md "Accepted but not modelled" lists
// every one; tests/spec/test_accepted_settings.cpp checks each importer's keys against its lists.
#include <string>
#include <string_view>
#include <vector>

#include "spec/run_config.hpp"

namespace meshplan {

struct UnmodelledSetting {
  std::string key;  // as the file writes it: "training.gc_freq", "fsdp_config.process_group"
  // The value the model assumes, as the file would write it (lists as "[a, b]"): the runtime's
  // default unless the comment at the entry says otherwise; "" when there is none worth comparing
  // with (None, an unset path): then any value given is named.
  std::string modelled_value;
  std::string effect;  // what the setting changes in the real run that the model does not
};

// The entry for `key`, or nullptr.
const UnmodelledSetting* find_unmodelled(const std::vector<UnmodelledSetting>& table, std::string_view key);

// Whether `value` (as the file gives it) differs from what the model assumes, so that the model
// misses what it does.
bool differs_from_model(const UnmodelledSetting& s, const std::string& value);

// Names `s`, given as `value`: a warning starting with its key and an entry of
// rc.unmodelled_settings (sorted, once).
void note_unmodelled(RunConfig& rc, const UnmodelledSetting& s, const std::string& value);

// Records in rc.assumptions that `key` was not stated and resolved to `value` by `rule` (whose
// default it is, with its source): "key: not stated; value (rule)".
void note_default(RunConfig& rc, std::string_view key, std::string_view value, std::string_view rule);

}  // namespace meshplan
