// `meshplan collective --cluster NAME --op OP --gpus N [--gpus-per-node G] --sizes LO:HI [--json]`:
// what the NCCL-style cost model predicts for one collective over a range of sizes, printed like
// nccl-tests output so it can be laid next to a measured run. Model: docs/collectives.md.
#include <fmt/format.h>

#include <cctype>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "cli/flag_ranges.hpp"
#include "cli/quantity.hpp"
#include "cli/run_inputs.hpp"
#include "spec/limits.hpp"
#include "cost/collective_cost.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/error.hpp"
#include "spec/nccl_table.hpp"

namespace meshplan::cli {
namespace {

constexpr std::string_view kOps =
    "all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, send_recv";


std::string size_label(double bytes) { return fmt::format("{:.0f}", bytes); }

struct CollectiveCliOptions {
  std::string cluster;
  std::string op = "all_reduce";
  int gpus = 0;
  int gpus_per_node = 0;
  std::string sizes = "1K:8G";
  std::vector<std::string> algos;
  std::vector<std::string> protos;
  bool collnet = false;
  bool explain = false;
  std::string nccl;  // --nccl-version (alias --nccl); empty: the profile's nccl_version
  std::string launch = "process-per-gpu";
  bool json = false;
};

void add_collective_options(CLI::App& app, CollectiveCliOptions& o) {
  app.add_option("--cluster", o.cluster, "hardware profile name or path (hardware_profiles/*.toml)")->required();
  app.add_option("--op", o.op, std::string("collective: ") + std::string(kOps))->capture_default_str();
  app.add_option("--gpus", o.gpus, "ranks in the group")->required()->check(in_range("collective", "--gpus"));
  app.add_option("--gpus-per-node", o.gpus_per_node,
                 "ranks on each node (default: all of a node's GPUs, or --gpus if fewer)")
      ->check(in_range("collective", "--gpus-per-node"));
  app.add_option("--sizes", o.sizes, "LO:HI, doubling from LO to HI (binary K/M/G suffixes)")
      ->capture_default_str();
  app.add_option("--algo", o.algos, "restrict algorithms, like NCCL_ALGO (ring, tree, nvls, nvlstree, pat, "
                                    "collnet_direct, collnet_chain)")->delimiter(',');
  app.add_option("--proto", o.protos, "restrict protocols, like NCCL_PROTO (LL, LL128, Simple)")->delimiter(',');
  app.add_flag("--collnet", o.collnet, "the fabric has IB SHARP / CollNet (enables the CollNet algorithms)");
  app.add_option("--launch", o.launch,
                 "who launches and times the calls: process-per-gpu (nccl-tests under mpirun, and training), "
                 "single-process (nccl-tests -g N: one thread launches every GPU of a node; the period is at least its "
                 "launches), torch (torch.distributed benchmarks such as all_reduce_bench.py, CUDA events around each "
                 "call: c10d's dispatch of the call is inside the timed span)")
      ->capture_default_str()
      ->check(CLI::IsMember({"process-per-gpu", "single-process", "torch"}));
  add_nccl_version_option(app, o.nccl, "--nccl-version,--nccl");
  app.add_flag("--explain", o.explain,
               "after each size, the tuner's choice as NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING prints it (algorithm, "
               "protocol, predicted time) and the terms of the time: latency, transfer, channels before and after "
               "small-message shrinking, pipeline ramp, host floor");
  app.add_flag("--json", o.json, "machine-readable output: {\"rows\": [...]} (docs/collectives.md)");
}

// --algo and --proto as NCCL_ALGO / NCCL_PROTO masks; a CollNet algorithm implies --collnet.
CollectiveOptions restrictions(const CollectiveCliOptions& o) {
  CollectiveOptions opts;
  if (!o.algos.empty()) {
    opts.algorithm_mask = 0;
    for (const auto& a : o.algos) {
      NcclAlgo algo{};
      if (!parse_nccl_algo(a, algo))
        throw InputError("", "--algo", "unknown algorithm '" + a +
                                           "' (known: ring, tree, nvls, nvlstree, pat, collnet_direct, collnet_chain)");
      opts.algorithm_mask |= algorithm_bit(algo);
      if (algo == NcclAlgo::collnet_direct || algo == NcclAlgo::collnet_chain) opts.collnet = true;
    }
  }
  if (!o.protos.empty()) {
    opts.protocol_mask = 0;
    for (const auto& p : o.protos) {
      NcclProto proto{};
      if (!parse_nccl_proto(p, proto))
        throw InputError("", "--proto", "unknown protocol '" + p + "' (known: LL, LL128, Simple)");
      opts.protocol_mask |= protocol_bit(proto);
    }
  }
  opts.collnet = opts.collnet || o.collnet;
  return opts;
}

// NCCL's own name of the collective, as its INFO lines print it (ncclFuncToString, enqueue.cc).
std::string_view nccl_func_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_reduce: return "AllReduce";
    case CollectiveOp::all_gather: return "AllGather";
    case CollectiveOp::reduce_scatter: return "ReduceScatter";
    case CollectiveOp::broadcast: return "Broadcast";
    case CollectiveOp::reduce: return "Reduce";
    case CollectiveOp::all_to_all:
    case CollectiveOp::send_recv: return "SendRecv";
  }
  return "?";
}

