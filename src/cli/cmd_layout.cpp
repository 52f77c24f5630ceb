// meshplan layout: which GPU holds which shard of which layer, and which groups talk.
#include <fmt/format.h>

#include <memory>

#include "cli/command.hpp"
#include "cli/flag_ranges.hpp"
#include "cli/run_inputs.hpp"
#include "report/layout_diagram.hpp"

namespace meshplan::cli {

Command add_layout_command(CLI::App& root) {
  struct Options {
    std::int64_t gpus = 0;
    int pp = 1, dp_replicate = 1, dp_shard = 1, tp = 1, layers = 2;
    bool json = false;
  };
  auto o = std::make_shared<Options>();
  Command c;
  c.app = root.add_subcommand(
      "layout",
      "Draw (as text) which GPU holds which shard of which layer and which process groups talk, for FSDP, TP, FSDP x TP, "
      "HSDP, HSDP x TP and PP meshes. Rank order: pp outermost, then dp_replicate, dp_shard, tp innermost.");
  c.app->add_option("--gpus", o->gpus, "total GPUs (= pp x dp_replicate x dp_shard x tp)")->required()->check(in_range("layout", "--gpus"));
  c.app->add_option("--pp", o->pp, "pipeline stages")->capture_default_str()->check(in_range("layout", "--pp"));
  c.app->add_option("--dp-replicate", o->dp_replicate, "replicas (DDP, or HSDP's replicate dim)")->capture_default_str()->check(in_range("layout", "--dp-replicate"));
  c.app->add_option("--dp-shard", o->dp_shard, "FSDP shard group size")->capture_default_str()->check(in_range("layout", "--dp-shard"));
  c.app->add_option("--tp", o->tp, "tensor-parallel degree")->capture_default_str()->check(in_range("layout", "--tp"));
  c.app->add_option("--layers", o->layers, "transformer layers to draw")->capture_default_str()->check(in_range("layout", "--layers"));
  c.app->add_flag("--json", o->json, "machine-readable output");
  c.run = [o] {
    Mesh m;
    m.pp = o->pp;
    m.dp_replicate = o->dp_replicate;
    m.dp_shard = o->dp_shard;
    m.tp = o->tp;
    const LayoutDiagram d = make_layout(m, o->layers, o->gpus);
    if (o->json) fmt::print("{}\n", layout_json(d).dump(2));
    else fmt::print("{}", layout_text(d));
    return 0;
  };
  return c;
}

}  // namespace meshplan::cli
