// `meshplan topology --cluster NAME --gpus N [--mesh pp=..,dp_shard=..,tp=..] [--json]`: the network
// the simulator and planner assume for a cluster of N GPUs, and which tier each process group of a
// mesh crosses. docs/topology.md.
#include <fmt/format.h>

#include <charconv>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "cli/command.hpp"
#include "cli/flag_ranges.hpp"
#include "cli/run_inputs.hpp"
#include "spec/limits.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/error.hpp"
#include "spec/placement.hpp"
#include "spec/topology.hpp"
#include "spec/topology_graph.hpp"

namespace meshplan::cli {
namespace {

using nlohmann::json;

int parse_degree(std::string_view key, std::string_view text) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if ((ec != std::errc() && ec != std::errc::result_out_of_range) || end != text.data() + text.size())
    throw InputError("", "--mesh", fmt::format("{}: not an integer: \"{}\"", key, text));
  if (ec == std::errc() && v < 1) throw InputError("", "--mesh", fmt::format("{}: must be at least 1, got {}", key, v));
  if (ec != std::errc() || v > limits::kMaxGpus)
    throw InputError("", "--mesh", fmt::format("{}: {} is above the maximum {} (docs/limits.md)", key, text,
                                               limits::kMaxGpus));
  return static_cast<int>(v);
}

// "pp=2,dp_shard=64,tp=8": unset degrees stay 1.
Mesh parse_mesh(const std::string& spec) {
  Mesh m;
  std::string_view rest = spec;
  if (rest.empty()) throw InputError("", "--mesh", "empty; expected e.g. pp=2,dp_shard=64,tp=8");
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos)
      throw InputError("", "--mesh", fmt::format("\"{}\" is not KEY=VALUE", item));
    const std::string_view key = item.substr(0, eq);
    const int v = parse_degree(key, item.substr(eq + 1));
    if (key == "pp") m.pp = v;
    else if (key == "vpp") m.vpp = v;
    else if (key == "dp_replicate") m.dp_replicate = v;
    else if (key == "dp_shard") m.dp_shard = v;
    else if (key == "cp") m.cp = v;
    else if (key == "tp") m.tp = v;
    else if (key == "ep") m.ep = v;
    else
      throw InputError("", "--mesh",
                       fmt::format("unknown key \"{}\"; known: pp, vpp, dp_replicate, dp_shard, cp, tp, ep", key));
  }
  return m;
}

std::string gbs(double bytes_per_s) { return fmt::format("{:.1f} GB/s", bytes_per_s / 1e9); }

std::string mesh_text(const Mesh& m) {
  return fmt::format("pp={},dp_replicate={},dp_shard={},cp={},tp={},ep={}", m.pp, m.dp_replicate, m.dp_shard, m.cp,
                     m.tp, m.ep);
}

std::string path_text(const Topology& t, const Route& r) {
  std::string s;
  for (const auto v : r.path) s += (s.empty() ? "" : " > ") + t.graph->adjacency[v].name;
  return s;
}

json counts_json(const Topology& t) {
  return json{{"cluster", t.cluster_name},
              {"gpus", t.n_gpus},
              {"gpus_per_node", t.gpus_per_node},
              {"nodes", t.n_nodes},
              {"scaleup_kind", t.scaleup_kind},
              {"nvlink_domain_gpus", t.domain_gpus},
              {"nvlink_domains", t.n_domains},
              {"nics_per_node", t.nics_per_node},
              {"nics", t.n_nics},
              {"rail_optimized", t.rail_optimized},
              {"nodes_per_leaf_group", t.nodes_per_leaf_group},
              {"leaf_groups", t.n_leaf_groups},
              {"leaves_per_group", t.leaves_per_group},
              {"leaf_switches", t.n_leaves},
              {"leaf_down_ports", t.leaf_down_ports},
              {"leaf_up_ports", t.leaf_up_ports},
              {"spine_switches", t.n_spines},
              {"spine_vertices", t.n_spine_vertices},
              {"leaf_oversubscription", t.leaf_oversubscription},
              {"spine_oversubscription", t.spine_oversubscription},
              {"graph_vertices", boost::num_vertices(t.graph->adjacency)},
              {"graph_edges", boost::num_edges(t.graph->adjacency)}};
}

