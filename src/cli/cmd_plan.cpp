// meshplan plan: the best layouts for a model on N GPUs, ranked by simulated tokens/s.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cmath>
#include <memory>
#include <unistd.h>

#include "cli/command.hpp"
#include "cli/terminal_progress.hpp"
#include "cli/flag_ranges.hpp"
#include "cli/layout_json.hpp"
#include "cli/quantity.hpp"
#include "cli/run_inputs.hpp"
#include "emit/bundle.hpp"
#include "emit/emit_common.hpp"
#include "plan/capacity.hpp"
#include "plan/goodput.hpp"
#include "plan/planner.hpp"
#include "report/memory_report.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/error.hpp"
#include "spec/limits.hpp"
#include "spec/model_loader.hpp"
#include "spec/runtimes.hpp"
#include "spec/validated_mfu.hpp"

namespace meshplan::cli {

namespace {

std::string mixed_precision_label(const Plan& p) {
  return p.mixed_precision_name.empty() ? fmt::format("param {} / reduce {}", to_string(p.param_dtype), to_string(p.reduce_dtype))
                                        : p.mixed_precision_name;
}

// The searched settings of each plan, with the names the plan rows use.
nlohmann::json settings_json(const std::vector<Plan>& plans) {
  nlohmann::json out = nlohmann::json::array();
  for (const Plan& p : plans)
    out.push_back({{"sharding", std::string(to_string(p.sharding))},
                   {"activation_ckpt", std::string(to_string(p.ac))},
                   {"mixed_precision", mixed_precision_label(p)},
                   {"activation_offload", p.act_offload},
                   {"backward_prefetch", std::string(to_string(p.backward_prefetch))}});
  return out;
}

struct Options {
  std::string model, cluster = kDefaultCluster, tokens, out;
  std::string nccl_version;  // --nccl-version; empty: the profile's
  std::string runtime{runtime_info(kDefaultSearchedRuntime).planner_name};
  std::string torchtitan_version = "238fa9953e4a";
  std::int64_t gpus = 0, global_batch = 0, seq = 8192;
  int top = 10;
  int budget = 20;
  int verify = 1;
  int threads = 2;
  double headroom_pct = 5;
  bool json = false;
};

// The launchable bundle for the fastest plan the target runtime version can express.
void write_winner_bundle(const Options& o, const PlanRequest& rq, const PlanSearch& s) {
  const auto version = parse_torchtitan_version(o.torchtitan_version);
  if (!version)
    throw InputError("", "--torchtitan-version", fmt::format("unknown version '{}'", o.torchtitan_version));
  const EmitRuntime er = *emit_runtime_of(runtime_info(searched_runtime(o.runtime)).framework);
  // The bundle is for the fastest plan the target runtime version can express (e.g. an
  // uneven pipeline split is refused by some emitters); say so when it is not the winner.
  std::string refusals;
  bool written = false;
  for (std::size_t i = 0; i < s.ranked.size() && !written; ++i) {
    const PlanCandidate& best = s.ranked[i];
    RunConfig rc;
    rc.source_file = "meshplan plan";
    rc.model = rq.model;
    rc.plan = best.plan;
    rc.job = best.job;
    rc.cluster = rq.cluster.name;
    rc.n_gpus = rq.n_gpus;
    PlanSummary summary;
    summary.tokens_per_s_per_gpu = best.result.tokens_per_s_per_gpu;
    summary.step_time_s = best.result.step_time_s;
    summary.peak_bytes = static_cast<std::int64_t>(std::llround(best.peak_bytes));
    for (const auto& [k, v] : best.result.breakdown_s)
      summary.breakdown.push_back(fmt::format("{} {:.1f} %", k, 100 * v / best.result.step_time_s));
    summary.assumptions.push_back(fmt::format("cluster profile {}, {} GPUs", rq.cluster.name, rq.n_gpus));
    if (rq.cluster.reliability.present) {
      const JobInterruptions ji = job_interruptions(rq.cluster, rq.n_gpus);
      const CheckpointCost ck = checkpoint_cost(
          checkpoint_state_bytes_per_rank(rq.model, best.plan, best.job, rq.cluster), rq.cluster, CheckpointMode::sync);
      rc.checkpoint_interval_steps = young_daly_interval_steps(ji, ck, CheckpointMode::sync, best.result.step_time_s);
      summary.assumptions.push_back(fmt::format(
          "checkpoint every {} steps: Young/Daly sqrt(2 x {:.1f} s sync save x {:.2f} h between interruptions) "
          "(docs/goodput.md), into $CHECKPOINT_DIR, which the launch scripts require",
          rc.checkpoint_interval_steps, ck.blocking_seconds, ji.mtbi_seconds / 3600));
    }
    if (const auto v = validated_mfu_of(best.plan, rq.cluster.gpu.arch, rq.model.moe.enabled(), rq.seq_len))
      if (std::string n = beyond_validated_note(best.result.mfu, *v); !n.empty()) summary.assumptions.push_back(n);
    summary.assumptions.push_back(i == 0 ? s.why_winner
                                         : fmt::format("rank {} of the search; faster plans the runtime "
                                                       "cannot express: {}", i + 1, refusals));
    try {
      const auto files = write_bundle(o.out, rc, rq.cluster, er, *version, summary);
      for (const auto& f : files) fmt::print(stderr, "wrote {}\n", f.string());
      written = true;
    } catch (const InputError& e) {
      if (e.key() == "--out") throw;  // the folder, not the plan: no other rank would do better
      refusals += fmt::format("{}rank {} ({})", refusals.empty() ? "" : "; ", i + 1, e.reason());
    }
  }
  if (!written) throw InputError("", "--out", "no ranked plan can be expressed for this runtime: " + refusals);
}

void print_json(const Options& o, const PlanRequest& rq, const PlanSearch& s, int top) {
  nlohmann::json j;
  // What was asked, under the names simulate and memory use for the same things.
  j["model"] = rq.model.name;
  j["cluster"] = rq.cluster.name;
  j["n_gpus"] = rq.n_gpus;
  j["runtime"] = o.runtime;
  j["seq_len"] = rq.seq_len;
  j["global_batch"] = s.global_batch;
  j["evaluated"] = s.evaluated;
  j["feasible"] = s.feasible;
  j["search_seconds"] = s.search_seconds;
  j["plans"] = nlohmann::json::array();
  for (std::size_t i = 0; i < s.ranked.size() && static_cast<int>(i) < top; ++i) {
    const auto& cnd = s.ranked[i];
    const Plan& p = cnd.plan;
    nlohmann::json row = layout_json(cnd);
    row.update({{"rank", i + 1},
                {"sharding", std::string(to_string(p.sharding))},
                {"activation_ckpt", std::string(to_string(p.ac))},
                {"mixed_precision", mixed_precision_label(p)},
                {"backward_prefetch", std::string(to_string(p.backward_prefetch))},
                {"tokens_per_s_per_gpu", cnd.result.tokens_per_s_per_gpu},
                {"step_time_s", cnd.result.step_time_s},
                {"mfu", cnd.result.mfu},
                {"peak_bytes", static_cast<std::int64_t>(std::llround(cnd.peak_bytes))},
                {"pareto", std::find(s.pareto.begin(), s.pareto.end(), i) != s.pareto.end()},
                {"equivalent_settings", settings_json(cnd.equivalent_plans)}});
    if (!cnd.numerics_note.empty()) row["numerics_note"] = cnd.numerics_note;
    // The highest MFU a published run of the same runtime, GPU, model kind and recipe reached
    // (spec/validated_mfu.hpp): null where none was validated.
    const auto v = validated_mfu_of(p, rq.cluster.gpu.arch, rq.model.moe.enabled(), rq.seq_len);
    row["validated_mfu_max"] = v ? nlohmann::json(v->mfu) : nlohmann::json();
    row["beyond_validated_mfu"] = v && cnd.result.mfu > v->mfu;
    j["plans"].push_back(std::move(row));
  }
  j["dropped"] = nlohmann::json::array();
  for (const DroppedPlan& d : s.dropped) {
    const Plan& p = d.candidate.plan;
    nlohmann::json row = layout_json(d.candidate);
    row["settings"] = settings_json({p}).front();
    row["reason"] = d.reason;
    j["dropped"].push_back(std::move(row));
  }
  j["why"] = s.why_winner;
  j["notes"] = s.notes;
  fmt::print("{}\n", j.dump(2));
}

void print_table(const Options& o, const PlanRequest& rq, const PlanSearch& s) {
  fmt::print("meshplan plan: {} on {} x {}, global batch {} x {} tokens, runtime {}\n", rq.model.name, rq.n_gpus,
             rq.cluster.name,
             s.global_batch,
             rq.seq_len, o.runtime);
  fmt::print("{} layouts evaluated, {} fit with {:.0f}% headroom, {} simulated\n\n", s.evaluated, s.feasible,
             o.headroom_pct, s.ranked.size());
  // A precision column when the shown rows differ in it (llm-foundry searches DEFAULT and PURE):
  // without it two rows could read the same.
  const std::size_t shown = std::min(s.ranked.size(), static_cast<std::size_t>(std::max(0, o.top)));
  bool precision_differs = false, prefetch_differs = false;
  for (std::size_t i = 1; i < shown; ++i) {
    precision_differs = precision_differs || mixed_precision_label(s.ranked[i].plan) != mixed_precision_label(s.ranked[0].plan);
    prefetch_differs = prefetch_differs || s.ranked[i].plan.backward_prefetch != s.ranked[0].plan.backward_prefetch;
  }
  auto settings_cells = [&](const Plan& p) {
    std::string out;
    if (precision_differs) out += fmt::format(" {:<9}", mixed_precision_label(p));
    if (prefetch_differs) out += fmt::format(" {:<13}", to_string(p.backward_prefetch));
    return out;
  };
  std::string precision_head;
  if (precision_differs) precision_head += fmt::format(" {:<9}", "precision");
  if (prefetch_differs) precision_head += fmt::format(" {:<13}", "bwd prefetch");
  fmt::print("{:>4}  {:<28} {:>4} {:>5} {:<10}{} {:<14} {:>10} {:>7} {:>7} {:>11}\n", "rank", "layout", "mb", "accum",
             "sharding", precision_head, "AC", "tok/s/GPU", "MFU", "step s", "peak");
  for (std::size_t i = 0; i < s.ranked.size() && static_cast<int>(i) < o.top; ++i) {
    const auto& cnd = s.ranked[i];
    const bool front = std::find(s.pareto.begin(), s.pareto.end(), i) != s.pareto.end();
    fmt::print("{:>4}  {:<28} {:>4} {:>5} {:<10}{} {:<14} {:>10.1f} {:>6.1f}% {:>7.3f} {:>11}{}\n", i + 1,
               describe_layout(cnd.plan), cnd.job.micro_batch, cnd.job.grad_accum, to_string(cnd.plan.sharding),
               settings_cells(cnd.plan),
               std::string(to_string(cnd.plan.ac)) + (cnd.plan.act_offload ? "+offload" : ""),
               cnd.result.tokens_per_s_per_gpu, 100 * cnd.result.mfu,
               cnd.result.step_time_s, format_gib(cnd.peak_bytes), front ? "  *" : "");
  }
  if (!s.pareto.empty()) fmt::print("\n* on the Pareto front of tokens/s vs peak memory\n");
  // Rows that stand for several settings, grouped by what the others change.
  std::vector<std::pair<std::string, std::string>> same_as;  // (other settings, ranks)
  for (std::size_t i = 0; i < s.ranked.size() && static_cast<int>(i) < o.top; ++i) {
    const auto& eq = s.ranked[i].equivalent_plans;
    std::string others;
    for (std::size_t k = 1; k < eq.size(); ++k)
      others += (others.empty() ? "" : "; ") + describe_setting_differences(eq[k], eq[0]).substr(2);
    if (others.empty()) continue;
    auto it = std::find_if(same_as.begin(), same_as.end(), [&](const auto& e) { return e.first == others; });
    if (it == same_as.end()) same_as.push_back({others, std::to_string(i + 1)});
    else it->second += fmt::format(", {}", i + 1);
  }
  for (const auto& [others, ranks] : same_as)
    fmt::print("{} lowers to the same step and memory as the row's own setting at rank{} {}\n", others,
               ranks.find(',') == std::string::npos ? "" : "s", ranks);
  for (const DroppedPlan& d : s.dropped)
    fmt::print("dropped: {}, micro-batch {}{}: {}\n", describe_layout(d.candidate.plan), d.candidate.job.micro_batch,
               describe_setting_differences(d.candidate.plan, Plan{}), d.reason);
  for (std::size_t i = 0; i < s.ranked.size() && static_cast<int>(i) < o.top; ++i)
    if (!s.ranked[i].numerics_note.empty()) fmt::print("rank {}: {}\n", i + 1, s.ranked[i].numerics_note);
  if (!s.why_winner.empty()) fmt::print("\nwhy: {}\n", s.why_winner);
  for (const auto& n : s.notes) fmt::print("note: {}\n", n);
}

void add_plan_options(CLI::App& app, Options& o) {
  app.add_option("--model", o.model, "model name (meshplan model --list) or HF config.json")->required();
  app.add_option("--cluster", o.cluster, "hardware profile")->capture_default_str();
  add_nccl_version_option(app, o.nccl_version);
  app.add_option("--gpus", o.gpus, "total GPUs")->required()->check(in_range("plan", "--gpus"));
  auto* tok = app.add_option("--global-batch-tokens", o.tokens, "tokens per optimizer step, e.g. 4M (SI: 4e6; 4Mi = 4 x 2^20); rounded to the nearest whole number of sequences a layout admits, said in a note");
  auto* gb = app.add_option("--global-batch", o.global_batch, "sequences per optimizer step")->check(in_range("plan", "--global-batch"));
  tok->excludes(gb);
  app.add_option("--seq", o.seq, "tokens per sequence")->capture_default_str()->check(in_range("plan", "--seq"));
  app.add_option("--top", o.top, "plans to show")->capture_default_str()->check(in_range("plan", "--top"));
  app.add_option("--runtime", o.runtime, "torchtitan | llm-foundry | megatron (also torchtitan-fsdp2, composer-fsdp1, the plan TOML names)")->capture_default_str()
      ->transform(runtime_name());
  app.add_option("--headroom", o.headroom_pct, "percent of GPU memory kept free")->capture_default_str()->check(in_range("plan", "--headroom"));
  app.add_option("--out", o.out,
                 "write a launchable bundle for the winner into DIR (runtime config, launch.sh, sbatch.slurm "
                 "when multi-node, plan.md)");
  app.add_option("--torchtitan-version", o.torchtitan_version,
                 "torchtitan commit the bundle targets: 8570415c3 (mid-2025 TOML), 238fa9953e4a (early-2026 "
                 "TOML), or registry (Python-registry era)")
      ->capture_default_str();
  app.add_option("--simulate-budget", o.budget,
                 "plans simulated after the closed-form prune (more: slower, less risk of pruning the best)")
      ->capture_default_str()
      ->check(in_range("plan", "--simulate-budget"));
  app.add_option("--verify-rows", o.verify,
                 "ranks the closed-form prune may not cut: every plan whose estimate, times the largest simulated / "
                 "estimated ratio seen (+5 %), could reach the N-th simulated plan is simulated too (1: the winner; "
                 "10: the default table as a search simulating every plan would rank it, slower)")
      ->capture_default_str()
      ->check(in_range("plan", "--verify-rows"));
  app.add_option("--threads", o.threads,
                 "threads simulating plans (the answer is the same for any count; only search_seconds changes)")
      ->capture_default_str()
      ->check(in_range("plan", "--threads"));
  app.add_flag("--json", o.json, "machine-readable output");
}

// The search asked for, its inputs checked: a batch given one way, within the limits.
PlanRequest plan_request(const Options& o) {
  if (o.tokens.empty() && o.global_batch == 0)
    throw InputError("", "--global-batch-tokens", "give the batch as --global-batch-tokens T or --global-batch B");
  PlanRequest rq;
  rq.model = load_model(o.model);
  check_nccl_version(o.nccl_version);
  rq.cluster = load_cluster(o.cluster);
  override_nccl_version(rq.cluster, o.nccl_version);
  rq.n_gpus = o.gpus;
  rq.seq_len = o.seq;
  rq.global_batch = o.global_batch;
  if (!o.tokens.empty()) {
    rq.global_batch_tokens = parse_batch_tokens(o.tokens, rq.seq_len);
  }
  if (rq.global_batch > 0 && rq.global_batch * rq.seq_len > limits::kMaxTokensPerStep)
    throw InputError("", "--global-batch", fmt::format("{} sequences x {} tokens is above the maximum {} tokens per "
                                                       "step (docs/limits.md)", rq.global_batch, rq.seq_len,
                                                       limits::kMaxTokensPerStep));
  rq.runtime = searched_runtime(o.runtime);
  rq.headroom_fraction = o.headroom_pct / 100.0;
  rq.top_k = o.top;
  rq.simulate_budget = o.budget;
  rq.verified_rows = o.verify;
  rq.threads = o.threads;
  return rq;
}

int run_plan(const Options& o) {
  const PlanRequest rq = plan_request(o);
  TerminalProgress progress("simulating plans");
  const PlanSearch s = search_plans(rq, [&](std::size_t done, std::size_t total) { progress.update(done, total); });
  progress.finish();
  if (!o.out.empty() && !s.ranked.empty()) write_winner_bundle(o, rq, s);
  if (o.json) {
    print_json(o, rq, s, o.top);
  } else {
    print_table(o, rq, s);
  }
  return s.ranked.empty() ? 3 : 0;
}

}  // namespace

Command add_plan_command(CLI::App& root) {
  auto o = std::make_shared<Options>();
  Command c;
  c.app = root.add_subcommand(
      "plan",
      "Find the best layout for a model on N GPUs: enumerates every valid PP x VPP x DP x CP x TP x micro-batch x "
      "sharding x AC x precision plan the runtime supports, drops what does not fit (with --headroom), simulates "
      "the most promising and ranks them by tokens/s. Prints the top plans, the Pareto front of tokens/s vs memory, "
      "and why the winner wins; a winner whose MFU is above what published runs of its kind reached gets a note "
      "(docs/validation.md, Validated MFU envelope).");
  add_plan_options(*c.app, *o);
  c.run = [o] { return run_plan(*o); };
  return c;
}

}  // namespace meshplan::cli
