#pragma once
// Helpers shared by the config importers (llm-foundry YAML, torchtitan TOML, meshplan plan TOML):
// caller-side options, one-line error text, "did you mean" suggestions and typed TOML access.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <toml++/toml.h>
#include <vector>

#include "spec/model_spec.hpp"
#include "spec/run_config.hpp"

namespace meshplan {

// What the caller knows better than the file.
struct ImportOptions {
  // Replaces the model the file names (CLI --model): needed when an llm-foundry YAML names a
  // Hugging Face id that is not shipped, or a torchtitan flavor meshplan does not ship.
  std::optional<ModelSpec> model;
};

// load_run_config (config_loader.hpp) with caller-side options; defined in config_loader.cpp.
RunConfig load_run_config(const std::string& path, const ImportOptions& opts);

namespace importer {

// Whole file as text; InputError(path, "", ...) when it cannot be read.
std::string read_text(const std::string& path);

// Newlines and tabs folded to spaces: every InputError is one line.
std::string one_line(std::string_view s);

// The candidate nearest to `key` by edit distance, when it is close enough to be a typo.
std::optional<std::string> closest(std::string_view key, const std::vector<std::string>& candidates);
// " (did you mean 'x'?)" or "".
std::string did_you_mean(std::string_view key, const std::vector<std::string>& candidates);

// File name without directories or extension ("mpt-7b" for /a/b/mpt-7b.yaml).
std::string file_stem(const std::string& path);

// A path given inside a config, relative to the directory of that config file.
std::string relative_to(const std::string& config_path, const std::string& p);

// Typed access to a TOML table with InputErrors that name the file and the dotted key.
class TomlView {
public:
  TomlView(std::string file, const toml::table& table, std::string prefix = "")
      : file_(std::move(file)), table_(&table), prefix_(std::move(prefix)) {}

  const std::string& file() const { return file_; }
  const toml::table& table() const { return *table_; }
  std::string key(std::string_view k) const {
    return prefix_.empty() ? std::string(k) : prefix_ + "." + std::string(k);
  }
  bool has(std::string_view k) const { return table_->contains(k); }

  // Sub-table `k`; nullopt when absent; InputError when present but not a table.
  std::optional<TomlView> sub(std::string_view k) const;

  std::optional<std::int64_t> get_int(std::string_view k) const;
  std::optional<double> get_number(std::string_view k) const;  // integer or float
  std::optional<bool> get_bool(std::string_view k) const;
  std::optional<std::string> get_string(std::string_view k) const;
  std::optional<std::vector<std::string>> get_string_array(std::string_view k) const;

  // Every key of this table must be one of `allowed`; the first stray key is an InputError
  // (with a suggestion) because a misspelled key would otherwise silently keep its default.
  void require_known(const std::vector<std::string>& allowed, std::string_view why) const;

  [[noreturn]] void fail(std::string_view k, const std::string& reason) const;

private:
  std::string file_;
  const toml::table* table_;
  std::string prefix_;
};

// Parses TOML text; a syntax error becomes InputError(file, "line L, column C", description).
toml::table parse_toml(const std::string& file, const std::string& text);

}  // namespace importer
}  // namespace meshplan
