// Editing run configs in their own syntax and re-importing them (config_edit.hpp).
#include "report/config_edit.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <regex>
#include <sstream>
#include <vector>

#include "import/config_loader.hpp"
#include "spec/error.hpp"
#include "import/import_composer.hpp"
#include "import/import_megatron.hpp"
#include "import/import_torchtitan.hpp"
#include "import/launch_script.hpp"
#include "spec/plan_toml.hpp"

namespace meshplan {

namespace {

std::vector<std::string> split_key(const std::string& path, std::string_view dotted) {
  std::vector<std::string> parts;
  std::string cur;
  for (char ch : dotted) {
    if (ch == '.') {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  parts.push_back(cur);
  for (const auto& p : parts)
    if (p.empty()) throw InputError(path, std::string(dotted), "not a dotted key (empty component)");
  return parts;
}

// ---- YAML

// The node at `parts`, or an undefined node when a component is missing.
YAML::Node yaml_find(const YAML::Node& root, const std::vector<std::string>& parts) {
  YAML::Node n;
  n.reset(root);
  for (const auto& p : parts) {
    if (!n.IsMap() || !n[p]) return YAML::Node(YAML::NodeType::Undefined);
    YAML::Node next = n[p];
    n.reset(next);
  }
  return n;
}

// "${variables.max_seq_len}" -> "variables.max_seq_len": llm-foundry's interpolation, so an edit
// lands where the value is defined and every use of it follows.
std::optional<std::string> interpolation_target(const YAML::Node& n) {
  static const std::regex re(R"(^\$\{\s*(variables\.[A-Za-z0-9_.]+)\s*\}$)");
  if (!n.IsDefined() || !n.IsScalar()) return std::nullopt;
  std::smatch m;
  const std::string s = n.Scalar();
  if (std::regex_match(s, m, re)) return m[1].str();
  return std::nullopt;
}

std::string yaml_resolve_key(const ConfigDocument& doc, const YAML::Node& root, std::string key) {
  for (int hops = 0; hops < 8; ++hops) {  // chains of variables are short; a cycle stops here
    const auto target = interpolation_target(yaml_find(root, split_key(doc.path, key)));
    if (!target) break;
    key = *target;
  }
  return key;
}

YAML::Node yaml_load(const ConfigDocument& doc) {
  try {
    return YAML::Load(doc.text);
  } catch (const YAML::Exception& e) {
    throw InputError(doc.path, "", importer::one_line(std::string("YAML error: ") + e.what()));
  }
}

ConfigDocument yaml_with(const ConfigDocument& doc, std::string_view dotted, std::string_view value) {
  YAML::Node root = yaml_load(doc);
  const std::string key = yaml_resolve_key(doc, root, std::string(dotted));
  const auto parts = split_key(doc.path, key);
  YAML::Node n;
  n.reset(root);
  std::string walked;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    walked += (walked.empty() ? "" : ".") + parts[i];
    if (!n[parts[i]] || n[parts[i]].IsNull()) n[parts[i]] = YAML::Node(YAML::NodeType::Map);
    YAML::Node next = n[parts[i]];
    if (!next.IsMap()) throw InputError(doc.path, walked, fmt::format("not a map, so '{}' cannot be set", key));
    n.reset(next);
  }
  YAML::Node v;
  try {
    v = YAML::Load(std::string(value));  // "true" stays a bool, "8" an int, "PURE" a string
  } catch (const YAML::Exception&) {
    v = YAML::Node(std::string(value));
  }
  if (value.empty()) v = YAML::Node(YAML::NodeType::Null);
  n[parts.back()] = v;
  YAML::Emitter out;
  out << root;
  ConfigDocument d = doc;
  d.text = std::string(out.c_str()) + "\n";
  return d;
}

// ---- TOML

toml::table toml_load(const ConfigDocument& doc) { return importer::parse_toml(doc.path, doc.text); }

const toml::node* toml_find(const toml::table& root, const std::vector<std::string>& parts) {
  const toml::table* t = &root;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const toml::node* n = t->get(parts[i]);
    if (n == nullptr) return nullptr;
    if (i + 1 == parts.size()) return n;
    t = n->as_table();
    if (t == nullptr) return nullptr;
  }
  return nullptr;
}

// The value as the TOML type it parses as on its own ("x = true" -> bool), else a string.
void toml_set_inferred(toml::table& t, const std::string& k, std::string_view value) {
  try {
    toml::table one = toml::parse("x = " + std::string(value));
    if (const toml::node* n = one.get("x"); n != nullptr && !n->is_table()) {
      t.insert_or_assign(k, *n);
      return;
    }
  } catch (const toml::parse_error&) {
  }
  t.insert_or_assign(k, std::string(value));
}

ConfigDocument toml_with(const ConfigDocument& doc, std::string_view dotted, std::string_view value, bool as_string) {
  toml::table root = toml_load(doc);
  const auto parts = split_key(doc.path, dotted);
  toml::table* t = &root;
  std::string walked;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    walked += (walked.empty() ? "" : ".") + parts[i];
    if (!t->contains(parts[i])) t->insert(parts[i], toml::table{});
    toml::table* next = t->get(parts[i])->as_table();
    if (next == nullptr)
      throw InputError(doc.path, walked, fmt::format("not a table, so '{}' cannot be set", std::string(dotted)));
    t = next;
  }
  const std::string& k = parts.back();
  const toml::node* old = t->get(k);
  const std::string v(value);
  auto bad = [&](const char* type) -> void {
    throw InputError(doc.path, std::string(dotted), fmt::format("'{}' is not {} (the file's type for this key)", v, type));
  };
  if (as_string || (old != nullptr && old->is_string())) {
    t->insert_or_assign(k, v);
  } else if (old != nullptr && old->is_boolean()) {
    if (v == "true") t->insert_or_assign(k, true);
    else if (v == "false") t->insert_or_assign(k, false);
    else bad("a boolean");
  } else if (old != nullptr && old->is_integer()) {
    std::size_t pos = 0;
    long long n = 0;
    try {
      n = std::stoll(v, &pos);
    } catch (...) {
      pos = 0;
    }
    if (pos != v.size() || v.empty()) bad("an integer");
    t->insert_or_assign(k, static_cast<std::int64_t>(n));
  } else if (old != nullptr && old->is_floating_point()) {
    std::size_t pos = 0;
    double x = 0;
    try {
      x = std::stod(v, &pos);
    } catch (...) {
      pos = 0;
    }
    if (pos != v.size() || v.empty()) bad("a number");
    t->insert_or_assign(k, x);
  } else {
    toml_set_inferred(*t, k, v);
  }
  std::ostringstream os;
  os << root;
  ConfigDocument d = doc;
  d.text = os.str() + "\n";
  return d;
}

// ---- Megatron-LM arguments: KEY is a flag ("--micro-batch-size" or "micro-batch-size"); "true" /
// "false" add or remove a flag without a value.

std::string megatron_flag(const std::string& path, std::string_view key) {
  const std::string flag = key.starts_with("--") ? std::string(key) : "--" + std::string(key);
  const bool plain = flag.size() > 2 && std::all_of(flag.begin() + 2, flag.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  });
  if (!plain) throw InputError(path, std::string(key), "not a Megatron flag name (letters, digits and dashes)");
  return flag;
}

