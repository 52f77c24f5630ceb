#pragma once
// The header line of the validation CSV schema (../shared/validation/README.md "Columns"), for
// tests that build rows of their own.
namespace meshplan::test {

inline constexpr const char* kValidationCsvHeader =
    "id,source,model,n_params,n_layers,d_model,n_heads,n_kv_heads,ffn_hidden,vocab,seq_len,mlp,tied_embeddings,"
    "pos_emb,gpu,n_gpus,gpus_per_node,dp_replicate,dp_shard,tp,pp,vpp,cp,ep,sequence_parallel,sharding,micro_batch,"
    "global_batch,grad_accum,activation_ckpt,ac_option,param_dtype,reduce_dtype,fp8,cpu_offload,framework,compile,"
    "async_tp,measured_tokens_per_s_per_gpu,tokens_derived_from,measured_tflops_per_gpu,measured_mfu_pct,"
    "measured_peak_mem_gib,notes\n";

}  // namespace meshplan::test
