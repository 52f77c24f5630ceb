// Text drawings of parallel layouts (layout_diagram.hpp).
#include "report/layout_diagram.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "spec/error.hpp"

namespace meshplan {

std::string layout_name(const Mesh& m) {
  std::vector<std::string> parts;
  if (m.pp > 1) parts.push_back("PP");
  if (m.dp_replicate > 1 && m.dp_shard > 1) parts.push_back("HSDP");
  else if (m.dp_shard > 1) parts.push_back("FSDP");
  else if (m.dp_replicate > 1) parts.push_back("DDP");
  if (m.tp > 1) parts.push_back("TP");
  if (parts.empty()) return "single GPU";
  std::string s;
  for (const auto& p : parts) {
    if (!s.empty()) s += "×";
    s += p;
  }
  return s;
}

LayoutDiagram make_layout(const Mesh& mesh, int layers, std::int64_t gpus) {
  const Mesh& m = mesh;
  for (const auto& [v, k] : {std::pair{m.pp, "--pp"}, {m.dp_replicate, "--dp-replicate"}, {m.dp_shard, "--dp-shard"},
                             {m.tp, "--tp"}, {m.cp, "--cp"}})
    if (v < 1) throw InputError("", k, fmt::format("must be at least 1, got {}", v));
  if (m.cp != 1) throw InputError("", "--cp", "context parallelism is not drawn");
  if (layers < 1) throw InputError("", "--layers", fmt::format("must be at least 1, got {}", layers));
  if (m.world() != gpus)
    throw InputError("", "--gpus", fmt::format("{} GPUs but pp {} x dp_replicate {} x dp_shard {} x tp {} = {}", gpus,
                                               m.pp, m.dp_replicate, m.dp_shard, m.tp, m.world()));
  if (layers % m.pp != 0)
    throw InputError("", "--layers", fmt::format("{} layers do not split evenly over {} pipeline stages", layers, m.pp));
  LayoutDiagram d;
  d.name = layout_name(m);
  d.mesh = m;
  d.layers = layers;
  const int per_stage = layers / m.pp;
  for (std::int64_t r = 0; r < gpus; ++r) {
    GpuShard g;
    g.gpu = r;
    g.coord = mesh_coord(m, r);
    g.stage = g.coord.pp;
    g.first_layer = g.stage * per_stage;
    g.n_layers = per_stage;
    g.tp_slice = g.coord.tp;
    g.fsdp_shard = g.coord.dp_shard;
    g.replica = g.coord.dp_replicate;
    g.fraction_at_rest = 1.0 / (m.tp * m.dp_shard);
    g.fraction_gathered = 1.0 / m.tp;
    d.gpus.push_back(g);
  }
  auto groups_of = [&](MeshGroup k) {
    std::set<std::vector<std::int64_t>> seen;
    for (std::int64_t r = 0; r < gpus; ++r) seen.insert(group_members(m, k, r));
    return std::vector<std::vector<std::int64_t>>(seen.begin(), seen.end());
  };
  if (m.tp > 1)
    d.talk.push_back({"TP", "activations inside every layer: all-reduce after the attention output and MLP down "
                            "projections (reduce-scatter + all-gather with sequence parallelism), forward and backward",
                      groups_of(MeshGroup::tp)});
  if (m.dp_shard > 1)
    d.talk.push_back({"FSDP", "parameters and gradients of every layer: all-gather the layer's shards before its forward "
                              "and again before its backward, reduce-scatter its gradients after the backward",
                      groups_of(MeshGroup::dp_shard)});
  if (m.dp_replicate > 1)
    d.talk.push_back({"replicate", m.dp_shard > 1 ? "gradients once per step: all-reduce of each gradient shard across "
                                                    "the replicas (HSDP)"
                                                  : "gradients once per step: all-reduce of the full gradients (DDP)",
                      groups_of(MeshGroup::dp_replicate)});
  if (m.pp > 1)
    d.talk.push_back({"PP", "activations forward and their gradients backward, point to point between neighbouring "
                            "stages, once per micro-batch",
                      groups_of(MeshGroup::pp)});
  return d;
}

namespace {
std::string fraction(int num, int den) { return den == 1 ? "all" : fmt::format("{}/{}", num, den); }
std::string ranks(const std::vector<std::int64_t>& g) {
  std::string s = "{";
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(g[i]);
  }
  return s + "}";
}
}  // namespace

