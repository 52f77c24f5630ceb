// meshplan capacity: GPUs, days, GPU-hours and cost for a training run of T tokens.
#include <fmt/format.h>

#include <cmath>
#include <memory>

#include "cli/command.hpp"
#include "cli/quantity.hpp"
#include "cli/run_inputs.hpp"
#include "plan/capacity.hpp"
#include "report/memory_report.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/error.hpp"
#include "spec/limits.hpp"
#include "spec/model_loader.hpp"

namespace meshplan::cli {

namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : s) {
    if (ch == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

}  // namespace

Command add_capacity_command(CLI::App& root) {
  struct Options {
    std::string model, tokens, deadline, cluster = kDefaultCluster, runtime = "torchtitan", batch_tokens = "4Mi";
    std::int64_t gpus = 0, seq = 8192;
    double price = -1;
    int budget = 6;
    bool json = false;
  };
  auto o = std::make_shared<Options>();
  Command c;
  c.app = root.add_subcommand(
      "capacity",
      "How many GPUs, days, GPU-hours and how much money a training run of --tokens needs: with --deadline, the "
      "fewest GPUs (whole nodes, doubling) that finish in time; with --gpus, the days at that count. Each row uses "
      "the best plan `meshplan plan` finds at that GPU count (a small simulate budget for speed).");
  c.app->add_option("--model", o->model, "model name (meshplan model --list) or HF config.json")->required();
  c.app->add_option("--tokens", o->tokens, "training tokens, e.g. 15T (SI: 15e12)")->required();
  auto* d = c.app->add_option("--deadline", o->deadline, "wall-clock limit, e.g. 60d (also h, w)");
  auto* g = c.app->add_option("--gpus", o->gpus, "GPU count to evaluate")->check(positive_integer(limits::kMaxGpus));
  d->excludes(g);
  c.app->add_option("--cluster", o->cluster, "hardware profile(s), comma-separated")->capture_default_str();
  c.app->add_option("--price-per-gpu-hour", o->price, "price of one GPU-hour (for the cost column)")->check(CLI::NonNegativeNumber);
  c.app->add_option("--seq", o->seq, "tokens per sequence")->capture_default_str()->check(positive_integer(limits::kMaxSeqLen));
  c.app->add_option("--global-batch-tokens", o->batch_tokens, "tokens per optimizer step (SI: 4M = 4e6; 4Mi = 4 x 2^20)")->capture_default_str();
  c.app->add_option("--runtime", o->runtime, "torchtitan | llm-foundry | megatron")->capture_default_str()
      ->check(CLI::IsMember({"torchtitan", "llm-foundry", "megatron"}));
  c.app->add_option("--simulate-budget", o->budget, "plans simulated per GPU count")->capture_default_str()->check(positive_integer());
  c.app->add_flag("--json", o->json, "machine-readable output");
  c.run = [o] {
    if (o->deadline.empty() && o->gpus == 0)
      throw InputError("", "--deadline", "give --deadline DAYS (find the GPU count) or --gpus N (find the days)");
    CapacityRequest rq;
    rq.model = load_model(o->model);
    for (const auto& name : split_commas(o->cluster)) rq.clusters.push_back(load_cluster(name));
    if (rq.clusters.empty()) throw InputError("", "--cluster", "no cluster given");
    rq.tokens = parse_token_count(o->tokens, "--tokens", limits::kMaxTrainingTokens);
    if (!o->deadline.empty()) rq.deadline_days = parse_deadline_days(o->deadline, "--deadline");
    rq.gpus = o->gpus;
    if (o->price >= 0) rq.price_per_gpu_hour = o->price;
    rq.seq_len = o->seq;
    rq.global_batch_tokens = static_cast<std::int64_t>(std::llround(
        parse_token_count(o->batch_tokens, "--global-batch-tokens", static_cast<double>(limits::kMaxTokensPerStep))));
    if (rq.global_batch_tokens < rq.seq_len)
      throw InputError("", "--global-batch-tokens", fmt::format("{} tokens is less than one sequence of {} (--seq)",
                                                                rq.global_batch_tokens, rq.seq_len));
    rq.runtime = o->runtime == "torchtitan" ? Runtime::torchtitan_fsdp2
                 : o->runtime == "megatron"  ? Runtime::megatron
                                             : Runtime::composer_fsdp1;
    rq.simulate_budget = o->budget;
    const CapacityReport r = plan_capacity(rq);
    auto plan_json = [](const CapacityRow& x) -> nlohmann::json {
      if (!x.feasible) return nullptr;
      const Plan& p = x.best.plan;
      return {{"layout", describe_layout(p)},
              {"pp", p.mesh.pp},
              {"vpp", p.mesh.vpp},
              {"dp_replicate", p.mesh.dp_replicate},
              {"dp_shard", p.mesh.dp_shard},
              {"cp", p.mesh.cp},
              {"tp", p.mesh.tp},
              {"micro_batch", x.best.job.micro_batch},
              {"grad_accum", x.best.job.grad_accum},
              {"global_batch", x.best.job.global_batch},
              {"seq_len", x.best.job.seq_len},
              {"sharding", std::string(to_string(p.sharding))},
              {"activation_ckpt", std::string(to_string(p.ac))},
              {"mfu", x.best.result.mfu},
              {"step_time_s", x.best.result.step_time_s},
              {"peak_bytes", static_cast<std::int64_t>(std::llround(x.best.peak_bytes))}};
    };
    if (o->json) {
      nlohmann::json j;
      j["model"] = rq.model.name;
      j["tokens"] = rq.tokens;
      j["deadline_days"] = rq.deadline_days ? nlohmann::json(*rq.deadline_days) : nlohmann::json(nullptr);
      j["rows"] = nlohmann::json::array();
      for (const auto& x : r.rows)
        j["rows"].push_back({{"cluster", x.cluster},
                             {"gpus", x.gpus},
                             {"feasible", x.feasible},
                             {"days", x.feasible ? nlohmann::json(x.days) : nlohmann::json(nullptr)},
                             {"gpu_hours", x.feasible ? nlohmann::json(x.gpu_hours) : nlohmann::json(nullptr)},
                             {"cost", x.cost ? nlohmann::json(*x.cost) : nlohmann::json(nullptr)},
                             {"tokens_per_s_per_gpu", x.tokens_per_s_per_gpu},
                             {"meets_deadline", x.meets_deadline},
                             {"answer", x.answer},
                             {"plan", plan_json(x)},
                             {"note", x.note}});
      j["notes"] = r.notes;
      fmt::print("{}\n", j.dump(2));
      return 0;
    }
    fmt::print("meshplan capacity: {} for {:.3g} tokens{}, {} runtime, {} x {} tokens per step\n", rq.model.name,
               rq.tokens, rq.deadline_days ? fmt::format(" within {:g} days", *rq.deadline_days) : std::string(),
               o->runtime, rq.global_batch_tokens / rq.seq_len, rq.seq_len);
    fmt::print("\n  {:<16} {:>6} {:>10} {:>8} {:>12} {:>14}  {:<26} {:>9}\n", "cluster", "GPUs", "tok/s/GPU", "days",
               "GPU-hours", "cost", "best plan", "peak");
    for (const auto& x : r.rows) {
      if (!x.feasible) {
        fmt::print("  {:<16} {:>6}  {}\n", x.cluster, x.gpus, x.note);
        continue;
      }
      fmt::print("{} {:<16} {:>6} {:>10.1f} {:>8.1f} {:>12.0f} {:>14}  {:<26} {:>9}{}\n", x.answer ? "*" : " ", x.cluster,
                 x.gpus, x.tokens_per_s_per_gpu, x.days, x.gpu_hours, x.cost ? fmt::format("{:.0f}", *x.cost) : "-",
                 describe_layout(x.best.plan), format_gib(x.best.peak_bytes),
                 rq.deadline_days && !x.meets_deadline ? "  (misses the deadline)" : "");
    }
    fmt::print("\n* the answer{}; days = tokens / (tokens/s/GPU x GPUs) / 86400, GPU-hours = GPUs x days x 24\n",
               rq.deadline_days ? ": the fewest GPUs (whole nodes, doubling) that meet the deadline" : "");
    for (const auto& n : r.notes) fmt::print("note: {}\n", n);
    return 0;
  };
  return c;
}

}  // namespace meshplan::cli
