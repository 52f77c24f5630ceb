#pragma once
// The exact GEMMs one transformer layer (plus the LM head) runs under tensor parallelism: what
// the calibration sweep times besides its square grid, so the fitted efficiency table is pinned
// at the shapes training actually uses.
#include <cstdint>
#include <string>
#include <vector>

#include "spec/model_spec.hpp"
#include "workload/kernel_shapes.hpp"

namespace meshplan::calibrate {

struct LabelledGemm {
  GemmShape shape;
  std::string label;  // "llama3.1-8b tp2 qkv fwd"
};

// Forward, input-gradient and weight-gradient GEMMs of the QKV, attention-output, MLP and
// LM-head projections for `tokens` tokens per micro-batch, with column-parallel layers split on
// their output and row-parallel ones on their input (Megatron layout). MoE MLPs use the expert
// width and tokens * top_k / n_experts tokens per expert. Dimensions that TP does not divide are
// skipped (that layout cannot run).
std::vector<LabelledGemm> layer_gemms(const ModelSpec& m, int tp, std::int64_t tokens);

// layer_gemms for each model, each TP in `tps`, de-duplicated by (m, n, k) keeping the first label.
std::vector<LabelledGemm> unique_layer_gemms(const std::vector<ModelSpec>& models, const std::vector<int>& tps,
                                             std::int64_t tokens);

}  // namespace meshplan::calibrate
