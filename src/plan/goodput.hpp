#pragma once
// Goodput of a long training run: how often it is interrupted (per-component failure rates of the
// profile's [reliability] table, scaled by the GPUs, NICs and nodes the job holds), what a
// checkpoint and a restart cost, the Young/Daly checkpoint interval, and the fraction of
// wall-clock time that advances training. Pure functions; the model and its sources are in
// docs/goodput.md.
#include <cstdint>
#include <string>
#include <vector>

#include "spec/cluster_spec.hpp"

namespace meshplan {

struct ComponentRate {
  std::string component;              // "gpu", "hbm", "nic", "switch", "host", "software"
  double interruptions_per_s = 0;     // for the whole job
};

struct JobInterruptions {
  std::vector<ComponentRate> unexpected;   // by component
  double unexpected_per_s = 0;             // sum of `unexpected`
  double planned_per_s = 0;                // maintenance: the job checkpoints, then stops
  double mtbi_seconds = 0;                 // mean time between unexpected interruptions (inf if none)
};

// Job-level interruption rates on `gpus` GPUs: each component's per-unit rate times the units
// the job holds (GPUs, gpus x nics_per_node / gpus_per_node NICs, whole nodes). Needs
// c.reliability.present.
JobInterruptions job_interruptions(const ClusterSpec& c, std::int64_t gpus);

enum class CheckpointMode { sync, async };

struct CheckpointCost {
  double state_bytes_per_rank = 0;     // what one rank saves (params + optimizer state)
  double state_bytes_per_node = 0;
  double copy_seconds = 0;             // device-to-host copy of one rank's shard
  double blocking_seconds = 0;         // training pauses this long per checkpoint
  double write_seconds = 0;            // until the checkpoint is durable on storage
  double load_seconds = 0;             // reading it back on restart
};

// sync: the GPU copies its shard to the host and then the node writes to storage, training
// paused throughout (copy + write). async (torchtitan async_mode, Megatron --async-save): only
// the device-to-host copy blocks; the write runs behind training.
CheckpointCost checkpoint_cost(double state_bytes_per_rank, const ClusterSpec& c, CheckpointMode mode);

// relaunch + load + warm-up.
double restart_seconds(const ClusterSpec& c, const CheckpointCost& ckpt);

// Young (1974): the interval of useful work between checkpoints that minimises first-order
// waste C / tau + tau / (2 M): tau = sqrt(2 C M).
double young_daly_interval_seconds(double checkpoint_seconds, double mtbi_seconds);

// The fraction of wall-clock time that advances training, for work segments of `interval_s`,
// each followed by a blocking checkpoint of `checkpoint_s`, unexpected interruptions at the
// Poisson rate 1/mtbi_s that each cost the partial segment plus `restart_s` (the expectation of
// the renewal process, exact for exponential failure times that spare the restart itself), and
// planned interruptions at `planned_per_s` that each cost `planned_cost_s` without losing work.
double goodput_fraction(double interval_s, double checkpoint_s, double restart_s, double mtbi_s,
                        double planned_per_s = 0, double planned_cost_s = 0);

struct GoodputInputs {
  JobInterruptions interruptions;
  CheckpointCost checkpoint;
  double restart_s = 0;
  CheckpointMode mode = CheckpointMode::sync;
  double step_time_s = 0;
  double ideal_run_seconds = 0;        // the whole run without failures
  double interval_override_s = 0;      // > 0: use this interval instead of Young/Daly's
};

struct Goodput {
  double interval_s = 0;               // useful work between checkpoints, whole steps
  std::int64_t interval_steps = 0;
  double young_daly_interval_s = 0;    // before rounding to whole steps and clamping
  double lost_per_interruption_s = 0;  // first order: half a segment + restart (+ in-flight write)
  double checkpoint_overhead_fraction = 0;  // blocking / (interval + blocking)
  double goodput_fraction = 0;
  double expected_interruptions = 0;   // unexpected, over the run with failures
  double expected_planned = 0;
  double run_seconds = 0;              // with failures
  std::vector<std::string> notes;
};

// Young/Daly's interval in whole steps (at least one; an async save no shorter than its write)
// for a run of unknown length: what `meshplan plan` writes into the emitted config.
std::int64_t young_daly_interval_steps(const JobInterruptions& j, const CheckpointCost& k, CheckpointMode mode,
                                       double step_time_s);

// The interval (Young/Daly unless overridden, rounded to whole steps, no shorter than an async
// write and no longer than the run) and the resulting goodput. Throws InputError when the
// override is longer than the run or not positive.
Goodput plan_goodput(const GoodputInputs& in);

}  // namespace meshplan