std::string layout_text(const LayoutDiagram& d) {
  const Mesh& m = d.mesh;
  std::string out = fmt::format(
      "{}: {} GPUs = pp {} x dp_replicate {} x dp_shard {} x tp {}, {} layers (rank order: pp, dp_replicate, dp_shard, "
      "tp innermost)\n\n",
      d.name, d.gpus.size(), m.pp, m.dp_replicate, m.dp_shard, m.tp, d.layers);
  out += "GPU  pp  rep  shard  tp  holds at rest (of each of its layers' parameters)\n";
  for (const auto& g : d.gpus) {
    std::string what = g.n_layers == 1 ? fmt::format("layer {}", g.first_layer)
                                       : fmt::format("layers {}-{}", g.first_layer, g.first_layer + g.n_layers - 1);
    std::string piece;
    if (m.tp > 1) piece += fmt::format("TP slice {}/{}", g.tp_slice, m.tp);
    if (m.dp_shard > 1) piece += fmt::format("{}FSDP shard {}/{}", piece.empty() ? "" : ", ", g.fsdp_shard, m.dp_shard);
    if (piece.empty()) piece = "full copy";
    if (m.dp_replicate > 1) piece += fmt::format(" (replica {})", g.replica);
    out += fmt::format("{:>3}  {:>2}  {:>3}  {:>5}  {:>2}  {}: {} = {} of the parameters\n", g.gpu, g.coord.pp,
                       g.coord.dp_replicate, g.coord.dp_shard, g.coord.tp, what, piece, fraction(1, m.tp * m.dp_shard));
  }
  // One grid per layer: columns are TP slices, rows FSDP shards, one block per replica.
  for (int layer = 0; layer < d.layers; ++layer) {
    const int stage = layer / (d.layers / m.pp);
    out += fmt::format("\nlayer {}{}: ", layer, m.pp > 1 ? fmt::format(" (stage {})", stage) : "");
    out += m.tp > 1 ? fmt::format("weights split into {} TP slices", m.tp) : "weights whole (no TP)";
    if (m.dp_shard > 1)
      out += m.tp > 1 ? fmt::format(", each slice sharded {} ways by FSDP", m.dp_shard)
                      : fmt::format(", sharded {} ways by FSDP", m.dp_shard);
    out += m.dp_replicate > 1 ? fmt::format(", {} replicas", m.dp_replicate) : "";
    out += "\n";
    const int cw = 12;
    for (int rep = 0; rep < m.dp_replicate; ++rep) {
      std::string head = fmt::format("  {:<16}", m.dp_replicate > 1 ? fmt::format("replica {}", rep) : "");
      for (int t = 0; t < m.tp; ++t)
        head += fmt::format("{:<{}}", m.tp > 1 ? fmt::format("TP slice {}", t) : "whole layer", cw);
      while (!head.empty() && head.back() == ' ') head.pop_back();
      out += head + "\n";
      for (int s = 0; s < m.dp_shard; ++s) {
        std::string row = fmt::format("  {:<16}", m.dp_shard > 1 ? fmt::format("FSDP shard {}", s) : "unsharded");
        for (int t = 0; t < m.tp; ++t) {
          MeshCoord c;
          c.pp = stage;
          c.dp_replicate = rep;
          c.dp_shard = s;
          c.tp = t;
          row += fmt::format("{:<{}}", fmt::format("GPU {}", rank_of(m, c)), cw);
        }
        while (!row.empty() && row.back() == ' ') row.pop_back();
        out += row + "\n";
      }
    }
  }
  out += "\ngroups that talk\n";
  if (d.talk.empty()) out += "  none: one GPU holds and computes everything\n";
  for (const auto& t : d.talk) {
    std::string gs;
    for (const auto& g : t.groups) {
      if (!gs.empty()) gs += ' ';
      gs += ranks(g);
    }
    out += fmt::format("  {:<9} {}\n  {:<9} {}\n", t.kind, gs, "", t.traffic);
  }
  return out;
}

nlohmann::json layout_json(const LayoutDiagram& d) {
  nlohmann::json j;
  j["name"] = d.name;
  j["mesh"] = {{"pp", d.mesh.pp}, {"dp_replicate", d.mesh.dp_replicate}, {"dp_shard", d.mesh.dp_shard}, {"tp", d.mesh.tp}};
  j["layers"] = d.layers;
  j["gpus"] = nlohmann::json::array();
  for (const auto& g : d.gpus) {
    nlohmann::json layers = nlohmann::json::array();
    for (int l = g.first_layer; l < g.first_layer + g.n_layers; ++l) layers.push_back(l);
    j["gpus"].push_back({{"gpu", g.gpu},
                         {"stage", g.stage},
                         {"replica", g.replica},
                         {"fsdp_shard", g.fsdp_shard},
                         {"tp_slice", g.tp_slice},
                         {"layers", layers},
                         {"fraction_at_rest", g.fraction_at_rest},
                         {"fraction_gathered", g.fraction_gathered}});
  }
  j["groups"] = nlohmann::json::object();
  for (const auto& t : d.talk) j["groups"][t.kind] = t.groups;
  j["traffic"] = nlohmann::json::object();
  for (const auto& t : d.talk) j["traffic"][t.kind] = t.traffic;
  return j;
}

}  // namespace meshplan
