// meshplan capacity: GPUs, days, GPU-hours and cost for a training run of T tokens.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>

#include "cli/command.hpp"
#include "cli/flag_ranges.hpp"
#include "cli/layout_json.hpp"
#include "cli/quantity.hpp"
#include "cli/run_inputs.hpp"
#include "plan/capacity.hpp"
#include "report/memory_report.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/error.hpp"
#include "spec/limits.hpp"
#include "spec/model_loader.hpp"
#include "spec/runtimes.hpp"

namespace meshplan::cli {

namespace {

std::string human_seconds(double s) {
  if (!std::isfinite(s)) return "never";
  if (s < 120) return fmt::format("{:.1f} s", s);
  if (s < 7200) return fmt::format("{:.1f} min", s / 60);
  if (s < 2 * 86400) return fmt::format("{:.1f} h", s / 3600);
  return fmt::format("{:.1f} days", s / 86400);
}

std::string human_bytes(double b) {
  if (b >= 1e12) return fmt::format("{:.2f} TB", b / 1e12);
  if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  return fmt::format("{:.0f} MB", b / 1e6);
}

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

// An answer exists: some cluster has a plan that fits and, with a deadline, meets it. Anything
// else exits 3 ("does not fit"), like memory and plan.
bool answered(const CapacityReport& r, const CapacityRequest& rq) {
  return std::any_of(r.rows.begin(), r.rows.end(), [&](const CapacityRow& x) {
    return x.answer && x.feasible && (!rq.deadline_days || x.meets_deadline);
  });
}

struct Options {
  std::string model, tokens, deadline, cluster = kDefaultCluster, batch_tokens = "4Mi";
  std::string runtime{runtime_info(kDefaultSearchedRuntime).planner_name};
  std::string checkpoint = "sync", interval;
  std::string nccl_version;  // --nccl-version; empty: the profile's
  bool no_failures = false;
  std::int64_t gpus = 0, seq = 8192;
  double price = -1;
  int budget = 6;
  bool json = false;
};

void add_capacity_options(CLI::App& app, Options& o) {
  app.add_option("--model", o.model, "model name (meshplan model --list) or HF config.json")->required();
  app.add_option("--tokens", o.tokens, "training tokens, e.g. 15T (SI: 15e12)")->required();
  auto* d = app.add_option("--deadline", o.deadline, "wall-clock limit, e.g. 60d (also h, w)");
  auto* g = app.add_option("--gpus", o.gpus, "GPU count to evaluate")->check(in_range("capacity", "--gpus"));
  d->excludes(g);
  app.add_option("--cluster", o.cluster, "hardware profile(s), comma-separated")->capture_default_str();
  add_nccl_version_option(app, o.nccl_version);
  app.add_option("--price-per-gpu-hour", o.price, "price of one GPU-hour (for the cost column)")->check(in_range("capacity", "--price-per-gpu-hour"));
  app.add_option("--seq", o.seq, "tokens per sequence")->capture_default_str()->check(in_range("capacity", "--seq"));
  app.add_option("--global-batch-tokens", o.batch_tokens, "tokens per optimizer step (SI: 4M = 4e6; 4Mi = 4 x 2^20)")->capture_default_str();
  app.add_option("--runtime", o.runtime, "torchtitan | llm-foundry | megatron (also torchtitan-fsdp2, composer-fsdp1, the plan TOML names)")->capture_default_str()
      ->transform(runtime_name());
  app.add_option("--simulate-budget", o.budget, "plans simulated per GPU count")->capture_default_str()->check(in_range("capacity", "--simulate-budget"));
  app.add_flag("--no-failures", o.no_failures,
               "the ideal: every step a perfect step (by default days include interruptions, checkpoints and "
               "restarts from the profile's [reliability] table; docs/goodput.md)");
  app.add_option("--checkpoint", o.checkpoint, "sync | async (only the device-to-host copy blocks)")
      ->capture_default_str()
      ->check(CLI::IsMember({"sync", "async"}));
  app.add_option("--checkpoint-interval", o.interval,
                 "checkpoint every DURATION (e.g. 30m; s, m, h, d) instead of the Young/Daly optimum");
  app.add_flag("--json", o.json, "machine-readable output");
}

// The question asked, its inputs checked: a deadline or a GPU count, at least a sequence per step.
CapacityRequest capacity_request(const Options& o) {
  if (o.deadline.empty() && o.gpus == 0)
    throw InputError("", "--deadline", "give --deadline DAYS (find the GPU count) or --gpus N (find the days)");
  CapacityRequest rq;
  rq.model = load_model(o.model);
  check_nccl_version(o.nccl_version);
  for (const auto& name : split_commas(o.cluster)) {
    rq.clusters.push_back(load_cluster(name));
    override_nccl_version(rq.clusters.back(), o.nccl_version);
  }
  if (rq.clusters.empty()) throw InputError("", "--cluster", "no cluster given");
  rq.tokens = parse_token_count(o.tokens, "--tokens", limits::kMaxTrainingTokens);
  if (!o.deadline.empty()) rq.deadline_days = parse_deadline_days(o.deadline, "--deadline");
  rq.gpus = o.gpus;
  if (o.price >= 0) rq.price_per_gpu_hour = o.price;
  rq.seq_len = o.seq;
  rq.global_batch_tokens = parse_batch_tokens(o.batch_tokens, rq.seq_len);
  rq.runtime = searched_runtime(o.runtime);
  rq.simulate_budget = o.budget;
  rq.price_failures = !o.no_failures;
  rq.checkpoint_mode = o.checkpoint == "async" ? CheckpointMode::async : CheckpointMode::sync;
  if (!o.interval.empty()) {
    if (o.no_failures) throw InputError("", "--checkpoint-interval", "has no effect with --no-failures");
    rq.checkpoint_interval_s = parse_duration_seconds(o.interval, "--checkpoint-interval");
  }
  return rq;
}

nlohmann::json null_or(bool ok, double v) { return ok && std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

template <typename T>
nlohmann::json value_or_null(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json plan_json(const CapacityRow& x) {
  if (!x.feasible) return nullptr;
  const Plan& p = x.best.plan;
  nlohmann::json row = layout_json(x.best);
  row.update({{"layout", describe_layout(p)},
              {"global_batch", x.best.job.global_batch},
              {"seq_len", x.best.job.seq_len},
              {"sharding", std::string(to_string(p.sharding))},
              {"activation_ckpt", std::string(to_string(p.ac))},
              {"mfu", x.best.result.mfu},
              {"step_time_s", x.best.result.step_time_s},
              {"peak_bytes", static_cast<std::int64_t>(std::llround(x.best.peak_bytes))}});
  return row;
}

nlohmann::json failures_json(const CapacityRow& x, const std::string& checkpoint_mode) {
  const CapacityGoodput& f = x.failures;
  if (!x.feasible || !f.priced) return nullptr;
  nlohmann::json by = nlohmann::json::object();
  for (const auto& cr : f.interruptions.unexpected) by[cr.component] = cr.interruptions_per_s * 86400.0;
  return {{"mtbi_s", null_or(true, f.interruptions.mtbi_seconds)},
          {"unexpected_per_day", f.interruptions.unexpected_per_s * 86400.0},
          {"unexpected_per_day_by_component", by},
          {"planned_per_day", f.interruptions.planned_per_s * 86400.0},
          {"checkpoint_mode", checkpoint_mode},
          {"checkpoint_bytes_per_rank", f.checkpoint.state_bytes_per_rank},
          {"checkpoint_bytes_per_node", f.checkpoint.state_bytes_per_node},
          {"checkpoint_blocking_s", f.checkpoint.blocking_seconds},
          {"checkpoint_write_s", f.checkpoint.write_seconds},
          {"checkpoint_load_s", f.checkpoint.load_seconds},
          {"restart_s", f.restart_s},
          {"checkpoint_interval_steps", f.goodput.interval_steps},
          {"young_daly_interval_s", f.goodput.young_daly_interval_s},
          {"lost_per_interruption_s", f.goodput.lost_per_interruption_s},
          {"expected_interruptions", f.goodput.expected_interruptions},
          {"expected_planned_interruptions", f.goodput.expected_planned},
          {"gpu_hours_ideal", f.gpu_hours_ideal},
          {"cost_ideal", value_or_null(f.cost_ideal)},
          {"days_with_async_checkpointing", f.days_with_async ? null_or(true, *f.days_with_async) : nlohmann::json(nullptr)},
          {"storage_speedup_for_a_day", value_or_null(f.storage_speedup_for_a_day)},
          {"days_with_instant_storage", null_or(true, f.days_with_instant_storage)},
          {"notes", f.goodput.notes}};
}

// The days and goodput a script reads first: on every row and, for the answer, at the top level.
void add_contract(nlohmann::json& into, const CapacityRow& x) {
  const bool p = x.feasible && x.failures.priced;
  into["goodput_fraction"] = null_or(p, x.failures.goodput.goodput_fraction);
  into["checkpoint_interval_s"] = null_or(p, x.failures.goodput.interval_s);
  into["days_ideal"] = x.feasible ? nlohmann::json(p ? x.failures.days_ideal : x.days) : nlohmann::json(nullptr);
  into["days_with_failures"] = null_or(p, x.failures.days_with_failures);
  into["effective_tokens_per_s_per_gpu"] =
      x.feasible ? nlohmann::json(x.tokens_per_s_per_gpu * (p ? x.failures.goodput.goodput_fraction : 1.0))
                 : nlohmann::json(nullptr);
}

nlohmann::json row_json(const CapacityRow& x, const std::string& checkpoint_mode) {
  nlohmann::json row = {{"cluster", x.cluster},
                        {"gpus", x.gpus},
                        {"feasible", x.feasible},
                        {"days", x.feasible ? nlohmann::json(x.days) : nlohmann::json(nullptr)},
                        {"gpu_hours", x.feasible ? nlohmann::json(x.gpu_hours) : nlohmann::json(nullptr)},
                        {"cost", value_or_null(x.cost)},
                        {"tokens_per_s_per_gpu", x.tokens_per_s_per_gpu},
                        {"meets_deadline", x.meets_deadline},
                        {"answer", x.answer},
                        {"plan", plan_json(x)},
                        {"note", x.note}};
  add_contract(row, x);
  row["failures"] = failures_json(x, checkpoint_mode);
  return row;
}

void print_json(const Options& o, const CapacityRequest& rq, const CapacityReport& r) {
  nlohmann::json j;
  j["model"] = rq.model.name;
  j["failures_priced"] = rq.price_failures;
  j["tokens"] = rq.tokens;
  j["deadline_days"] = value_or_null(rq.deadline_days);
  j["rows"] = nlohmann::json::array();
  for (const auto& x : r.rows) j["rows"].push_back(row_json(x, o.checkpoint));
  // The first cluster's answer, at the top level for scripts that ask one question.
  const auto ans = std::find_if(r.rows.begin(), r.rows.end(), [](const CapacityRow& x) { return x.answer; });
  if (ans != r.rows.end()) add_contract(j, *ans);
  j["notes"] = r.notes;
  // Whether some row answers the question (with a deadline: meets it); the exit status says
  // the same. A row's `answer` marks the one the question points at, also when it is only
  // the closest.
  j["answered"] = answered(r, rq);
  fmt::print("{}\n", j.dump(2));
}

void print_table(const Options& o, const CapacityRequest& rq, const CapacityReport& r) {
  fmt::print("meshplan capacity: {} for {:.3g} tokens{}, {} runtime, {} x {} tokens per step\n", rq.model.name,
             rq.tokens, rq.deadline_days ? fmt::format(" within {:g} days", *rq.deadline_days) : std::string(),
             o.runtime, rq.global_batch_tokens / rq.seq_len, rq.seq_len);
  const bool priced = std::any_of(r.rows.begin(), r.rows.end(), [](const CapacityRow& x) { return x.failures.priced; });
  fmt::print("\n  {:<16} {:>6} {:>10} {:>8} {:>8} {:>8} {:>12} {:>14}  {:<26} {:>9}\n", "cluster", "GPUs", "tok/s/GPU",
             "days", "ideal", "goodput", "GPU-hours", "cost", "best plan", "peak");
  for (const auto& x : r.rows) {
    if (!x.feasible) {
      fmt::print("  {:<16} {:>6}  {}\n", x.cluster, x.gpus, x.note);
      continue;
    }
    const bool p = x.failures.priced;
    // The star is an answer: a row the question points at that misses the deadline is only the
    // closest there is (the most GPUs with a plan), and says so.
    fmt::print("{} {:<16} {:>6} {:>10.1f} {:>8.1f} {:>8} {:>8} {:>12.0f} {:>14}  {:<26} {:>9}{}\n",
               !x.answer ? " " : (!rq.deadline_days || x.meets_deadline) ? "*" : "~",
               x.cluster, x.gpus, x.tokens_per_s_per_gpu, x.days, p ? fmt::format("{:.1f}", x.failures.days_ideal) : "-",
               p ? fmt::format("{:.1f} %", 100 * x.failures.goodput.goodput_fraction) : "-", x.gpu_hours,
               x.cost ? fmt::format("{:.0f}", *x.cost) : "-", describe_layout(x.best.plan), format_gib(x.best.peak_bytes),
               rq.deadline_days && !x.meets_deadline ? "  (misses the deadline)" : "");
  }
  const bool closest_only = rq.deadline_days && !answered(r, rq);
  if (closest_only)
    fmt::print("\n~ no answer: no GPU count meets the deadline; this is the closest, the most GPUs with a plan\n"
               "  days = tokens / (tokens/s/GPU x GPUs) / 86400{}, GPU-hours = GPUs x days x 24\n",
               priced ? " / goodput (ideal: every step perfect)" : "");
  else
    fmt::print("\n* the answer{}; days = tokens / (tokens/s/GPU x GPUs) / 86400{}, GPU-hours = GPUs x days x 24\n",
               rq.deadline_days ? ": the fewest GPUs (whole nodes, doubling) that meet the deadline" : "",
               priced ? " / goodput (ideal: every step perfect)" : "");
}

// What failures cost the answer: interruptions, checkpoints, restarts and what would gain a day.
void print_failures(const Options& o, const CapacityRequest& rq, const CapacityRow& x) {
  const CapacityGoodput& f = x.failures;
  const Goodput& g = f.goodput;
  std::string by;
  for (const auto& cr : f.interruptions.unexpected)
    if (cr.interruptions_per_s > 0)
      by += fmt::format("{}{} {:.2f}", by.empty() ? "" : ", ", cr.component, cr.interruptions_per_s * 86400.0);
  fmt::print("\nfailures at {} GPUs on {} (docs/goodput.md):\n", x.gpus, x.cluster);
  fmt::print("  interruptions   {:.2f} a day unexpected ({}), {:.2f} planned; mean time between: {}\n",
             f.interruptions.unexpected_per_s * 86400.0, by, f.interruptions.planned_per_s * 86400.0,
             human_seconds(f.interruptions.mtbi_seconds));
  fmt::print("  checkpoint      {} per rank, {} per node, {}: blocks {} (write {}, load {})\n",
             human_bytes(f.checkpoint.state_bytes_per_rank), human_bytes(f.checkpoint.state_bytes_per_node), o.checkpoint,
             human_seconds(f.checkpoint.blocking_seconds), human_seconds(f.checkpoint.write_seconds),
             human_seconds(f.checkpoint.load_seconds));
  fmt::print("  restart         {} (relaunch + load + warm-up)\n", human_seconds(f.restart_s));
  fmt::print("  interval        every {} steps = {} ({}; Young/Daly sqrt(2 x {} x {}) = {})\n", g.interval_steps,
             human_seconds(g.interval_s), rq.checkpoint_interval_s > 0 ? "--checkpoint-interval" : "chosen",
             human_seconds(f.checkpoint.blocking_seconds), human_seconds(f.interruptions.mtbi_seconds),
             human_seconds(g.young_daly_interval_s));
  fmt::print("  lost            {} per interruption, {:.0f} interruptions expected; checkpoints take {:.2f} %\n",
             human_seconds(g.lost_per_interruption_s), g.expected_interruptions, 100 * g.checkpoint_overhead_fraction);
  fmt::print("  goodput         {:.1f} %: {:.1f} days ideal -> {:.1f} days with failures; GPU-hours {:.0f} -> {:.0f}{}\n",
             100 * g.goodput_fraction, f.days_ideal, f.days_with_failures, f.gpu_hours_ideal, x.gpu_hours,
             f.cost_ideal && x.cost ? fmt::format("; cost {:.0f} -> {:.0f}", *f.cost_ideal, *x.cost) : std::string());
  std::vector<std::string> gain;
  if (f.days_with_async)
    gain.push_back(fmt::format("async checkpointing (--checkpoint async): {:.1f} days ({:+.2f})", *f.days_with_async,
                               *f.days_with_async - f.days_with_failures));
  if (f.storage_speedup_for_a_day)
    gain.push_back(fmt::format("storage {:.1f}x faster gains a day", *f.storage_speedup_for_a_day));
  else
    gain.push_back(fmt::format("faster storage cannot gain a day (instant storage: {:.1f} days; the restart's "
                               "relaunch and warm-up remain)",
                               f.days_with_instant_storage));
  for (std::size_t i = 0; i < gain.size(); ++i)
    fmt::print("  {:<15} {}\n", i == 0 ? "to gain a day" : "", gain[i]);
  for (const auto& n : g.notes) fmt::print("  note: {}\n", n);
}

int run_capacity(const Options& o) {
  const CapacityRequest rq = capacity_request(o);
  const CapacityReport r = plan_capacity(rq);
  if (o.json) {
    print_json(o, rq, r);
    return answered(r, rq) ? 0 : 3;
  }
  print_table(o, rq, r);
  for (const auto& x : r.rows)
    if (x.answer && x.feasible && x.failures.priced) print_failures(o, rq, x);
  for (const auto& n : r.notes) fmt::print("note: {}\n", n);
  if (!answered(r, rq)) {
    fmt::print(stderr, "meshplan: capacity: no answer: {}\n",
               r.notes.empty() ? std::string("no plan fits on any cluster") : r.notes.back());
    return 3;
  }
  return 0;
}

}  // namespace

Command add_capacity_command(CLI::App& root) {
  auto o = std::make_shared<Options>();
  Command c;
  c.app = root.add_subcommand(
      "capacity",
      "How many GPUs, days, GPU-hours and how much money a training run of --tokens needs: with --deadline, the "
      "fewest GPUs (whole nodes, doubling) that finish in time; with --gpus, the days at that count. Each row uses "
      "the best plan `meshplan plan` finds at that GPU count (a small simulate budget for speed).");
  add_capacity_options(*c.app, *o);
  c.run = [o] { return run_capacity(*o); };
  return c;
}

}  // namespace meshplan::cli
