#include "emit/emit_common.hpp"

#include <array>
#include <cmath>
#include <fmt/format.h>
#include <utility>

namespace meshplan {

namespace {
constexpr std::array<std::pair<EmitRuntime, std::string_view>, 3> kRuntimes{
    {{EmitRuntime::torchtitan, "torchtitan"},
     {EmitRuntime::llm_foundry, "llm-foundry"},
     {EmitRuntime::megatron, "megatron"}}};
}  // namespace

std::string_view to_string(EmitRuntime r) {
  for (const auto& [e, n] : kRuntimes)
    if (e == r) return n;
  return "torchtitan";
}

std::optional<EmitRuntime> emit_runtime_of(Framework f) {
  switch (f) {
    case Framework::torchtitan: return EmitRuntime::torchtitan;
    case Framework::llm_foundry: return EmitRuntime::llm_foundry;
    case Framework::megatron: return EmitRuntime::megatron;
    case Framework::none: break;
  }
  return std::nullopt;
}

std::optional<EmitRuntime> parse_emit_runtime(std::string_view s) {
  for (const auto& [e, n] : kRuntimes)
    if (n == s) return e;
  if (s == "llm_foundry" || s == "composer") return EmitRuntime::llm_foundry;
  if (s == "megatron-lm") return EmitRuntime::megatron;
  return std::nullopt;
}

std::string_view to_string(TorchtitanVersion v) {
  switch (v) {
    case TorchtitanVersion::mid_2025: return "8570415c3";
    case TorchtitanVersion::early_2026: return "238fa9953e4a";
    case TorchtitanVersion::registry: return "registry";
  }
  return "registry";
}

std::optional<TorchtitanVersion> parse_torchtitan_version(std::string_view s) {
  // A commit may be given abbreviated, as git does, but not below 7 digits (ambiguous).
  auto commit = [&](std::string_view full) { return s.size() >= 7 && full.substr(0, s.size()) == s; };
  if (s == "mid-2025" || commit("8570415c3")) return TorchtitanVersion::mid_2025;
  if (s == "early-2026" || commit("238fa9953e4a")) return TorchtitanVersion::early_2026;
  if (s == "registry" || commit("9810191bb") || commit("b5bcd76c")) return TorchtitanVersion::registry;
  return std::nullopt;
}

namespace emit {

void refuse(std::string_view runtime, std::string_view key, const std::string& reason) {
  throw InputError(std::string(runtime), std::string(key), reason);
}

void require_resolved(const RunConfig& rc, std::string_view runtime) {
  const Mesh& m = rc.plan.mesh;
  if (rc.n_gpus <= 0)
    refuse(runtime, "n_gpus", "the plan is not resolved (GPU count unknown); run resolve_layout first");
  for (const auto& [v, name] : {std::pair{m.pp, "pp"}, {m.vpp, "vpp"}, {m.dp_replicate, "dp_replicate"},
                                {m.dp_shard, "dp_shard"}, {m.cp, "cp"}, {m.tp, "tp"}, {m.ep, "ep"}})
    if (v <= 0) refuse(runtime, name, fmt::format("must be positive, got {} (unresolved plan)", v));
  if (m.world() != rc.n_gpus)
    refuse(runtime, "n_gpus", fmt::format("pp x dp_replicate x dp_shard x cp x tp = {}, but the plan has {} GPUs",
                                          m.world(), rc.n_gpus));
  const Job& j = rc.job;
  if (j.seq_len <= 0) refuse(runtime, "seq_len", fmt::format("must be positive, got {}", j.seq_len));
  if (j.global_batch <= 0 || j.micro_batch <= 0 || j.grad_accum <= 0)
    refuse(runtime, "global_batch",
           fmt::format("global {} / micro {} / accumulation {} must all be positive (unresolved plan)",
                       j.global_batch, j.micro_batch, j.grad_accum));
}

std::string number(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<long long>(v));
  return fmt::format("{}", v);  // fmt's default is the shortest round-trip representation
}

}  // namespace emit
}  // namespace meshplan