// --explain: the terms of one estimate. NCCL's tuner line (enqueue.cc topoGetAlgoInfo,
// "%s: %ld Bytes -> Algo %d proto %d time %f", algorithm and protocol as their enum indices)
// gives what NCCL predicts and selects on; the lines below it say how the reported time is built
// from it (docs/collectives.md): the same latency, the transfer on the channels the kernel really
// runs after shrinking, the pipeline ramp, and the host floor of a single-process launch.
nlohmann::json explain_terms(CollectiveOp op, double bytes, const CollectiveEstimate& e, std::string& text) {
  NcclAlgo algo{};
  NcclProto proto{};
  const bool tuned = parse_nccl_algo(e.algorithm, algo) && parse_nccl_proto(e.protocol, proto);
  const double latency_us = e.latency_seconds * 1e6;
  const double nccl_transfer_us = (e.nccl_seconds - e.latency_seconds) * 1e6;
  // bus_bandwidth_bytes_per_s is bus_bytes over the GPU transfer time (ramp included), host floor or not.
  const double transfer_us =
      e.bus_bandwidth_bytes_per_s > 0 ? e.bus_bytes / e.bus_bandwidth_bytes_per_s * 1e6 : 0.0;
  if (e.algorithm == "none") {
    text += "#   no algorithm: nothing to move, or every (algorithm, protocol) pair disabled\n";
    return nlohmann::json::object();
  }
  if (tuned)
    text += fmt::format("#   NCCL INFO {}: {:.0f} Bytes -> Algo {} proto {} time {:.6f}\n", nccl_func_name(op), bytes,
                        static_cast<int>(algo), static_cast<int>(proto), e.nccl_seconds * 1e6);
  else
    text += fmt::format("#   {}: {:.0f} Bytes -> {} (grouped point-to-point, not a tuner algorithm) time {:.6f}\n",
                        nccl_func_name(op), bytes, e.algorithm, e.nccl_seconds * 1e6);
  text += fmt::format("#     NCCL: {}/{} on {} channels = latency {:.2f} us + {:.0f} bus bytes in {:.2f} us\n",
                      e.algorithm, e.protocol, e.nccl_channels, latency_us, e.bus_bytes, nccl_transfer_us);
  text += fmt::format("#     run:  {} channels after shrinking; transfer {:.2f} us, of which pipeline ramp {:.2f} us; "
                      "GPU time {:.2f} us",
                      e.channels, transfer_us, e.ramp_seconds * 1e6, latency_us + transfer_us);
  if (e.host_floor_seconds > 0)
    text += fmt::format("; host floor {:.2f} us{}", e.host_floor_seconds * 1e6, e.host_bound ? " (binds)" : "");
  if (e.caller_seconds > 0) text += fmt::format("; + c10d's dispatch of the call {:.2f} us", e.caller_seconds * 1e6);
  text += "\n";
  return {{"nccl_algo", tuned ? static_cast<int>(algo) : -1},
          {"nccl_proto", tuned ? static_cast<int>(proto) : -1},
          {"nccl_time_us", e.nccl_seconds * 1e6},
          {"nccl_channels", e.nccl_channels},
          {"channels", e.channels},
          {"latency_us", latency_us},
          {"nccl_transfer_us", nccl_transfer_us},
          {"transfer_us", transfer_us},
          {"ramp_us", e.ramp_seconds * 1e6},
          {"host_floor_us", e.host_floor_seconds * 1e6},
          {"host_bound", e.host_bound},
          {"caller_us", e.caller_seconds * 1e6}};
}