// The flag as a word: after the start, a space or a newline; with its value when it has one.
std::regex megatron_flag_re(const std::string& flag) {
  return std::regex("(^|[ \\t\\n])" + flag +
                    R"((=[^ \t\n\\]*|[ \t]+[^ \t\n\\-][^ \t\n\\]*|[ \t]+-[0-9][^ \t\n\\]*)?(?=[ \t\r\n\\]|$))");
}

ConfigDocument megatron_with(const ConfigDocument& doc, std::string_view key, std::string_view value) {
  const std::string flag = megatron_flag(doc.path, key);
  const std::regex re = megatron_flag_re(flag);
  ConfigDocument d = doc;
  std::smatch m;
  const bool present = std::regex_search(doc.text, m, re);
  const bool is_switch = value == "true" || value == "false";
  const std::string replacement = is_switch ? (value == "true" ? flag : "") : flag + " " + std::string(value);
  if (present) {
    d.text = doc.text.substr(0, static_cast<std::size_t>(m.position(0))) + m[1].str() + replacement +
             doc.text.substr(static_cast<std::size_t>(m.position(0) + m.length(0)));
    return d;
  }
  if (value == "false") return d;
  // Absent: inserted before the first argument every Megatron command has, so it lands in the same command.
  for (const char* anchor : {"--num-layers", "--tensor-model-parallel-size", "--pipeline-model-parallel-size"}) {
    std::smatch a;
    if (std::regex_search(doc.text, a, megatron_flag_re(anchor))) {
      const auto at = static_cast<std::size_t>(a.position(0) + a[1].length());
      d.text = doc.text.substr(0, at) + replacement + " " + doc.text.substr(at);
      return d;
    }
  }
  throw InputError(doc.path, flag, "no Megatron command to add the flag to (no --num-layers in the file)");
}

