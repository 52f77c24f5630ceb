#include "spec/plan.hpp"

#include <algorithm>
#include <array>
#include <utility>

#include "spec/name_table.hpp"

namespace meshplan {

namespace {
constexpr NameTable<Sharding, 4> kSharding{{{Sharding::none, "none"}, {Sharding::zero1, "zero1"},
                                            {Sharding::zero2, "zero2"}, {Sharding::zero3, "zero3"}}};
constexpr NameTable<BackwardPrefetch, 3> kPrefetch{{{BackwardPrefetch::none, "none"},
                                                    {BackwardPrefetch::backward_pre, "BACKWARD_PRE"},
                                                    {BackwardPrefetch::backward_post, "BACKWARD_POST"}}};
constexpr NameTable<AcMode, 5> kAc{{{AcMode::none, "none"}, {AcMode::full, "full"},
                                    {AcMode::selective_layer, "selective-layer"},
                                    {AcMode::selective_op, "selective-op"},
                                    {AcMode::selective_attn, "selective-attn"}}};
constexpr NameTable<TpStyle, 2> kTp{{{TpStyle::full, "full"}, {TpStyle::mlp_only, "mlp-only"}}};
constexpr NameTable<PipelineSchedule, 3> kSched{{{PipelineSchedule::gpipe, "gpipe"},
                                                 {PipelineSchedule::one_f_one_b, "1f1b"},
                                                 {PipelineSchedule::interleaved_1f1b, "interleaved-1f1b"}}};
constexpr NameTable<Fp8Recipe, 8> kFp8{{{Fp8Recipe::none, "none"}, {Fp8Recipe::te_delayed, "te-delayed"},
                                        {Fp8Recipe::te_current, "te-current"}, {Fp8Recipe::mxfp8, "mxfp8"},
                                        {Fp8Recipe::nvfp4, "nvfp4"},
                                        {Fp8Recipe::torchao_tensorwise, "torchao-tensorwise"},
                                        {Fp8Recipe::torchao_rowwise, "torchao-rowwise"},
                                        {Fp8Recipe::te_blockwise, "te-blockwise"}}};
constexpr NameTable<Optimizer, 3> kOpt{{{Optimizer::adamw, "adamw"}, {Optimizer::adamw8bit, "adamw8bit"},
                                        {Optimizer::sgd, "sgd"}}};
// torchtitan's spelling (optimizer.implementation).
constexpr NameTable<OptimizerImpl, 4> kOptImpl{{{OptimizerImpl::framework, "framework"},
                                                {OptimizerImpl::foreach, "foreach"},
                                                {OptimizerImpl::fused, "fused"},
                                                {OptimizerImpl::for_loop, "for-loop"}}};
constexpr NameTable<MoeDispatcher, 3> kDispatcher{{{MoeDispatcher::alltoall, "alltoall"},
                                                   {MoeDispatcher::deepep, "deepep"},
                                                   {MoeDispatcher::hybridep, "hybridep"}}};
}  // namespace

std::string_view to_string(Sharding s) { return name_of(kSharding, s); }
std::string_view to_string(BackwardPrefetch b) { return name_of(kPrefetch, b); }
std::string_view to_string(AcMode a) { return name_of(kAc, a); }
std::string_view to_string(TpStyle t) { return name_of(kTp, t); }
std::string_view to_string(PipelineSchedule p) { return name_of(kSched, p); }
std::string_view to_string(Fp8Recipe f) { return name_of(kFp8, f); }
std::string_view to_string(Optimizer o) { return name_of(kOpt, o); }
std::string_view to_string(OptimizerImpl o) { return name_of(kOptImpl, o); }
std::string_view to_string(MoeDispatcher d) { return name_of(kDispatcher, d); }

std::optional<Sharding> parse_sharding(std::string_view s) { return parse_name(kSharding, s); }
std::optional<BackwardPrefetch> parse_backward_prefetch(std::string_view s) {
  return parse_name(kPrefetch, s);
}
std::optional<AcMode> parse_ac_mode(std::string_view s) { return parse_name(kAc, s); }
std::optional<PipelineSchedule> parse_schedule(std::string_view s) { return parse_name(kSched, s); }
std::optional<Fp8Recipe> parse_fp8(std::string_view s) { return parse_name(kFp8, s); }
std::optional<Optimizer> parse_optimizer(std::string_view s) { return parse_name(kOpt, s); }
std::optional<OptimizerImpl> parse_optimizer_impl(std::string_view s) { return parse_name(kOptImpl, s); }
std::optional<MoeDispatcher> parse_moe_dispatcher(std::string_view s) { return parse_name(kDispatcher, s); }

namespace {
// Megatron-Core's --cuda-graph-scope choices that meshplan's layers have (transformer_config.py);
// full_iteration captures the whole step, as full does for the host.
constexpr std::array<std::pair<bool Plan::CudaGraphScope::*, std::string_view>, 5> kGraphModules{
    {{&Plan::CudaGraphScope::attn, "attn"},
     {&Plan::CudaGraphScope::mlp, "mlp"},
     {&Plan::CudaGraphScope::moe, "moe"},
     {&Plan::CudaGraphScope::moe_router, "moe_router"},
     {&Plan::CudaGraphScope::moe_preprocess, "moe_preprocess"}}};
}  // namespace

std::vector<std::string> cuda_graph_scope_names(const Plan::CudaGraphScope& s) {
  if (s.full) return {"full"};
  std::vector<std::string> out;
  for (const auto& [field, name] : kGraphModules)
    if (s.*field) out.emplace_back(name);
  return out;
}

std::string cuda_graph_scope_choices() {
  std::string out = "full, full_iteration";
  for (const auto& m : kGraphModules) out += ", " + std::string(m.second);
  return out;
}

std::optional<Plan::CudaGraphScope> parse_cuda_graph_scope(const std::vector<std::string>& names, std::string* bad) {
  Plan::CudaGraphScope s;
  if (names.empty()) return s;
  s.full = false;
  for (const std::string& n : names) {
    if (n == "full" || n == "full_iteration") {
      s.full = true;
      continue;
    }
    const auto it = std::find_if(kGraphModules.begin(), kGraphModules.end(), [&](const auto& m) { return m.second == n; });
    if (it == kGraphModules.end()) {
      if (bad != nullptr) *bad = n;
      return std::nullopt;
    }
    s.*(it->first) = true;
  }
  if (s.full) return Plan::CudaGraphScope{};
  return s;
}

}  // namespace meshplan
