#pragma once
// meshplan layout: which GPU holds which shard of which layer, and which groups talk, for a mesh of
// pp x dp_replicate x dp_shard x tp ranks (rank order pp outermost, TP innermost: spec/placement.hpp).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "spec/placement.hpp"
#include "spec/plan.hpp"

namespace meshplan {

struct GpuShard {
  std::int64_t gpu = 0;
  MeshCoord coord;
  int stage = 0;           // pipeline stage = coord.pp
  int first_layer = 0;     // layers [first_layer, first_layer + n_layers) live on this stage
  int n_layers = 0;
  int tp_slice = 0;        // which 1/tp slice of each weight matrix (columns of QKV/up, rows of out/down)
  int fsdp_shard = 0;      // which 1/dp_shard piece of that slice it stores at rest
  int replica = 0;         // which HSDP/DDP replica (coord.dp_replicate)
  double fraction_at_rest = 1;    // of each of its layers' parameters: 1 / (tp * dp_shard)
  double fraction_gathered = 1;   // while computing a layer (after the FSDP all-gather): 1 / tp
};

struct TalkGroup {
  std::string kind;        // "TP", "FSDP", "replicate", "PP"
  std::string traffic;     // what the group sends and when
  std::vector<std::vector<std::int64_t>> groups;  // ranks of each group, ascending; groups ascending
};

struct LayoutDiagram {
  std::string name;        // "FSDP", "TP", "FSDP×TP", "HSDP", "HSDP×TP", "PP×FSDP", "DDP", ...
  Mesh mesh;
  int layers = 0;
  std::vector<GpuShard> gpus;       // by GPU
  std::vector<TalkGroup> talk;      // only kinds with more than one rank per group
};

// Throws InputError when gpus != pp * dp_replicate * dp_shard * tp, a degree < 1, or the layers do
// not split evenly over pp.
LayoutDiagram make_layout(const Mesh& mesh, int layers, std::int64_t gpus);

std::string layout_name(const Mesh& mesh);
std::string layout_text(const LayoutDiagram& d);
nlohmann::json layout_json(const LayoutDiagram& d);

}  // namespace meshplan