json route_json(const Topology& t, const Route& r) {
  json path = json::array();
  for (const auto v : r.path) path.push_back(t.graph->adjacency[v].name);
  return json{{"bottleneck_bytes_per_s", r.bottleneck_bytes_per_s},
              {"latency_seconds", r.latency_seconds},
              {"switch_hops", r.switch_hops},
              {"path", path}};
}

json topology_json(const Topology& t, const Mesh* mesh) {
  json j = counts_json(t);
  json tiers = json::object();
  for (const Tier tier : kNetworkTiers) {
    const TierBandwidth b = tier_bandwidth(t, tier);
    json e{{"per_gpu_bytes_per_s", b.per_gpu_bytes_per_s},
           {"per_node_bytes_per_s", b.per_node_bytes_per_s},
           {"bisection_bytes_per_s", b.bisection_bytes_per_s}};
    const Route& r = t.route(tier);
    e["route"] = r.present ? route_json(t, r) : json(nullptr);
    tiers[std::string(to_string(tier))] = e;
  }
  j["tiers"] = tiers;
  if (mesh != nullptr) {
    j["mesh"] = json{{"pp", mesh->pp}, {"vpp", mesh->vpp}, {"dp_replicate", mesh->dp_replicate},
                     {"dp_shard", mesh->dp_shard}, {"cp", mesh->cp}, {"tp", mesh->tp}, {"ep", mesh->ep}};
    json groups = json::object();
    for (const MeshGroup k : kAllMeshGroups) {
      const GroupRoute g = route_group(t, *mesh, k);
      groups[std::string(to_string(k))] = json{{"n_ranks", g.n_ranks},
                                               {"ranks_per_node", g.ranks_per_node},
                                               {"n_nodes", g.n_nodes},
                                               {"tier", std::string(to_string(g.tier))},
                                               {"bottleneck_bytes_per_s", g.bottleneck_bytes_per_s},
                                               {"path_latency_seconds", g.path_latency_seconds},
                                               {"switch_hops", g.switch_hops},
                                               {"all_groups_alike", g.all_groups_alike}};
    }
    j["groups"] = groups;
  }
  return j;
}

void print_text(const Topology& t, const Mesh* mesh) {
  fmt::print("{}: {} GPUs\n", t.cluster_name, t.n_gpus);
  auto row = [](std::string_view k, const std::string& v) { fmt::print("  {:<16}{}\n", k, v); };
  row("nodes", fmt::format("{} x {} GPUs", t.n_nodes, t.gpus_per_node));
  row("nvlink domains", fmt::format("{} x {} GPUs ({}, {} per GPU)", t.n_domains, t.domain_gpus, t.scaleup_kind,
                                    gbs(t.nvlink_bytes_per_s)));
  row("nics", fmt::format("{} ({} per node, {} each, {} GPU(s) per NIC)", t.n_nics, t.nics_per_node,
                          gbs(t.nic_bytes_per_s), t.gpus_per_nic));
  if (t.has_fabric) {
    row("leaf switches",
        fmt::format("{} ({} leaf group(s) of {} nodes x {} leaves, {}; {} down / {} up ports, 1:{:g})", t.n_leaves,
                    t.n_leaf_groups, t.nodes_per_leaf_group, t.leaves_per_group,
                    t.rail_optimized ? "rail-optimized" : "one leaf per group", t.leaf_down_ports, t.leaf_up_ports,
                    t.leaf_oversubscription));
    row("spine switches", t.n_spines == 0 ? std::string("0 (one leaf)")
                                          : fmt::format("{} ({} graph vertices, spine oversubscription 1:{:g})",
                                                        t.n_spines, t.n_spine_vertices, t.spine_oversubscription));
  } else {
    row("fabric", "none beyond the NVLink domain (fabric.kind = nvl_domain)");
  }
  row("graph", fmt::format("{} vertices, {} edges", boost::num_vertices(t.graph->adjacency), boost::num_edges(t.graph->adjacency)));

  fmt::print("\nbandwidth per direction (line rate)\n  {:<8}{:>14}{:>14}{:>16}   route (latency, switch hops, per-rank bottleneck)\n",
             "tier", "per GPU", "per node", "bisection");
  for (const Tier tier : kNetworkTiers) {
    const TierBandwidth b = tier_bandwidth(t, tier);
    const Route& r = t.route(tier);
    const std::string route =
        r.present ? fmt::format("{} ({:.2f} us, {}, {})", path_text(t, r), r.latency_seconds * 1e6, r.switch_hops,
                                gbs(r.bottleneck_bytes_per_s))
                  : std::string("-");
    fmt::print("  {:<8}{:>14}{:>14}{:>16}   {}\n", to_string(tier), gbs(b.per_gpu_bytes_per_s),
               gbs(b.per_node_bytes_per_s), gbs(b.bisection_bytes_per_s), route);
  }
  if (mesh == nullptr) return;
  fmt::print("\ngroups of mesh {}\n  {:<14}{:>7}{:>10}{:>7}  {:<8}{:>18}{:>12}{:>6}\n", mesh_text(*mesh), "group", "ranks",
             "per node", "nodes", "tier", "bottleneck/rank", "latency", "hops");
  for (const MeshGroup k : kAllMeshGroups) {
    const GroupRoute g = route_group(t, *mesh, k);
    fmt::print("  {:<14}{:>7}{:>10}{:>7}  {:<8}{:>18}{:>9.2f} us{:>6}{}\n", to_string(k), g.n_ranks, g.ranks_per_node,
               g.n_nodes, to_string(g.tier), g.tier == Tier::none ? std::string("-") : gbs(g.bottleneck_bytes_per_s),
               g.path_latency_seconds * 1e6, g.switch_hops,
               g.all_groups_alike ? "" : "  (worst group; others cross less)");
  }
}

