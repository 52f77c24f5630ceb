// meshplan simulate: how fast will this run, and where does the time go?
#include <fmt/format.h>

#include <fstream>
#include <memory>
#include <optional>

#include "cli/command.hpp"
#include "import/training_log.hpp"
#include "cli/output_path.hpp"
#include "cli/flag_ranges.hpp"
#include "spec/atomic_file.hpp"
#include "cli/run_inputs.hpp"
#include "cli/run_source.hpp"
#include "report/diagnose.hpp"
#include "report/chrome_trace.hpp"
#include "report/simulate_report.hpp"
#include "sim/gpu_speeds.hpp"
#include "sim/rank_classes.hpp"
#include "sim/step_simulator.hpp"
#include "spec/error.hpp"
#include "spec/limits.hpp"

namespace meshplan::cli {

namespace {

// FRACTION:SPEED against the flag table before parse_straggler reads it, so that 1e-300 or nan is
// refused with the range rather than simulated.
void check_straggler(const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) return;  // parse_straggler says what the form is
  const std::pair<std::string, const char*> parts[] = {{text.substr(0, colon), "FRACTION"},
                                                       {text.substr(colon + 1), "SPEED"}};
  for (const auto& [part, what] : parts) {
    const std::string why = check_text(flag_range("simulate", std::string("--straggler ") + what), part);
    if (!why.empty())
      throw InputError("", "--straggler", fmt::format("{} {}", what == std::string_view("SPEED") ? "speed" : "fraction", why));
  }
}

struct SimulateOptions {
  RunInputOptions in;
  bool json = false;
  bool full = false;
  bool exact = false;
  std::string trace;
  double observed_tokens_per_s = 0;  // per GPU; > 0: explain the gap (report/diagnose.hpp)
  std::string log;                   // the run's training log: its steady throughput is the observation
  std::string straggler, gpu_speeds;
  std::uint64_t seed = 1;
};

void add_simulate_options(CLI::App& app, SimulateOptions& o) {
  add_run_input_options(app, o.in);
  add_nccl_version_option(app, o.in.nccl_version);
  app.add_flag("--json", o.json, "machine-readable output");
  app.add_option("--trace", o.trace, "write a Chrome trace-event JSON (open in ui.perfetto.dev)");
  app.add_flag("--full", o.full,
               fmt::format("simulate every rank with its own links, streams and host thread instead of one "
                           "representative rank per pipeline stage; ranks that provably run alike (same speeds, "
                           "groups of the same kinds of rank) are simulated once, up to {:.0f} million engine tasks "
                           "(the step's ops x the distinct ranks per stage)",
                           static_cast<double>(limits::kMaxFullSimTasks) / 1e6));
  app.add_flag("--exact", o.exact,
               "simulate every micro-batch; by default a long step is simulated at three shorter lengths a "
               "pipeline period apart and, where every figure moves alike each period, extrapolated "
               "(docs/design-notes.md, \"Periodic steady state\"; --trace always simulates every event)");
  app.add_option("--observed-tokens-per-s", o.observed_tokens_per_s,
                 "tokens/s per GPU the real run achieved: rank causes of the gap, simulate fixes")
      ->check(in_range("simulate", "--observed-tokens-per-s"));
  app.add_option("--log", o.log,
                 "the run's own training log (Megatron-LM, torchtitan or Composer): the median of its steady steps "
                 "is the observed tokens/s (docs/validation.md \"Training logs\")")
      ->excludes("--observed-tokens-per-s");
  auto* st = app.add_option("--straggler", o.straggler,
                            "with --full: FRACTION:SPEED, e.g. 0.01:0.9 = 1 % of the GPUs (drawn with --seed) run "
                            "compute at 0.9x; reports the step time with and without them");
  auto* gs = app.add_option("--gpu-speeds", o.gpu_speeds,
                            "with --full: a file of 'RANK FACTOR' lines (unlisted ranks at 1), e.g. measured per-GPU "
                            "GEMM rates over the fleet median");
  st->excludes(gs);
  app.add_option("--seed", o.seed, "seed of the --straggler draw (same seed, same ranks)")
      ->capture_default_str()
      ->check(in_range("simulate", "--seed"));
}

// Under --full: how many ranks stand for the cluster's (one per class of ranks that run alike, per stage).
struct FullRanks {
  std::int64_t gpus = 0;
  std::int64_t classes = 0;
  int stages = 1;
  std::int64_t ops = 0;  // of the lowered step, every stage's
  std::int64_t simulated() const { return classes * stages; }
  std::int64_t tasks() const { return classes * ops; }  // each op once per distinct rank of its stage
};

// With per-GPU speeds: the step without them, the rank that sets the pace and how many are slow.
struct Stragglers {
  StepResult ideal;
  std::int64_t pace = 0;
  std::int64_t n_slow = 0;
  double pace_speed = 1;
};

// The simulation asked for; with --straggler / --gpu-speeds also the same step at full speed.
SimOptions simulation_options(const SimulateOptions& o, const RunInputs& in, std::optional<FullRanks>& full,
                              std::optional<Stragglers>& stragglers) {
  SimOptions so;
  so.keep_timeline = !o.trace.empty();
  so.full = o.full;
  so.exact = o.exact;
  // One step simulated: both cores on its fold, except under --full, where two of its steps at
  // once would hold 1.6x the memory (994 against 629 MB for the 70B bundle on 256 GPUs).
  so.parallel_fold = !o.full;
  if (!o.straggler.empty()) check_straggler(o.straggler);
  const bool speeds = !o.straggler.empty() || !o.gpu_speeds.empty();
  if (speeds && !o.full)
    throw InputError("", o.straggler.empty() ? "--gpu-speeds" : "--straggler",
                     "per-GPU speeds need --full (every rank simulated at its own speed)");
  if (speeds)
    so.rank_speed = o.straggler.empty() ? load_gpu_speeds(o.gpu_speeds, in.run.n_gpus)
                                        : sample_straggler_speeds(in.run.n_gpus, parse_straggler(o.straggler), o.seed);
  if (o.full) {
    const Mesh& mesh = in.run.plan.mesh;
    const auto ops = lower_step(in.run.model, in.run.plan, in.run.job, LowerOptions{.op_names = false}).ops.size();
    const FullRanks f{in.run.n_gpus, static_cast<std::int64_t>(rank_classes(mesh, so.rank_speed).size()),
                      std::max(1, mesh.pp), static_cast<std::int64_t>(ops)};
    if (f.tasks() > limits::kMaxFullSimTasks)
      throw InputError("", "--full",
                       fmt::format("the {} GPUs' speeds leave {} distinct ranks per stage x {} stages to simulate: {} "
                                   "ops x {} = {:.1f} million engine tasks, over the limit of {:.0f} million (about 2 GiB; "
                                   "docs/limits.md); fewer distinct speeds, slow GPUs in fewer stages or fewer "
                                   "micro-batches simulate fewer",
                                   f.gpus, f.classes, f.stages, f.ops, f.classes, static_cast<double>(f.tasks()) / 1e6,
                                   static_cast<double>(limits::kMaxFullSimTasks) / 1e6));
    full = f;
  }
  if (!speeds) return so;
  SimOptions plain = so;
  plain.rank_speed.clear();
  plain.keep_timeline = false;
  Stragglers s;
  s.ideal = simulate_step(in.run.model, in.run.plan, in.run.job, in.cluster, plain).result;
  s.pace = slowest_rank(so.rank_speed);
  for (double v : so.rank_speed) s.n_slow += v < 1 ? 1 : 0;
  s.pace_speed = so.rank_speed[static_cast<std::size_t>(s.pace)];
  stragglers = s;
  return so;
}

void print_simulate(const SimulateOptions& o, const RunInputs& in, const StepResult& result,
                    const std::optional<Diagnosis>& gap, const std::optional<FullRanks>& full,
                    const std::optional<Stragglers>& slow) {
  if (o.json) {
    nlohmann::json j = simulate_json(in.run, in.cluster, result);
    if (gap) j["diagnosis"] = diagnosis_json(*gap);
    if (full) {
      j["full_rank_classes"] = full->classes;
      j["full_simulated_ranks"] = full->simulated();
    }
    if (slow) {
      j["step_time_ideal_s"] = slow->ideal.step_time_s;
      j["straggler_slowdown_fraction"] = result.step_time_s / slow->ideal.step_time_s - 1;
      j["pace_rank"] = slow->pace;
      j["pace_rank_speed"] = slow->pace_speed;
      j["slow_ranks"] = slow->n_slow;
    }
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("{}", simulate_text(in.run, in.cluster, result));
  if (gap) fmt::print("{}", diagnosis_text(*gap));
  if (full)
    fmt::print("\n--full: {} GPUs simulated as {} distinct rank{} per stage x {} stage{} (ranks of equal speeds in groups "
               "of the same kinds of rank run alike)\n",
               full->gpus, full->classes, full->classes == 1 ? "" : "s", full->stages, full->stages == 1 ? "" : "s");
  if (slow)
    fmt::print("\nper-GPU speeds: {} of {} ranks below 1; rank {} (speed {:g}) sets the pace of the synchronous step\n"
               "  step time {:.4f} s with them, {:.4f} s without ({:+.2f} %)\n",
               slow->n_slow, in.run.n_gpus, slow->pace, slow->pace_speed, result.step_time_s, slow->ideal.step_time_s,
               100 * (result.step_time_s / slow->ideal.step_time_s - 1));
}

// The steady tokens/s per GPU of `log`, which must be this run's: a world size or global batch it
// states that differs from the config's is an error naming the log's line.
double logged_tokens_per_s(const std::string& log_path, const RunConfig& run) {
  const TrainingLog log = read_training_log(log_path);
  if (log.world_size && *log.world_size != run.n_gpus)
    throw InputError(log.file, fmt::format("line {}", log.world_size_line),
                     fmt::format("the log ran on {} GPUs, the simulated run has {}", *log.world_size, run.n_gpus));
  for (const LoggedStep& s : log.steps)
    if (s.global_batch && *s.global_batch != run.job.global_batch)
      throw InputError(log.file, fmt::format("line {}", s.line),
                       fmt::format("global batch size {} in the log, {} simulated", *s.global_batch, run.job.global_batch));
  return steady_throughput(log, run.job.seq_len, run.n_gpus).tokens_per_s_per_gpu;
}

int run_simulate(const SimulateOptions& o) {
  const RunInputs in = load_run_inputs(o.in);
  check_output_path(o.trace, "--trace");
  std::optional<FullRanks> full;
  std::optional<Stragglers> stragglers;
  const SimOptions so = simulation_options(o, in, full, stragglers);
  const SimulatedStep step = simulate_step(in.run.model, in.run.plan, in.run.job, in.cluster, so);
  if (!o.trace.empty()) {
    write_file_atomic(o.trace, chrome_trace_text(step.program, step.timings, step.host_timings), "--trace");
  }
  std::optional<Diagnosis> gap;
  const double observed = o.log.empty() ? o.observed_tokens_per_s : logged_tokens_per_s(o.log, in.run);
  if (observed > 0) gap = diagnose_gap(run_source(o.in), in.run, in.cluster, step.result, observed);
  print_simulate(o, in, step.result, gap, full, stragglers);
  return simulated_fit(in.cluster, step.result).fits ? 0 : 3;  // 3: does not fit, as `memory`
}

}  // namespace

Command add_simulate_command(CLI::App& root) {
  auto o = std::make_shared<SimulateOptions>();
  Command c;
  c.app = root.add_subcommand(
      "simulate",
      "Discrete-event simulation of one optimizer step: step time, tokens/s (global and per GPU), "
      "MFU/HFU, a breakdown that adds up to the step time (compute, recompute, exposed communication "
      "by kind, pipeline bubble, optimizer, offload stalls) and peak memory per stage. Exit 3 when the simulated peak "
      "exceeds the GPU's memory (`fits` in --json), as `memory`. An MFU above the highest that published runs "
      "of the same runtime, GPU, model kind and recipe reached is named (`beyond_validated_mfu`; "
      "docs/validation.md, Validated MFU envelope).");
  add_simulate_options(*c.app, *o);
  c.run = [o] { return run_simulate(*o); };
  return c;
}

}  // namespace meshplan::cli
