#include "validate/fitted_profile.hpp"

#include <fmt/format.h>

#include <sstream>
#include <toml++/toml.h>

#include "spec/error.hpp"

namespace meshplan {
namespace {

// Whether any string value under `n` is `tag` (a key_src entry or a section's src).
bool uses_tag(const toml::node& n, const std::string& tag) {
  if (const auto* s = n.as_string()) return s->get() == tag;
  if (const auto* t = n.as_table()) {
    for (auto&& [k, v] : *t)
      if (uses_tag(v, tag)) return true;
  } else if (const auto* a = n.as_array()) {
    for (const auto& v : *a)
      if (uses_tag(v, tag)) return true;
  }
  return false;
}

// The loader refuses a source no value uses: drop the one a fitted value replaced if it was its last user.
void drop_if_unused(toml::table& root, const std::string& tag) {
  for (auto&& [k, v] : root)
    if (k.str() != "sources" && uses_tag(v, tag)) return;
  root["sources"].as_table()->erase(tag);
}

}  // namespace

std::string fitted_profile_toml(const RunsFit& fit, const ClusterSpec& base, const std::string& base_path,
                                const std::string& profile_name, const std::string& provenance) {
  toml::table root;
  try {
    root = toml::parse_file(base_path);
  } catch (const toml::parse_error& e) {
    throw InputError(base_path, "--base", std::string("does not parse: ") + std::string(e.description()));
  }
  root.insert_or_assign("name", profile_name);
  toml::table* sources = root["sources"].as_table();
  if (sources == nullptr) throw InputError(base_path, "sources", "missing [sources]");
  int written = 0;
  for (const ParameterFit& f : fit.parameters) {
    if (!f.identifiable || !applies_to(*f.parameter, base)) continue;
    ClusterSpec with = base;
    f.parameter->write(with, f.value);
    const std::string key(f.parameter->profile_key);
    const auto dot = key.find('.');
    toml::table* section = root[key.substr(0, dot)].as_table();
    if (section == nullptr) throw InputError(base_path, key, "the base profile has no such section");
    const std::string field = key.substr(dot + 1);
    section->insert_or_assign(field, f.parameter->key_value(with));
    const std::string tag = "runs_fit_" + std::string(f.parameter->name);
    toml::table* key_src = (*section)["key_src"].as_table();
    if (key_src == nullptr) {
      section->insert_or_assign("key_src", toml::table{});
      key_src = (*section)["key_src"].as_table();
    }
    const std::string old_tag = base.sources.at(key);
    key_src->insert_or_assign(field, tag);
    drop_if_unused(root, old_tag);
    const auto bounds = base.fitted_bounds.at(old_tag);
    toml::table src{{"kind", "fitted"},
                    {"ref", fmt::format("{} fitted to measured runs: {} = {:.6g}{} (prior {:.6g}); rms log error "
                                        "{:.2f} % -> {:.2f} % over {} runs",
                                        f.parameter->meaning, f.parameter->name, f.value,
                                        f.standard_error ? fmt::format(" +- {:.2g}", *f.standard_error) : "",
                                        f.prior, rms_log_pct(fit.prior_residuals), rms_log_pct(fit.residuals),
                                        fit.compared.size())},
                    {"bounds", toml::array{bounds.first, bounds.second}},
                    {"fit", provenance}};
    sources->insert_or_assign(tag, std::move(src));
    ++written;
  }
  if (written == 0)
    throw InputError(base_path, "--out", "no fitted parameter was identified by the runs on this profile: nothing to write");
  std::ostringstream os;
  os << "# Written by meshplan calibrate --runs (docs/validation.md \"Fitting to measured runs\").\n" << root << "\n";
  return os.str();
}

}  // namespace meshplan