struct Options {
  std::string cluster = "h100-sxm-80gb";
  std::int64_t gpus = 0;
  std::string mesh;
  bool as_json = false;
};

}  // namespace

Command add_topology_command(CLI::App& root) {
  auto o = std::make_shared<Options>();
  Command c;
  c.app = root.add_subcommand("topology", "Show the network graph of a cluster and the tier each process group crosses");
  c.app->description(
      "Build the topology graph of --gpus GPUs of a hardware profile (GPUs, NVSwitches, NICs, leaf and spine "
      "switches) and print its size and the bandwidth of each tier. With --mesh, place the ranks (pp outermost, "
      "tp innermost) and show, for each process group, the tier its traffic crosses. docs/topology.md.");
  c.app->add_option("--cluster", o->cluster, "hardware profile name or .toml path")->capture_default_str();
  CLI::Option* gpus_opt = c.app->add_option("--gpus", o->gpus, "number of GPUs (default: the mesh's world size)")
                              ->check(in_range("topology", "--gpus"));
  c.app->add_option("--mesh", o->mesh, "degrees, e.g. pp=2,dp_shard=64,tp=8 (keys: pp vpp dp_replicate dp_shard cp tp ep)");
  c.app->add_flag("--json", o->as_json, "print JSON instead of text");
  c.run = [o, gpus_opt]() -> int {
    std::optional<Mesh> mesh;
    if (!o->mesh.empty()) mesh = parse_mesh(o->mesh);
    const bool gpus_given = gpus_opt->count() > 0;
    if (!gpus_given && !mesh) throw InputError("", "--gpus", "required (or give --mesh)");
    const std::int64_t gpus = gpus_given ? o->gpus : mesh->world();
    if (gpus < 1) throw InputError("", "--gpus", "must be at least 1, got " + std::to_string(gpus));
    if (gpus > limits::kMaxGpus)
      throw InputError("", gpus_given ? "--gpus" : "--mesh",
                       fmt::format("{} GPUs is above the maximum {} (docs/limits.md)", gpus, limits::kMaxGpus));
    const ClusterSpec cluster = load_cluster(o->cluster);
    for (const auto& w : cluster.warnings) fmt::print(stderr, "meshplan: warning: {}\n", w);
    const Topology t = build_topology(cluster, gpus);
    if (mesh) check_mesh(t, *mesh);
    if (o->as_json) fmt::print("{}\n", topology_json(t, mesh ? &*mesh : nullptr).dump(2));
    else print_text(t, mesh ? &*mesh : nullptr);
    return 0;
  };
  return c;
}

}  // namespace meshplan::cli
