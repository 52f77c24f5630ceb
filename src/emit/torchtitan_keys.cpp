#include "emit/torchtitan_keys.hpp"

#include <algorithm>
#include <map>

namespace meshplan {

namespace {

// Keys present in both layouts, then each layout's own (job_config.py at 238fa9953e4a vs 8570415c3).
using Sections = std::map<std::string, std::vector<std::string>>;

const Sections kBoth = {
    {"job", {"config_file", "dump_folder", "description"}},
    {"profiling", {"enable_profiling", "save_traces_folder", "profile_freq", "enable_memory_snapshot",
                   "save_memory_snapshot_folder"}},
    {"metrics", {"log_freq", "enable_tensorboard", "save_tb_folder", "save_for_all_ranks", "enable_wandb",
                 "disable_color_printing"}},
    {"model", {"name", "flavor", "tokenizer_path", "converters", "print_after_conversion"}},
    {"optimizer", {"name", "lr", "beta1", "beta2", "eps", "weight_decay", "implementation",
                   "early_step_in_backward"}},
    {"lr_scheduler", {"warmup_steps", "decay_ratio", "decay_type"}},
    {"training", {"dataset", "dataset_path", "local_batch_size", "global_batch_size", "seq_len", "max_norm",
                  "steps", "enable_cpu_offload", "mixed_precision_param", "mixed_precision_reduce",
                  "gc_freq", "gc_debug"}},
    {"parallelism", {"data_parallel_replicate_degree", "data_parallel_shard_degree",
                     "fsdp_reshard_after_forward", "tensor_parallel_degree", "disable_loss_parallel",
                     "enable_async_tensor_parallel", "pipeline_parallel_degree",
                     "pipeline_parallel_layers_per_stage", "pipeline_parallel_schedule",
                     "pipeline_parallel_schedule_csv", "pipeline_parallel_microbatch_size",
                     "context_parallel_degree", "context_parallel_rotate_method", "expert_parallel_degree"}},
    {"checkpoint", {"folder", "interval", "initial_load_path", "initial_load_model_only", "export_dtype",
                    "async_mode", "keep_latest_k", "load_step", "exclude_from_loading", "create_seed_checkpoint"}},
    {"activation_checkpoint", {"mode", "selective_ac_option"}},
    {"comm", {"init_timeout_seconds", "train_timeout_seconds", "trace_buf_size", "save_traces_folder"}},
    {"memory_estimation", {"disable_fake_mode"}},
    {"validation", {"enable", "dataset", "dataset_path", "local_batch_size", "seq_len", "freq", "steps"}},
};

const Sections kEarly = {
    {"training", {"dtype"}},  // pure-bf16 training came after the mid-2025 layout
    {"job", {"print_config", "save_config_file", "custom_config_module"}},
    {"profiling", {"profiler_active", "profiler_warmup"}},
    {"model", {"hf_assets_path"}},
    {"lr_scheduler", {"total_steps", "min_lr_factor"}},
    {"training.dataloader", {"num_workers", "persistent_workers", "pin_memory", "prefetch_factor"}},
    {"parallelism", {"module_fqns_per_model_part", "pipeline_parallel_first_stage_less_layers",
                     "pipeline_parallel_last_stage_less_layers", "pipeline_parallel_expert_parallel_overlap",
                     "context_parallel_load_balancer", "expert_tensor_parallel_degree",
                     "expert_parallel_comm_backend"}},
    {"checkpoint", {"enable", "initial_load_in_hf", "last_save_model_only", "last_save_in_hf",
                    "enable_first_step_checkpoint", "load_only"}},
    {"activation_checkpoint", {"per_op_sac_force_recompute_mm_shapes_by_fqns", "early_stop", "memory_budget",
                               "visualize_memory_budget_pareto", "preserve_rng_state", "determinism_check",
                               "debug"}},
    {"compile", {"enable", "components", "backend"}},
    {"quantize.linear.float8", {"enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp",
                                "recipe_name", "filter_fqns", "emulate"}},
    {"comm", {"save_traces_file_prefix", "mode"}},
    {"memory_estimation", {"enable"}},
    {"debug", {"seed", "deterministic", "deterministic_warn_only", "moe_force_load_balance"}},
};

const Sections kMid = {
    {"training", {"compile", "seed", "deterministic"}},
    {"parallelism", {"pipeline_parallel_split_points", "enable_compiled_autograd"}},
    {"checkpoint", {"enable_checkpoint", "model_weights_only"}},
    {"float8", {"enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp",
                "force_recompute_fp8_weight_in_bwd", "recipe_name", "filter_fqns", "emulate"}},
    {"mx", {"mxfp8_dim1_cast_kernel_choice", "recipe_name", "filter_fqns"}},
    {"lr_scheduler", {"lr_min"}},
    {"memory_estimation", {"enabled"}},
};

std::vector<std::string> build(const Sections& extra) {
  std::vector<std::string> out;
  for (const Sections* s : {&kBoth, &extra})
    for (const auto& [section, keys] : *s)
      for (const auto& k : keys) out.push_back(section + "." + k);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

const std::vector<std::string>& torchtitan_keys(TorchtitanVersion v) {
  static const std::vector<std::string> early = build(kEarly);
  static const std::vector<std::string> mid = build(kMid);
  static const std::vector<std::string> none;
  switch (v) {
    case TorchtitanVersion::early_2026: return early;
    case TorchtitanVersion::mid_2025: return mid;
    case TorchtitanVersion::registry: return none;
  }
  return none;
}

bool torchtitan_key_known(TorchtitanVersion v, std::string_view dotted_key) {
  const auto& keys = torchtitan_keys(v);
  return std::binary_search(keys.begin(), keys.end(), dotted_key);
}

}  // namespace meshplan