// The group: --gpus ranks in whole nodes of --gpus-per-node.
GroupPlacement placement(const CollectiveCliOptions& o, CollectiveOp op, const ClusterSpec& cluster) {
  const int node_gpus = cluster.node.gpus_per_node;
  if (o.gpus < 1) throw InputError("", "--gpus", "must be at least 1");
  if (op == CollectiveOp::send_recv && o.gpus != 2)
    throw InputError("", "--gpus", "send_recv is between 2 ranks (got " + std::to_string(o.gpus) + ")");
  int per_node = o.gpus_per_node > 0 ? o.gpus_per_node : std::min(o.gpus, node_gpus);
  if (o.gpus_per_node < 0) throw InputError("", "--gpus-per-node", "must be at least 1");
  if (per_node > node_gpus)
    throw InputError("", "--gpus-per-node",
                     std::to_string(per_node) + " exceeds the " + std::to_string(node_gpus) + " GPUs of a " +
                         cluster.name + " node");
  if (o.gpus % per_node != 0)
    throw InputError("", "--gpus",
                     std::to_string(o.gpus) + " GPUs do not divide into nodes of " + std::to_string(per_node) +
                         " (--gpus-per-node)");
  return GroupPlacement{o.gpus, per_node};
}

int run_collective(const CollectiveCliOptions& o) {
  CollectiveOp op{};
  if (!parse_collective_op(o.op, op))
    throw InputError("", "--op", "unknown collective '" + o.op + "' (known: " + std::string(kOps) + ")");
  CollectiveOptions opts = restrictions(o);
  if (o.launch == "single-process") opts.launch_mode = LaunchMode::single_process_multi_gpu;
  if (o.launch == "torch") opts.launch_mode = LaunchMode::torch_timed_call;
  const std::vector<double> sizes = parse_size_range(o.sizes, "--sizes");
  check_nccl_version(o.nccl);
  ClusterSpec cluster = load_cluster(o.cluster);
  override_nccl_version(cluster, o.nccl);
  const NcclTable& table = cluster.nccl != nullptr ? *cluster.nccl : default_nccl_table();
  const GroupPlacement g = placement(o, op, cluster);

  nlohmann::json rows = nlohmann::json::array();
  std::string text = fmt::format(
      "# meshplan collective: {} on {}, {} GPUs ({} node{} x {}), NCCL {} cost model (predicted, not measured)\n"
      "#\n#{:>14} {:>13} {:>7} {:>11} {:>8} {:>8}  {:<14} {}\n#{:>14} {:>13} {:>7} {:>11} {:>8} {:>8}\n",
      to_string(op), cluster.name, o.gpus, g.n_nodes(), g.n_nodes() == 1 ? "" : "s", g.ranks_per_node, table.version,
      "size", "count", "type", "time", "algbw", "busbw", "algorithm", "protocol", "(B)", "(elements)", "", "(us)",
      "(GB/s)", "(GB/s)");
  for (double bytes : sizes) {
    const CollectiveEstimate e = estimate_collective(cluster, op, bytes, g, opts);
    const double time_us = e.seconds * 1e6;
    const double algbw = e.seconds > 0 ? bytes / e.seconds / 1e9 : 0.0;
    const double busbw = algbw * bus_bandwidth_factor(op, o.gpus);
    rows.push_back({{"op", std::string(to_string(op))},
                    {"gpus", o.gpus},
                    {"size_bytes", static_cast<std::int64_t>(bytes)},
                    {"time_us", time_us},
                    {"algbw_gbps", algbw},
                    {"busbw_gbps", busbw},
                    {"algorithm", e.algorithm},
                    {"protocol", e.protocol}});
    text += fmt::format(" {:>14} {:>13} {:>7} {:>11.2f} {:>8.2f} {:>8.2f}  {:<14} {}\n", size_label(bytes),
                        size_label(bytes / 4), "float", time_us, algbw, busbw, e.algorithm, e.protocol);
    if (o.explain) rows.back()["explain"] = explain_terms(op, bytes, e, text);
  }
  if (o.json) fmt::print("{}\n", nlohmann::json{{"rows", rows}}.dump(2));
  else fmt::print("{}", text);
  return 0;
}

}  // namespace

Command add_collective_command(CLI::App& root) {
  auto o = std::make_shared<CollectiveCliOptions>();
  Command c;
  c.app = root.add_subcommand(
      "collective",
      "Predicted time and bus bandwidth of one NCCL collective over a range of sizes, printed like "
      "nccl-tests output, with the algorithm and protocol the model picks. Model: docs/collectives.md.");
  add_collective_options(*c.app, *o);
  c.run = [o] { return run_collective(*o); };
  return c;
}

}  // namespace meshplan::cli
