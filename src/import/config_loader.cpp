// Format detection and layout resolution for run configs (config_loader.hpp).
#include "import/config_loader.hpp"

#include "spec/pipeline_split.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fmt/format.h>
#include <regex>
#include <yaml-cpp/yaml.h>

#include "import/accepted_settings.hpp"
#include "spec/error.hpp"
#include "spec/import_common.hpp"
#include "import/import_composer.hpp"
#include "import/import_megatron.hpp"
#include "import/launch_script.hpp"
#include "import/import_torchtitan.hpp"
#include "spec/limits.hpp"
#include "spec/plan_toml.hpp"
#include "spec/runtimes.hpp"

namespace meshplan {

namespace {

const std::vector<std::string> kTorchtitanOnly = {
    "job", "training", "parallelism", "optimizer", "lr_scheduler", "checkpoint", "compile", "float8", "mx",
    "quantize", "metrics", "profiling", "comm", "validation", "experimental", "fault_tolerance",
    "memory_estimation", "debug"};
const std::vector<std::string> kPlanOnly = {"cluster", "layout", "sharding", "precision", "offload", "batch", "runtime"};

bool has_any(const toml::table& t, const std::vector<std::string>& names) {
  return std::any_of(names.begin(), names.end(), [&](const std::string& n) { return t.contains(n); });
}

RunConfig from_toml(const std::string& path, const toml::table& t, const ImportOptions& opts) {
  if (has_any(t, kPlanOnly)) return read_plan_toml(path, t, opts);
  if (has_any(t, kTorchtitanOnly)) return import_torchtitan(path, t, opts);
  if (const toml::table* m = t["model"].as_table()) {
    if (m->contains("flavor")) return import_torchtitan(path, t, opts);
    return read_plan_toml(path, t, opts);
  }
  throw InputError(path, "", "cannot tell the format: a TOML file needs torchtitan sections ([job], [training], "
                             "[parallelism]) or meshplan plan sections ([model], [layout], [batch], ...)");
}

RunConfig from_yaml(const std::string& path, const std::string& text, const ImportOptions& opts) {
  // import_llm_foundry reports syntax errors with their line; the marker check comes after.
  if (!looks_like_llm_foundry(text)) {
    try {
      (void)YAML::Load(text);
    } catch (const YAML::ParserException&) {
      return import_llm_foundry(path, text, opts);  // throws the located syntax error
    }
    throw InputError(path, "", "not an llm-foundry training YAML (no fsdp_config, global_train_batch_size or "
                               "model.name)");
  }
  return import_llm_foundry(path, text, opts);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// ---- config-specific key names, so errors point at what the user wrote.
struct Keys {
  std::string pp, vpp, dp_replicate, dp_shard, cp, tp, ep, global, micro, accum, seq, gpus;
  // The pipeline split rule (Plan::pipeline_split): plan TOML keys or Megatron flags.
  std::string split_embedding = "layout.account_for_embedding_in_pipeline_split";
  std::string split_loss = "layout.account_for_loss_in_pipeline_split";
  std::string split_first = "layout.decoder_first_pipeline_num_layers";
  std::string split_last = "layout.decoder_last_pipeline_num_layers";
  std::string split_layout = "layout.pipeline_layout";
  std::string a2a_overlap = "runtime.moe_a2a_overlap";
};
Keys keys_for(const RunConfig& rc) {
  switch (rc.format) {
    case ConfigFormat::megatron_args: {
      // Data parallel is what the GPUs leave after tp x pp x cp; its "key" is that rule.
      Keys k{"--pipeline-model-parallel-size", "--num-virtual-stages-per-pipeline-rank",
             "data-parallel size (GPUs / (tp x pp x cp))", "data-parallel size (GPUs / (tp x pp x cp))",
             "--context-parallel-size", "--tensor-model-parallel-size", "--expert-model-parallel-size",
             "--global-batch-size", "--micro-batch-size", "--global-batch-size", "--seq-length",
             "--nnodes x --nproc-per-node"};
      k.split_embedding = "--account-for-embedding-in-pipeline-split";
      k.split_loss = "--account-for-loss-in-pipeline-split";
      k.split_first = "--decoder-first-pipeline-num-layers";
      k.split_last = "--decoder-last-pipeline-num-layers";
      k.split_layout = "--pipeline-model-parallel-layout";
      k.a2a_overlap = "--overlap-moe-expert-parallel-comm";
      return k;
    }
    case ConfigFormat::torchtitan_toml: {
      const bool pp = rc.plan.mesh.pp > 1;
      return {"parallelism.pipeline_parallel_degree", "parallelism.pipeline_parallel_schedule",
              "parallelism.data_parallel_replicate_degree", "parallelism.data_parallel_shard_degree",
              "parallelism.context_parallel_degree", "parallelism.tensor_parallel_degree",
              "parallelism.expert_parallel_degree", "training.global_batch_size",
              pp ? "parallelism.pipeline_parallel_microbatch_size" : "training.local_batch_size",
              "training.global_batch_size", "training.seq_len", "n_gpus"};
    }
    case ConfigFormat::llm_foundry_yaml:
      return {"n_gpus", "n_gpus", "fsdp_config.data_parallel_replicate_degree",
              "fsdp_config.data_parallel_shard_degree", "n_gpus", "tp_config.tensor_parallel_degree", "n_gpus",
              "global_train_batch_size", "device_train_microbatch_size", "device_train_microbatch_size",
              "max_seq_len", "n_gpus"};
    case ConfigFormat::meshplan_plan:
      break;
  }
  return {"layout.pp", "layout.vpp", "layout.dp_replicate", "layout.dp_shard", "layout.cp", "layout.tp",
          "layout.ep", "batch.global_batch", "batch.micro_batch", "batch.grad_accum", "batch.seq_len",
          "cluster.gpus"};
}

// Throws the input error of the file being resolved, its reason on one line.
struct Fail {
  const std::string& file;
  [[noreturn]] void operator()(const std::string& key, const std::string& reason) const {
    throw InputError(file, key, importer::one_line(reason));
  }
};

// The GPU count: the file's, else the one requested; both given, they must agree.
std::int64_t resolve_gpu_count(const RunConfig& rc, const Keys& keys, std::optional<std::int64_t> n_gpus) {
  const std::string& file = rc.source_file;
  const Fail fail{rc.source_file};
  if (n_gpus && *n_gpus <= 0) fail(keys.gpus, fmt::format("the GPU count must be positive, got {}", *n_gpus));
  if (rc.n_gpus < 0) fail(keys.gpus, fmt::format("the GPU count must be positive, got {}", rc.n_gpus));
  if (rc.n_gpus > 0 && n_gpus && *n_gpus != rc.n_gpus)
    fail(keys.gpus, fmt::format("the file fixes {} GPUs but {} were requested", rc.n_gpus, *n_gpus));
  const std::int64_t n = rc.n_gpus > 0 ? rc.n_gpus : n_gpus.value_or(0);
  if (n <= 0) fail(keys.gpus, "the GPU count is not fixed by the file; pass it (--gpus N)");
  limits::check_count(file, keys.gpus, n, 1, limits::kMaxGpus, "GPUs");

  return n;
}

// The mesh degrees: at most one -1, which absorbs the rest of the world.
void resolve_degrees(RunConfig& rc, const Keys& keys, std::int64_t n) {
  const std::string& file = rc.source_file;
  Mesh& mesh = rc.plan.mesh;
  const Fail fail{rc.source_file};
  struct Deg {
    int* v;
    const std::string* key;
    const char* name;
  };
  const std::vector<Deg> degs = {{&mesh.pp, &keys.pp, "pp"},
                                 {&mesh.dp_replicate, &keys.dp_replicate, "dp_replicate"},
                                 {&mesh.dp_shard, &keys.dp_shard, "dp_shard"},
                                 {&mesh.cp, &keys.cp, "cp"},
                                 {&mesh.tp, &keys.tp, "tp"}};
  const Deg* wild = nullptr;
  std::int64_t known = 1;
  for (const auto& d : degs) {
    if (*d.v == -1) {
      if (wild != nullptr) fail(*d.key, fmt::format("only one mesh degree may be -1 ({} is already)", *wild->key));
      wild = &d;
    } else if (*d.v <= 0) {
      fail(*d.key, fmt::format("must be positive, got {}", *d.v));
    } else {
      limits::check_count(file, *d.key, *d.v, 1, limits::kMaxGpus, "a mesh degree (the GPU maximum)");
      known *= *d.v;  // each factor <= 2^20 and known <= 2^20 before it: no overflow
      if (known > limits::kMaxGpus)
        fail(*d.key, fmt::format("the mesh degrees multiply to {}, above the maximum {} GPUs (docs/limits.md)", known,
                                 limits::kMaxGpus));
    }
  }
  limits::check_count(file, keys.vpp, mesh.vpp, 1, limits::kMaxLayers, "virtual stages (the layer maximum)");
  limits::check_count(file, keys.ep, mesh.ep, 1, limits::kMaxGpus, "a mesh degree (the GPU maximum)");
  if (mesh.vpp <= 0) fail(keys.vpp, fmt::format("virtual stages must be positive, got {}", mesh.vpp));
  if (mesh.ep <= 0) fail(keys.ep, fmt::format("must be positive, got {}", mesh.ep));
  auto product = [&] {
    return fmt::format("pp {} x dp_replicate {} x dp_shard {} x cp {} x tp {}", mesh.pp, mesh.dp_replicate,
                       mesh.dp_shard, mesh.cp, mesh.tp);
  };
  if (wild != nullptr) {
    if (n % known != 0)
      fail(*wild->key, fmt::format("-1 cannot absorb the rest: {} GPUs are not divisible by the product {} "
                                   "of the other degrees", n, known));
    *wild->v = static_cast<int>(n / known);
  }
  if (mesh.world() != n)
    fail(mesh.tp > 1 && wild == nullptr && mesh.dp_shard == 1 ? keys.tp : keys.dp_shard,
         fmt::format("{} = {} GPUs, but the run has {}", product(), mesh.world(), n));
  if (mesh.vpp > 1 && mesh.pp == 1) fail(keys.vpp, "virtual pipeline stages need pipeline parallelism (pp > 1)");
}

// A plan TOML for Megatron that gives pp (and vpp) but no split rule for layers they do not divide:
// the rule Megatron needs to run it (megatron_split_for, as validate infers it for a published
// run), said in the assumptions. Megatron's own arguments give the rule or Megatron raises.
void infer_megatron_split(RunConfig& rc) {
  Plan& plan = rc.plan;
  const int chunks = plan.mesh.pp * plan.mesh.vpp;
  if (rc.format != ConfigFormat::meshplan_plan || !runtime_traits(plan).pipeline_split_by_flags ||
      plan.pipeline_split.given() || chunks <= 1 || rc.model.n_layers % chunks == 0)
    return;
  std::string how;
  const auto split = megatron_split_for(rc.model.n_layers, plan.mesh.pp, plan.mesh.vpp, rc.model.n_mtp_layers, &how);
  if (!split) return;  // check_model_vs_degrees names why nothing places them
  plan.pipeline_split = *split;
  note_default(rc, "layout.pipeline_layout",
               fmt::format("{} layers on pp {} x vpp {}: {}", rc.model.n_layers, plan.mesh.pp, plan.mesh.vpp, how),
               "meshplan's inference of the split Megatron needs, spec/pipeline_split.hpp megatron_split_for");
}

// The model's shape against the degrees: heads, MLP width, layers and experts must divide.
void check_model_vs_degrees(RunConfig& rc, const Keys& keys) {
  Plan& plan = rc.plan;
  const Mesh& mesh = plan.mesh;
  const Fail fail{rc.source_file};
  const ModelSpec& m = rc.model;
  if (mesh.tp > 1) {
    if (plan.tp_style == TpStyle::mlp_only) {
      if (m.moe.enabled()) fail(keys.tp, "FFN-only tensor parallelism does not support MoE experts");
      if (m.ffn_hidden % mesh.tp != 0)
        fail(keys.tp, fmt::format("the MLP width {} of {} is not divisible by tp {}", m.ffn_hidden, m.name, mesh.tp));
    } else {
      if (m.n_heads % mesh.tp != 0)
        fail(keys.tp, fmt::format("{} attention heads of {} are not divisible by tp {}", m.n_heads, m.name, mesh.tp));
      if (m.n_kv_heads % mesh.tp != 0)
        fail(keys.tp, fmt::format("{} kv heads of {} are not divisible by tp {}", m.n_kv_heads, m.name, mesh.tp));
      const std::int64_t ffn = m.moe.enabled() ? m.moe.expert_ffn : m.ffn_hidden;
      if (ffn % mesh.tp != 0)
        fail(keys.tp, fmt::format("the MLP width {} of {} is not divisible by tp {}", ffn, m.name, mesh.tp));
    }
  }
  if (static_cast<std::int64_t>(mesh.pp) * mesh.vpp > limits::kMaxLayers)
    fail(keys.vpp, fmt::format("pp x vpp = {} x {} chunks is above the maximum {} (docs/limits.md)", mesh.pp, mesh.vpp,
                               limits::kMaxLayers));
  if (SplitError why; !split_pipeline(m.n_layers, mesh.pp, mesh.vpp, plan.pipeline_split, &why)) {
    const std::string key = why.field == "pp"                   ? keys.pp
                            : why.field == "vpp"                ? keys.vpp
                            : why.field == "embedding_as_layer" ? keys.split_embedding
                            : why.field == "loss_as_layer"      ? keys.split_loss
                            : why.field == "first_stage_layers" ? keys.split_first
                            : why.field == "layout"             ? keys.split_layout
                                                                : keys.split_last;
    fail(key, fmt::format("{} ({}, {} layers)", why.reason, m.name, m.n_layers));
  }
  if (!plan.pipeline_split.chunk_layers.empty() && plan.pipeline_split.mtp_layers != m.n_mtp_layers)
    fail(keys.split_layout, fmt::format("the layout places {} MTP layers (m), but {} has {}",
                                        plan.pipeline_split.mtp_layers, m.name, m.n_mtp_layers));
  if (mesh.etp < 0 || mesh.etp > mesh.tp || (mesh.etp > 0 && mesh.tp % mesh.etp != 0))
    fail(keys.ep, fmt::format("expert tensor parallel {} must divide tp {}", mesh.etp, mesh.tp));
  if (mesh.ep > 1) {
    // Megatron's expert mesh: ep x etp divides tp x dp x cp; with etp = tp EP borrows data x
    // context ranks only.
    const std::int64_t etp = mesh.expert_tp();
    const std::int64_t ep_pool = static_cast<std::int64_t>(mesh.dp()) * mesh.cp * (mesh.tp / etp);
    if (ep_pool % mesh.ep != 0)
      fail(keys.ep, etp == mesh.tp
                        ? fmt::format("expert parallel {} does not divide the data x context parallel ranks {}", mesh.ep, ep_pool)
                        : fmt::format("expert parallel {} does not divide the data x context x tp/etp ranks {}", mesh.ep,
                                      ep_pool));
    if (m.moe.enabled() && m.moe.n_experts % mesh.ep != 0)
      fail(keys.ep, fmt::format("{} experts are not divisible by ep {}", m.moe.n_experts, mesh.ep));
  }
  // Megatron-Core's own checks on its expert all-to-all overlap (arguments.py).
  if (plan.moe_a2a_overlap)
    if (const std::string why = expert_a2a_overlap_refusal(plan, m.moe.enabled()); !why.empty())
      fail(keys.a2a_overlap, why);
}

// The sequence length: context parallel splits it into 2*cp load-balanced chunks, and sequence
// parallel splits each chunk over tp (torchtitan requires seq % (2*cp*tp) == 0).
void check_seq_len(RunConfig& rc, const Keys& keys) {
  const std::string& file = rc.source_file;
  const Plan& plan = rc.plan;
  const Mesh& mesh = plan.mesh;
  const Job& job = rc.job;
  const ModelSpec& m = rc.model;
  const Fail fail{rc.source_file};
  if (job.seq_len <= 0) fail(keys.seq, fmt::format("must be positive, got {}", job.seq_len));
  limits::check_count(file, keys.seq, job.seq_len, 1, limits::kMaxSeqLen, "the sequence length");
  if (m.max_seq_len > 0 && job.seq_len > m.max_seq_len)
    rc.warnings.push_back(fmt::format("{}: {} tokens is beyond the {} positions {} was trained for", keys.seq,
                                      job.seq_len, m.max_seq_len, m.name));
  const bool sp = plan.sequence_parallel || runtime_traits(plan).sequence_parallel_with_tp;
  const std::int64_t seq_div = (mesh.cp > 1 ? 2 * mesh.cp : 1) * (sp ? mesh.tp : 1);
  if (job.seq_len % seq_div != 0)
    fail(keys.seq, fmt::format("{} is not divisible by {} ({}{})", job.seq_len, seq_div,
                               mesh.cp > 1 ? fmt::format("2 x cp {}", mesh.cp) : "",
                               sp && mesh.tp > 1 ? fmt::format("{}tp {}", mesh.cp > 1 ? " x " : "", mesh.tp) : ""));
}

// Runtime rules that need the resolved mesh.
void apply_runtime_rules(RunConfig& rc, std::int64_t n) {
  Plan& plan = rc.plan;
  const Mesh& mesh = plan.mesh;
  if (runtime_traits(plan).single_gpu_drops_sharding && n == 1 && plan.sharding != Sharding::none) {
    // llm-foundry drops fsdp_config and tp_config on one GPU and falls back to DDP.
    plan.sharding = Sharding::none;
    plan.reshard_after_forward = false;
    plan.root_unsharded = false;
    rc.warnings.push_back("fsdp_config: dropped by llm-foundry on a single GPU (DDP fallback)");
  }
  const bool one_rank_shards = static_cast<std::int64_t>(mesh.dp_shard) * mesh.cp == 1;
  if (runtime_traits(plan).unsharded_without_shard_dim && one_rank_shards) {
    // No FSDP dimension: replicate() (DDP) when dp_replicate > 1, else a plain single replica.
    plan.sharding = Sharding::none;
    plan.reshard_after_forward = false;
  } else if ((plan.sharding == Sharding::zero2 || plan.sharding == Sharding::zero3) && one_rank_shards &&
             mesh.dp_replicate > 1) {
    // FSDP shards over dp_shard (x cp); a shard group of one rank beside replicas would gather and
    // reduce-scatter nothing and never synchronize the replicas' gradients. The data-parallel
    // ranks are the shard group, as FULL_SHARD / SHARD_GRAD_OP and Megatron-FSDP run them.
    plan.mesh.dp_shard = mesh.dp_replicate;
    plan.mesh.dp_replicate = 1;
    rc.assumptions.push_back(fmt::format("sharding {0} over dp_shard 1 beside {1} replicas: sharded over the {1} "
                                         "data-parallel ranks instead (dp_shard {1}, dp_replicate 1)",
                                         to_string(plan.sharding), plan.mesh.dp_shard));
  }
}

// llm-foundry calculate_batch_size_info: device batch = global / world (TP ranks each take their
// own share), accumulation = ceil(device batch / micro).
void resolve_composer_batch(RunConfig& rc, const Keys& keys, std::int64_t n) {
  Job& job = rc.job;
  const Fail fail{rc.source_file};
  if (job.global_batch <= 0) fail(keys.global, "required");
  if (job.global_batch % n != 0)
    fail(keys.global, fmt::format("{} is not divisible by the world size {}", job.global_batch, n));
  const std::int64_t device = job.global_batch / n;
  if (job.micro_batch == 0) job.micro_batch = device;
  if (job.micro_batch > device) {
    rc.warnings.push_back(fmt::format("{}: {} exceeds the device batch {} (global {} / {} GPUs); micro-batches "
                                      "hold {}", keys.micro, job.micro_batch, device, job.global_batch, n, device));
    job.micro_batch = device;
  }
  const std::int64_t accum = (device + job.micro_batch - 1) / job.micro_batch;
  if (job.grad_accum > 0 && job.grad_accum != accum)
    fail(keys.accum, fmt::format("{} disagrees with ceil(device batch {} / micro {}) = {}", job.grad_accum,
                                 device, job.micro_batch, accum));
  job.grad_accum = accum;
}

// The batch of data-parallel runtimes: global = dp x micro x accumulation, the missing one derived.
void resolve_dp_batch(RunConfig& rc, const Keys& keys) {
  Job& job = rc.job;
  const Mesh& mesh = rc.plan.mesh;
  const Fail fail{rc.source_file};
  const std::int64_t dp = mesh.dp();
  if (job.micro_batch == 0) {
    if (job.global_batch <= 0) fail(keys.micro, "'auto' needs a global batch");
    if (job.global_batch % dp != 0)
      fail(keys.global, fmt::format("{} is not divisible by the data-parallel size {}", job.global_batch, dp));
    job.micro_batch = job.global_batch / dp;
  }
  const std::int64_t per_run = std::max<std::int64_t>(1, job.pp_microbatches);
  if (job.global_batch == 0) {
    if (job.grad_accum <= 0) fail(keys.global, "required (or a gradient accumulation count)");
    if (job.grad_accum % per_run != 0)
      fail(keys.accum, fmt::format("{} micro-batches are not a multiple of the {} per pipeline run",
                                   job.grad_accum, per_run));
    const auto g = limits::mul3(dp, job.micro_batch, job.grad_accum);
    if (!g || *g > limits::kMaxBatch)
      fail(keys.accum, fmt::format("data-parallel {} x micro-batch {} x {} micro-batches is above the maximum {} "
                                   "sequences per step (docs/limits.md)", dp, job.micro_batch, job.grad_accum,
                                   limits::kMaxBatch));
    job.global_batch = *g;
  } else {
    const std::int64_t unit = limits::mul3(dp, job.micro_batch, per_run).value_or(INT64_MAX);
    if (job.global_batch % unit != 0)
      fail(keys.global,
           per_run > 1
               ? fmt::format("{} is not divisible by data-parallel {} x local batch {} ({} x {} pipeline microbatches)",
                             job.global_batch, dp, job.micro_batch * per_run, job.micro_batch, per_run)
               : fmt::format("{} is not divisible by data-parallel {} x micro-batch {}", job.global_batch, dp,
                             job.micro_batch));
    const std::int64_t accum = job.global_batch / (dp * job.micro_batch);
    if (job.grad_accum > 0 && job.grad_accum != accum)
      fail(keys.accum, fmt::format("{} disagrees with global {} / (data-parallel {} x micro-batch {}) = {}",
                                   job.grad_accum, job.global_batch, dp, job.micro_batch, accum));
    job.grad_accum = accum;
  }
}

// The batch: each value bounded, the missing ones derived by the runtime's rule, the step bounded.
void resolve_batch(RunConfig& rc, const Keys& keys, std::int64_t n) {
  const std::string& file = rc.source_file;
  Job& job = rc.job;
  const ModelSpec& m = rc.model;
  const Fail fail{rc.source_file};
  if (job.micro_batch < 0) fail(keys.micro, fmt::format("must be positive, got {}", job.micro_batch));
  if (job.global_batch < 0) fail(keys.global, fmt::format("must be positive, got {}", job.global_batch));
  if (job.grad_accum < 0) fail(keys.accum, fmt::format("must be positive, got {}", job.grad_accum));
  // Bounded before any product below, so none of them can overflow.
  limits::check_count(file, keys.micro, job.micro_batch, 0, limits::kMaxBatch, "sequences per step");
  limits::check_count(file, keys.global, job.global_batch, 0, limits::kMaxBatch, "sequences per step");
  limits::check_count(file, keys.accum, job.grad_accum, 0, limits::kMaxGradAccum, "micro-batches per step");
  limits::check_count(file, keys.accum, job.pp_microbatches, 0, limits::kMaxGradAccum, "micro-batches per step");
  if (runtime_traits(rc.plan).device_batch_over_world)
    resolve_composer_batch(rc, keys, n);
  else
    resolve_dp_batch(rc, keys);
  limits::check_count(file, keys.accum, job.grad_accum, 1, limits::kMaxGradAccum, "micro-batches per step");
  const auto tokens = limits::mul(job.global_batch, job.seq_len);
  if (!tokens || *tokens > limits::kMaxTokensPerStep)
    fail(keys.global, fmt::format("{} sequences x {} tokens is above the maximum {} tokens per step (docs/limits.md)",
                                  job.global_batch, job.seq_len, limits::kMaxTokensPerStep));
  // The simulated step holds a few dozen ops per layer and micro-batch: bound it before it is built.
  if (static_cast<std::int64_t>(m.n_layers) * job.grad_accum > limits::kMaxLayerMicrobatches)
    fail(keys.accum, fmt::format("{} layers x {} micro-batches per step is above the maximum {} the simulator "
                                 "steps through (docs/limits.md); use a larger micro-batch or more data parallelism",
                                 m.n_layers, job.grad_accum, limits::kMaxLayerMicrobatches));
}

}  // namespace

RunConfig load_run_config(const std::string& path, const ImportOptions& opts) {
  const std::string text = importer::read_text(path);
  const std::string ext = lower(std::filesystem::path(path).extension().string());
  if (ext == ".yaml" || ext == ".yml") return from_yaml(path, text, opts);
  if (ext == ".toml") return from_toml(path, importer::parse_toml(path, text), opts);
  // A launch script that starts torchtitan or llm-foundry on a config file (the launch.sh meshplan
  // writes): that config is the run, and the launcher's words give its GPU count.
  if (!looks_like_megatron_args(text))
    if (const auto launched = launched_config(path, text)) {
      const std::string ext_of_config = lower(std::filesystem::path(launched->config).extension().string());
      if (ext_of_config != ".toml" && ext_of_config != ".yaml" && ext_of_config != ".yml")
        throw InputError(path, "--job.config_file",
                         fmt::format("'{}' is not a TOML or YAML config", launched->config));
      RunConfig rc = load_run_config(launched->config, opts);
      if (launched->n_gpus > 0) {
        if (rc.n_gpus > 0 && rc.n_gpus != launched->n_gpus)
          throw InputError(path, launched->gpus_from,
                           fmt::format("the script starts {} GPUs but {} fixes {}", launched->n_gpus, launched->config,
                                       rc.n_gpus));
        rc.n_gpus = launched->n_gpus;
      }
      rc.warnings.insert(rc.warnings.begin(),
                         fmt::format("{}: read the config it starts, {}{}", path, launched->config,
                                     launched->n_gpus > 0 ? fmt::format(", on {} GPUs ({})", launched->n_gpus, launched->gpus_from)
                                                          : std::string()));
      return rc;
    }
  // Megatron-LM arguments (an args file or a launch script): --flag words, never TOML or YAML.
  if (looks_like_megatron_args(text)) return import_megatron_args(path, text, opts);
  if (ext == ".sh" || ext == ".args")
    throw InputError(path, "", "not a Megatron-LM arguments file (no --num-layers, --tensor-model-parallel-size, "
                               "--pipeline-model-parallel-size or pretrain_gpt.py)");
  // Unknown extension: whichever parser accepts it; a failure is reported in the syntax the
  // text resembles (a [section] header line means TOML).
  try {
    const toml::table t = toml::parse(text, path);
    return from_toml(path, t, opts);
  } catch (const toml::parse_error&) {
  }
  try {
    const YAML::Node n = YAML::Load(text);
    if (n.IsMap()) return from_yaml(path, text, opts);
  } catch (const YAML::Exception&) {
  }
  static const std::regex section(R"(^\s*\[[A-Za-z0-9_.\-]+\]\s*(#.*)?$)", std::regex::multiline);
  if (std::regex_search(text, section)) (void)importer::parse_toml(path, text);  // throws the TOML error
  return from_yaml(path, text, opts);
}

RunConfig load_run_config(const std::string& path) { return load_run_config(path, ImportOptions{}); }

void resolve_layout(RunConfig& rc, std::optional<std::int64_t> n_gpus) {
  const Keys keys = keys_for(rc);
  const std::int64_t n = resolve_gpu_count(rc, keys, n_gpus);
  resolve_degrees(rc, keys, n);
  infer_megatron_split(rc);
  check_model_vs_degrees(rc, keys);
  check_seq_len(rc, keys);
  apply_runtime_rules(rc, n);
  resolve_batch(rc, keys, n);
  rc.n_gpus = n;
}

}  // namespace meshplan