std::string megatron_value_of(const ConfigDocument& doc, std::string_view key) {
  std::smatch m;
  const std::string flag = megatron_flag(doc.path, key);
  if (!std::regex_search(doc.text, m, megatron_flag_re(flag))) return "";
  std::string v = m[2].str();
  const auto start = v.find_first_not_of(" \t=");
  return start == std::string::npos ? "true" : v.substr(start);
}

}  // namespace

ConfigDocument read_config_document(const std::string& path, const ImportOptions& opts) {
  ConfigDocument d;
  d.path = path;
  d.text = importer::read_text(path);
  d.format = load_run_config(path, opts).format;  // the regular detector decides
  if (!looks_like_megatron_args(d.text))
    if (const auto launched = launched_config(path, d.text)) {
      d.path = launched->config;
      d.text = importer::read_text(d.path);
      d.launched_gpus = launched->n_gpus;
    }
  return d;
}

ConfigDocument with_value(const ConfigDocument& doc, std::string_view dotted_key, std::string_view value,
                          bool as_string) {
  if (doc.format == ConfigFormat::llm_foundry_yaml) return yaml_with(doc, dotted_key, value);
  if (doc.format == ConfigFormat::megatron_args) return megatron_with(doc, dotted_key, value);
  return toml_with(doc, dotted_key, value, as_string);
}

std::string value_of(const ConfigDocument& doc, std::string_view dotted_key) {
  if (doc.format == ConfigFormat::megatron_args) return megatron_value_of(doc, dotted_key);
  if (doc.format == ConfigFormat::llm_foundry_yaml) {
    const YAML::Node root = yaml_load(doc);
    const std::string key = yaml_resolve_key(doc, root, std::string(dotted_key));
    const YAML::Node n = yaml_find(root, split_key(doc.path, key));
    if (!n.IsDefined() || n.IsNull()) return "";
    if (n.IsScalar()) return n.Scalar();
    YAML::Emitter out;
    out << YAML::Flow << n;
    return out.c_str();
  }
  const toml::table root = toml_load(doc);
  const toml::node* n = toml_find(root, split_key(doc.path, dotted_key));
  if (n == nullptr) return "";
  if (const auto* s = n->as_string()) return s->get();
  std::ostringstream os;
  n->visit([&](const auto& x) { os << x; });
  return os.str();
}

namespace {
RunConfig import_document_text(const ConfigDocument& doc, const ImportOptions& opts) {
  switch (doc.format) {
    case ConfigFormat::megatron_args:
      return import_megatron_args(doc.path, doc.text, opts);
    case ConfigFormat::llm_foundry_yaml:
      return import_llm_foundry(doc.path, doc.text, opts);
    case ConfigFormat::torchtitan_toml:
      return import_torchtitan(doc.path, importer::parse_toml(doc.path, doc.text), opts);
    case ConfigFormat::meshplan_plan:
      break;
  }
  return read_plan_toml(doc.path, importer::parse_toml(doc.path, doc.text), opts);
}
}  // namespace

RunConfig import_document(const ConfigDocument& doc, const ImportOptions& opts) {
  RunConfig rc = import_document_text(doc, opts);
  if (doc.launched_gpus > 0 && rc.n_gpus <= 0) rc.n_gpus = doc.launched_gpus;
  return rc;
}

}  // namespace meshplan
