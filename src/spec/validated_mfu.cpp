#include "spec/validated_mfu.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include "spec/data_root.hpp"
#include "spec/error.hpp"
#include "spec/import_common.hpp"
#include "spec/input_file.hpp"
#include "spec/plan.hpp"

namespace meshplan {

using importer::parse_toml;
using importer::TomlView;

std::vector<ValidatedMfu> load_validated_mfu(const std::string& path) {
  const toml::table root = parse_toml(path, read_input_file(path, InputKind::validated_mfu));
  const TomlView top(path, root);
  top.require_known({"max_seq_len", "group"}, "the validated MFU envelope (tests/regen_envelope.sh writes it)");
  if (top.get_int("max_seq_len").value_or(0) != kValidatedMaxSeqLen)
    top.fail("max_seq_len", fmt::format("must be {} (spec/validated_mfu.hpp)", kValidatedMaxSeqLen));
  std::vector<ValidatedMfu> out;
  const toml::array* groups = root["group"].as_array();
  if (groups == nullptr) top.fail("group", "an array of tables [[group]] is required");
  for (std::size_t i = 0; i < groups->size(); ++i) {
    const toml::table* t = (*groups)[i].as_table();
    const std::string key = fmt::format("group[{}]", i);
    if (t == nullptr) top.fail(key, "must be a table");
    const TomlView g(path, *t, key);
    g.require_known({"runtime", "gpu_arch", "moe", "fp8", "mfu", "run", "runs"}, "a validated MFU group");
    ValidatedMfu v;
    auto need = [&](auto value, std::string_view k) {
      if (!value) g.fail(k, "required");
      return *value;
    };
    v.runtime = need(g.get_string("runtime"), "runtime");
    v.gpu_arch = need(g.get_string("gpu_arch"), "gpu_arch");
    v.moe = need(g.get_bool("moe"), "moe");
    v.fp8 = need(g.get_string("fp8"), "fp8");
    v.mfu = need(g.get_number("mfu"), "mfu");
    if (!(v.mfu > 0 && v.mfu <= 1)) g.fail("mfu", fmt::format("must be in (0, 1], got {}", v.mfu));
    v.run = need(g.get_string("run"), "run");
    v.runs = static_cast<int>(need(g.get_int("runs"), "runs"));
    if (v.runs < 1) g.fail("runs", "must be at least 1");
    out.push_back(std::move(v));
  }
  return out;
}

const std::vector<ValidatedMfu>& validated_mfu_table() {
  static const std::vector<ValidatedMfu> table = load_validated_mfu((data_root() / "plans" / "validated_mfu.toml").string());
  return table;
}

std::optional<ValidatedMfu> validated_mfu(std::string_view runtime_name, std::string_view gpu_arch, bool moe,
                                          std::string_view fp8, std::int64_t seq_len) {
  if (seq_len > kValidatedMaxSeqLen) return std::nullopt;
  for (const ValidatedMfu& v : validated_mfu_table())
    if (v.runtime.compare(runtime_name) == 0 && v.gpu_arch == gpu_arch && v.moe == moe && v.fp8 == fp8) return v;
  return std::nullopt;
}

std::optional<ValidatedMfu> validated_mfu_of(const Plan& p, std::string_view gpu_arch, bool moe, std::int64_t seq_len) {
  return validated_mfu(to_string(p.runtime), gpu_arch, moe, to_string(p.fp8), seq_len);
}

std::string beyond_validated_note(double mfu, const ValidatedMfu& v) {
  if (!(mfu > v.mfu)) return "";
  return fmt::format("MFU {:.1f}% is above every published {} run on {} that meshplan was validated on ({} "
                     "models{}, sequences up to {} tokens: {} run{}, at most {:.1f}%, {}); the figure is outside "
                     "what the model was validated on (docs/validation.md, \"Validated MFU envelope\")",
                     100 * mfu, v.runtime, v.gpu_arch, v.moe ? "MoE" : "dense",
                     v.fp8 == "none" ? "" : ", " + v.fp8, kValidatedMaxSeqLen, v.runs, v.runs == 1 ? "" : "s",
                     100 * v.mfu, v.run);
}

}  // namespace meshplan
