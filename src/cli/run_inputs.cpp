#include "cli/run_inputs.hpp"

#include <fmt/format.h>

#include <future>
#include <optional>

#include "cli/flag_ranges.hpp"
#include "spec/cluster_loader.hpp"
#include "import/config_loader.hpp"
#include "spec/error.hpp"
#include "spec/import_common.hpp"
#include "spec/limits.hpp"
#include "spec/model_loader.hpp"
#include "spec/nccl_table.hpp"
#include "spec/plan.hpp"
#include "spec/runtimes.hpp"
#include "workload/runtime_choices.hpp"

namespace meshplan::cli {

namespace {
bool mesh_is_explicit(const Mesh& m) {
  return m.pp > 0 && m.dp_replicate > 0 && m.dp_shard > 0 && m.cp > 0 && m.tp > 0;
}
}  // namespace

CLI::Validator runtime_name() {
  std::string listed, names;  // "torchtitan (torchtitan-fsdp2), ..." and "torchtitan|..." from the registry
  for (const std::string_view n : planner_runtime_names()) {
    const std::string_view full = runtime_info(*planner_runtime(n)).name;
    listed += fmt::format("{}{}{}", listed.empty() ? "" : ", ", n, full == n ? "" : fmt::format(" ({})", full));
    names += fmt::format("{}{}", names.empty() ? "" : "|", n);
  }
  return CLI::Validator(
      [listed](std::string& v) -> std::string {
        if (const std::optional<Runtime> r = planner_runtime(v)) v = std::string(runtime_info(*r).planner_name);
        else
          return fmt::format("'{}' is not a runtime plan searches: {}", v.size() <= 40 ? v : v.substr(0, 37) + "...",
                             listed);
        return {};
      },
      names);
}

Runtime searched_runtime(const std::string& name) {
  if (const std::optional<Runtime> r = planner_runtime(name)) return *r;
  throw InputError("", "--runtime", fmt::format("'{}' is not a runtime plan searches", name));
}

void add_run_input_options(CLI::App& app, RunInputOptions& o) {
  app.add_option("-c,--config", o.config,
                 "run config: llm-foundry/Composer YAML, torchtitan TOML, Megatron-LM arguments (args file or launch script), "
                 "meshplan plan TOML, or a launch script starting torchtitan/llm-foundry on a config (a bundle's "
                 "launch.sh; its GPU count from the launcher)")
      ->required();
  app.add_option("--model", o.model,
                 "model override: a shipped name (see `meshplan model --list`) or a HF config.json");
  app.add_option("--cluster", o.cluster,
                 fmt::format("hardware profile name or TOML path (default: the config's, else {})",
                             kDefaultCluster));
  app.add_option("--gpus", o.gpus, "total GPUs (default: the config's, where it states one: plan TOML gpus, degrees that multiply to it, llm-foundry n_gpus, a launch script's launcher; else one node, said on the first line)")
      ->check(in_range("", "--gpus"));
}

CLI::Option* add_nccl_version_option(CLI::App& app, std::string& value, const std::string& flags) {
  std::string avail;
  for (const std::string& v : available_nccl_versions()) avail += (avail.empty() ? "" : ", ") + v;
  return app.add_option(flags, value,
                        fmt::format("NCCL tuning constants: a version in hardware_profiles/nccl/ ({}) or a TOML path; "
                                    "overrides the profile's nccl_version (default {})",
                                    avail, kDefaultNcclVersion));
}

void check_nccl_version(const std::string& value) {
  if (!value.empty()) (void)shared_nccl_table(value, "", "--nccl-version");
}

RunInputs load_run_inputs(const RunInputOptions& o) {
  check_nccl_version(o.nccl_version);
  // The shipped NCCL table is a third of a simulation's start-up (parsing its TOML): read beside the
  // config and the profile, which every run reads first. Joined before returning, so an error in it
  // surfaces here, after any in the config or the profile.
  std::future<void> nccl_table;
  if (o.nccl_version.empty()) nccl_table = std::async(std::launch::async, [] { (void)default_nccl_table(); });
  RunInputs in;
  // The override goes to the importer, not over its result: a config naming a model meshplan
  // does not ship (an llm-foundry HF id, a torchtitan flavor) imports only with it.
  ImportOptions opts;
  if (!o.model.empty()) opts.model = load_model(o.model);
  in.run = load_run_config(o.config, opts);
  if (!o.model.empty()) in.run.warnings.push_back(fmt::format("model replaced by --model {}", o.model));
  const std::string cluster = !o.cluster.empty() ? o.cluster
                              : !in.run.cluster.empty() ? in.run.cluster
                                                        : std::string(kDefaultCluster);
  if (o.cluster.empty() && in.run.cluster.empty())
    in.run.assumptions.push_back(fmt::format("cluster: not stated; {} (meshplan's default; --cluster names another)",
                                             kDefaultCluster));
  try {
    in.cluster = load_cluster(cluster);
  } catch (const InputError& e) {
    // A profile named inside the config: the user needs the config and its key, not the
    // hardware_profiles/ path derived from the name.
    if (o.cluster.empty() && !in.run.cluster.empty())
      throw InputError(o.config, "cluster.profile", fmt::format("'{}': {}", in.run.cluster, e.reason()));
    throw;
  }
  override_nccl_version(in.cluster, o.nccl_version);
  std::optional<std::int64_t> gpus;
  if (o.gpus > 0) {
    gpus = o.gpus;
  } else if (in.run.n_gpus <= 0 && mesh_is_explicit(in.run.plan.mesh)) {
    gpus = in.run.plan.mesh.world();  // every degree given: the product is the GPU count
  } else if (in.run.n_gpus <= 0) {
    gpus = in.cluster.node.gpus_per_node;
    in.run.n_gpus_assumed = true;
    in.run.warnings.push_back(fmt::format(
        "no GPU count in {} or --gpus; assuming one node of {} GPUs", o.config, *gpus));
    in.run.assumptions.push_back(
        fmt::format("GPU count: not stated; {}, one node of {} (--gpus names another)", *gpus, in.cluster.name));
  }
  resolve_layout(in.run, gpus);
  // Knobs the config leaves to the runtime ('auto' micro-batch): settled as the runtime would.
  const RuntimeChoices choices = resolve_runtime_choices(in.run, in.cluster);
  for (const auto& a : choices.assumptions) {
    in.run.warnings.push_back(a);
    in.run.assumptions.push_back(a);
  }
  if (!choices.no_fit.empty())
    in.run.warnings.push_back(fmt::format("{}; modeled with the whole device batch", choices.no_fit));
  if (nccl_table.valid()) nccl_table.get();
  return in;
}

}  // namespace meshplan::cli
