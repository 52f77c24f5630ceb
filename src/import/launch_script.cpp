// Launch scripts that name a config file (launch_script.hpp).
#include "import/launch_script.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <map>
#include <regex>
#include <vector>

#include "import/shell_words.hpp"
#include "spec/error.hpp"
#include "spec/limits.hpp"

namespace meshplan {

namespace {

namespace fs = std::filesystem;

bool ends_with_any(const std::string& s, std::initializer_list<const char*> suffixes) {
  return std::any_of(suffixes.begin(), suffixes.end(), [&](const char* x) { return s.ends_with(x); });
}

// Variables the script sets to its own folder (BUNDLE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")"
// && pwd)", SCRIPT_DIR=$(dirname "$0")): their value is known without running it.
std::vector<std::string> script_dir_variables(const std::string& text) {
  static const std::regex assign(
      R"re((?:^|\n)\s*(?:export\s+|readonly\s+|local\s+)?([A-Za-z_][A-Za-z0-9_]*)="?\$\((?:cd\s+)?"?\$\(dirname\s+"?\$\{?(?:BASH_SOURCE(?:\[0\])?|0)\}?"?\)"?)re");
  std::vector<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), assign); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1].str());
  return out;
}

// The word's text with $NAME / ${NAME} of the script-folder variables replaced by `dir`.
ShellWord with_script_dir(ShellWord w, const std::vector<std::string>& names, const std::string& dir) {
  for (const std::string& n : names) {
    for (const std::string& ref : {"${" + n + "}", "$" + n}) {
      for (auto at = w.text.find(ref); at != std::string::npos; at = w.text.find(ref, at + dir.size()))
        w.text.replace(at, ref.size(), dir);
    }
    w.unresolved.erase(std::remove(w.unresolved.begin(), w.unresolved.end(), n), w.unresolved.end());
  }
  return w;
}

// The value of launcher flag `names` among words [0, end): "--x=v" or "--x v".
struct Flag {
  std::string name, value;
  bool unresolved = false;
};
std::optional<Flag> flag_value(const std::vector<ShellWord>& words, std::size_t end,
                               std::initializer_list<const char*> names) {
  std::optional<Flag> out;
  for (std::size_t i = 0; i < end; ++i) {
    for (const char* n : names) {
      const std::string name = n;
      if (words[i].text == name && i + 1 < end)
        out = Flag{name, words[i + 1].text, !words[i + 1].unresolved.empty()};
      else if (words[i].text.starts_with(name + "="))
        out = Flag{name, words[i].text.substr(name.size() + 1), !words[i].unresolved.empty()};
    }
  }
  return out;
}

std::int64_t count_of(const std::string& path, const Flag& f) {
  std::int64_t v = 0;
  const auto [p, ec] = std::from_chars(f.value.data(), f.value.data() + f.value.size(), v);
  if (f.unresolved || ec != std::errc() || p != f.value.data() + f.value.size())
    throw InputError(path, f.name,
                     fmt::format("'{}' is not a GPU count meshplan can read without running the script; write the "
                                 "number, or pass --gpus",
                                 f.value));
  return limits::check_count(path, f.name, v, 1, limits::kMaxGpus, "GPUs");
}

}  // namespace

std::optional<LaunchedConfig> launched_config(const std::string& path, const std::string& text) {
  std::map<std::string, std::string> vars;
  const auto commands = shell_commands(text, &vars);
  const std::string dir = fs::path(path).parent_path().empty() ? std::string(".") : fs::path(path).parent_path().string();
  const std::vector<std::string> dir_vars = script_dir_variables(text);
  for (const auto& words : commands) {
    // torchtitan: --job.config_file FILE; llm-foundry: train/train.py FILE.yaml.
    std::optional<ShellWord> config;
    std::size_t program = words.size();  // the first word after the launcher
    for (std::size_t i = 0; i < words.size() && !config; ++i) {
      const std::string& w = words[i].text;
      if (w == "--job.config_file" && i + 1 < words.size()) config = words[i + 1];
      else if (w.starts_with("--job.config_file=")) config = ShellWord{w.substr(18), words[i].unresolved};
      else if (w.ends_with("train.py") && i + 1 < words.size() && ends_with_any(words[i + 1].text, {".yaml", ".yml"})) {
        config = words[i + 1];
        program = i;
      }
      if (config && program == words.size()) {
        // -m torchtitan.train / a script word: what comes before is the launcher.
        program = i;
        for (std::size_t k = 0; k < i; ++k)
          if (words[k].text == "-m" || words[k].text.ends_with(".py")) {
            program = k;
            break;
          }
      }
    }
    if (!config) continue;
    const ShellWord file = with_script_dir(*config, dir_vars, dir);
    if (!file.unresolved.empty())
      throw InputError(path, "--job.config_file",
                       fmt::format("the config path '{}' uses ${} that the script does not set; pass the config "
                                   "itself with --config",
                                   file.text, file.unresolved.front()));
    LaunchedConfig out;
    // A relative path is the script's folder's first (where meshplan's bundles keep it), else the
    // current folder's (the checkout a script like run_train.sh is run from).
    fs::path p = file.text;
    if (p.is_relative() && fs::exists(fs::path(dir) / p)) p = fs::path(dir) / p;
    out.config = p.string();
    // GPUs: torchrun --nnodes x --nproc_per_node, Composer's --world_size, or a single-node
    // launcher limited by CUDA_VISIBLE_DEVICES; a launcher that takes every GPU of the node says
    // nothing more than the default.
    const auto world = flag_value(words, program, {"--world_size", "--world-size"});
    const auto per_node = flag_value(words, program, {"--nproc_per_node", "--nproc-per-node"});
    const auto nodes = flag_value(words, program, {"--nnodes"});
    if (world) {
      out.n_gpus = count_of(path, *world);
      out.gpus_from = fmt::format("{} {}", world->name, out.n_gpus);
    } else if (per_node && per_node->value != "gpu" && per_node->value != "auto") {
      const std::int64_t n = nodes ? count_of(path, *nodes) : 1;
      out.n_gpus = n * count_of(path, *per_node);
      if (out.n_gpus > limits::kMaxGpus)
        throw InputError(path, "--nnodes", fmt::format("{} GPUs is above the maximum {} (docs/limits.md)", out.n_gpus,
                                                       limits::kMaxGpus));
      out.gpus_from = nodes ? fmt::format("{} {} x {} {}", nodes->name, n, per_node->name, per_node->value)
                            : fmt::format("{} {}", per_node->name, per_node->value);
    } else if (const auto cvd = vars.find("CUDA_VISIBLE_DEVICES"); cvd != vars.end() && !cvd->second.empty()) {
      out.n_gpus = 1 + std::count(cvd->second.begin(), cvd->second.end(), ',');
      out.gpus_from = fmt::format("CUDA_VISIBLE_DEVICES={}", cvd->second);
    }
    return out;
  }
  return std::nullopt;
}

}  // namespace meshplan
