#!/usr/bin/env python3
"""Writes the fixture training logs (torchtitan.log, composer.log, megatron.log) for the fitting tests.

The line formats are the runtimes' own (torchtitan components/metrics.py; Composer's console
logger; Megatron-LM training.py and arguments.py). The numbers are NOT measurements: they are what
meshplan predicts for each run's config on an h100-sxm-96gb profile whose fitted parameters were
moved (element-wise fraction 0.60 -> 0.72, sustained clock fraction 0.90 -> 0.82), so a fit of the
shipped profile to these logs has a known answer. The first steps are slower (warm-up), the steady
ones scatter +-0.3 % around the prediction with the prediction as their median.

    python3 tests/report/data/logs/make_logs.py [BUILD/meshplan]
"""
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

here = Path(__file__).resolve().parent
root = here.parents[3]
meshplan = sys.argv[1] if len(sys.argv) > 1 else str(root / "build" / "meshplan")

text = (root / "hardware_profiles" / "h100-sxm-96gb.toml").read_text()
hbm = float(re.search(r"(?m)^hbm_efficiency\s*=\s*([0-9.]+)", text).group(1))
text = re.sub(r'(?m)^name\s*=\s*"[^"]*"', 'name = "h100-moved"', text, count=1)
text = re.sub(r"(?m)^elementwise_efficiency\s*=\s*[0-9.]+", f"elementwise_efficiency = {0.72 * hbm:.6f}", text, count=1)
text = re.sub(r"(?m)^sustained_clock_fraction\s*=\s*[0-9.]+", "sustained_clock_fraction = 0.82", text, count=1)
tmp = Path(tempfile.mkdtemp()) / "h100-moved.toml"
tmp.write_text(text)

runs = {
    "torchtitan": here / "torchtitan-llama3.1-8b.toml",
    "composer": root / "plans" / "examples" / "mpt-7b-8gpu-pure-ac.yaml",
    "megatron": here / "megatron-llama3.1-8b-tp2.args",
}
tps = {}
for name, cfg in runs.items():
    out = subprocess.run([meshplan, "simulate", "--config", str(cfg), "--cluster", str(tmp), "--gpus", "8", "--json"],
                         check=True, capture_output=True, text=True).stdout
    tps[name] = json.loads(out)["tokens_per_s_per_gpu"]

# Warm-up factors of the first two records, then six steady ones around the prediction.
warm = [0.42, 0.93]
steady = [0.997, 1.002, 0.999, 1.001, 1.003, 0.998]

lines = ["[rank0]:[titan] 2025-06-02 10:00:01,002 - root - INFO - Building 1-D device mesh with ['dp_shard'], [8]"]
for i, f in enumerate(warm + steady):
    step = 10 * (i + 1)
    lines.append(f"[rank0]:[titan] 2025-06-02 10:{i + 1:02d}:00,000 - root - INFO - \x1b[31mstep: {step:2d}  "
                 f"\x1b[32mloss:  {9.1 - 0.1 * i:.4f}  \x1b[33mmemory: 61.42GiB(77.58%)  "
                 f"\x1b[34mtps: {tps['torchtitan'] * f:,.0f}  \x1b[35mtflops: {tps['torchtitan'] * f * 6.0e-3 * 8.03:.2f}  "
                 f"\x1b[39mmfu: 31.20%\x1b[39m")
(here / "torchtitan.log").write_text("\n".join(lines) + "\n")

lines = []
for i, f in enumerate(warm + steady):
    batch = 100 * (i + 1)
    lines += [f"[batch={batch}/800]:", f"\t Train time/batch: {batch - 1}",
              f"\t Train throughput/batches_per_sec: {tps['composer'] * f * 8 / (2048 * 16):.4f}",
              f"\t Train throughput/device/tokens_per_sec: {tps['composer'] * f:.1f}",
              "\t Train memory/peak_allocated_mem: 61.23", "\t Train memory/peak_reserved_mem: 70.02"]
(here / "composer.log").write_text("\n".join(lines) + "\n")

gbs, seq, world = 32, 8192, 8
lines = ["using world size: 8, data-parallel size: 4, context-parallel size: 1, tensor-model-parallel size: 2, "
         "pipeline-model-parallel size: 1"]
for i, f in enumerate(warm + steady):
    it = 10 * (i + 1)
    ms = gbs * seq / (tps["megatron"] * f * world) * 1000
    lines.append(f" [2025-04-13 23:{i + 10:02d}:12] iteration {it:8d}/     800 | consumed samples: {it * gbs:12d} | "
                 f"elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): 401.2 | "
                 f"learning rate: 3.000000E-04 | global batch size: {gbs:5d} | lm loss: {7.4 - 0.1 * i:.6E} | "
                 f"loss scale: 1.0 | grad norm: 2.918 | number of skipped iterations:   0 | number of nan iterations:   0 |")
    if i == 0:
        lines.append("[Rank 0] (after 10 iterations) memory (MB) | allocated: 30123.5 | max allocated: 52311.2 | "
                     "reserved: 58000.0 | max reserved: 58000.0")
(here / "megatron.log").write_text("\n".join(lines) + "\n")
print(json.dumps(tps))
