#!/usr/bin/env bash
# Refits every shipped fitted value from the dev sets and writes it into the hardware profiles that
# declare it fitted, or with --check fails (exit 1) when a shipped value differs from the fit by
# more than 0.5 % (the bounds test checks the same from C++: tests/report/test_validation_bounds.cpp).
#
#   tests/regen_fits.sh [--check]     (binary: $MESHPLAN_BIN, else build/meshplan;
#                                      dev sets: $MESHPLAN_SHARED_DIR/validation, else ../shared/validation)
#
# The fits (bounded Levenberg-Marquardt on the squared log error of every run's throughput;
# docs/validation.md): `meshplan calibrate --runs dev.csv --runs dev-vtrain.csv --runs dev-moe.csv
# --params elementwise_fraction,deepspeed_op_factor`, `meshplan calibrate --runs memory.csv --params
# sustained_clock_fraction` and `meshplan calibrate --runs dev-moe.csv --params moe_router_load_cv`
# (only MoE runs with the trained router's dropless routing move with it). The NCCL tables' pipeline
# ramp is fitted to a committed nccl-tests series, not to runs (a minimax fit of the busbw error;
# docs/collectives.md "Pipeline ramp"): `meshplan calibrate --nccl-tests
# hardware_profiles/nccl/series/azure-nd-a100-v4-all-reduce.csv`. cuBLAS's stream-K threshold is fitted
# to the GEMMs the lent H200 timed by shape (least squared log error over those whose schedule it
# sets; docs/compute.md): `meshplan calibrate --gemm-shapes tests/cost/measured_h200_shapes.csv
# --cluster h200-141gb`. The AWS p6-b200 profile's EFA transport latency is fitted to a committed
# 4-node nccl-tests series the same way as the ramp (minimax; docs/collectives.md "Transport
# latency"): `meshplan calibrate --nccl-tests hardware_profiles/nccl/series/aws-p6-b200-all-reduce.csv
# --transport-latency`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bin="${MESHPLAN_BIN:-$root/build/meshplan}"
shared="${MESHPLAN_SHARED_DIR:-$root/../shared}"
check=0
[[ "${1:-}" == "--check" ]] && check=1
[[ -x "$bin" ]] || { echo "regen_fits: no meshplan binary at $bin (set MESHPLAN_BIN)" >&2; exit 2; }
runs=()
for f in dev.csv dev-vtrain.csv dev-moe.csv; do
  [[ -f "$shared/validation/$f" ]] || { echo "regen_fits: $shared/validation/$f not found (set MESHPLAN_SHARED_DIR)" >&2; exit 2; }
  runs+=(--runs "$shared/validation/$f")
done
fit_json="$(mktemp)"
clock_json="$(mktemp)"
moe_json="$(mktemp)"
ramp_json="$(mktemp)"
stream_k_json="$(mktemp)"
transport_json="$(mktemp)"
trap 'rm -f "$fit_json" "$clock_json" "$moe_json" "$ramp_json" "$stream_k_json" "$transport_json"' EXIT
# The element-wise fraction and the Megatron-DeepSpeed host factor, jointly: both move every dev
# set's small-model rows (docs/validation.md "Fitted parameters").
"$bin" calibrate "${runs[@]}" --params elementwise_fraction,deepspeed_op_factor --json > "$fit_json"
# The sustained clock of the one profile that declares it fitted (the 500 W H100 96GB): only
# memory.csv has runs on it (torchtitan PR #165's five compiled Llama-7B runs and torchao's three
# float8-README Llama-3-8B runs, which validate places on Meta's fleet of this part).
[[ -f "$shared/validation/memory.csv" ]] || { echo "regen_fits: $shared/validation/memory.csv not found" >&2; exit 2; }
"$bin" calibrate --runs "$shared/validation/memory.csv" --params sustained_clock_fraction --json > "$clock_json"
# The trained MoE router's load spread: only dev-moe.csv's dropless runs with the natural router
# move with it.
"$bin" calibrate --runs "$shared/validation/dev-moe.csv" --params moe_router_load_cv --json > "$moe_json"
"$bin" calibrate --nccl-tests hardware_profiles/nccl/series/azure-nd-a100-v4-all-reduce.csv --json > "$ramp_json"
"$bin" calibrate --gemm-shapes tests/cost/measured_h200_shapes.csv --cluster h200-141gb --json > "$stream_k_json"
"$bin" calibrate --nccl-tests hardware_profiles/nccl/series/aws-p6-b200-all-reduce.csv --transport-latency --json \
  > "$transport_json"
python3 - "$check" "$ramp_json" "$stream_k_json" "$transport_json" "$fit_json" "$clock_json" "$moe_json" <<'PY'
import json, re, sys, tomllib
from pathlib import Path

check = sys.argv[1] == "1"
stale = []
# The pipeline ramp of every shipped NCCL table whose [pipeline_ramp] sources are fitted.
ramp = json.load(open(sys.argv[2]))
for path in sorted(Path("hardware_profiles/nccl").glob("*.toml")):
    text = path.read_text()
    table = tomllib.loads(text)
    pr = table["pipeline_ramp"]
    tags = {"small_message_efficiency": pr["src"],
            "half_ramp_bytes": pr.get("key_src", {}).get("half_ramp_bytes", pr["src"])}
    for field, value, fmt in (("small_message_efficiency", ramp["small_message_efficiency"], "{:.3f}"),
                              ("half_ramp_bytes", ramp["half_ramp_bytes"], "{:.0f}")):
        if table["sources"][tags[field]].get("kind") != "fitted":
            continue
        if check:
            if abs(pr[field] - value) > 0.005 * abs(value):
                stale.append(f"{path}: pipeline_ramp.{field} = {pr[field]}, the fit gives {value:.4f}")
            continue
        text = re.sub(rf"(?m)^{field}\s*=\s*[0-9.eE+-]+", f"{field} = " + fmt.format(value), text, count=1)
    if not check:
        path.write_text(text)
print(f"regen_fits: pipeline ramp small_message_efficiency = {ramp['small_message_efficiency']:.4f}, "
      f"half_ramp_bytes = {ramp['half_ramp_bytes']:.0f} (largest busbw error {100 * ramp['max_abs_relative_error']:.2f} %, "
      f"{ramp['points_used']} points)")
stream_k = json.load(open(sys.argv[3]))
print(f"regen_fits: gemm_stream_k_min_saving = {stream_k['gemm_stream_k_min_saving']:.4f} "
      f"(interval {stream_k['interval'][0]:.4f}..{stream_k['interval'][1]:.4f}, {stream_k['points_used']} GEMMs)")
transport = json.load(open(sys.argv[4]))
print(f"regen_fits: {transport['cluster']} fabric.transport_latency_us = {transport['transport_latency_us']:.1f} "
      f"(largest busbw error {100 * transport['max_abs_relative_error']:.2f} %, {transport['points_used']} points)")
fit = {"parameters": [p for f in sys.argv[5:] for p in json.load(open(f))["parameters"]]}
values = {p["profile_key"]: p for p in fit["parameters"] if p["identifiable"]}
values["gpu.gemm_stream_k_min_saving"] = {"name": "gemm_stream_k_min_saving", "value": stream_k["gemm_stream_k_min_saving"]}
values["fabric.transport_latency_us"] = {"name": "transport_latency_us", "value": transport["transport_latency_us"]}
for path in sorted(Path("hardware_profiles").glob("*.toml")):
    if path.name == "aliases.toml":
        continue
    text = path.read_text()
    prof = tomllib.loads(text)
    gpu = prof.get("gpu", {})
    for key, p in values.items():
        section, field = key.split(".")
        tag = prof.get(section, {}).get("key_src", {}).get(field)
        if tag is None or prof["sources"].get(tag, {}).get("kind") != "fitted":
            continue
        value = p["value"] * gpu["hbm_efficiency"] if p["name"] == "elementwise_fraction" else p["value"]
        new = round(value, 3)
        old = prof[section][field]
        if check:
            if abs(old - value) > 0.005 * abs(value):
                stale.append(f"{path}: {key} = {old}, the fit gives {value:.4f}")
            continue
        # Replace the value inside its section only.
        head = re.search(rf"(?m)^\[{section}\]\s*$", text)
        nxt = re.search(r"(?m)^\[", text[head.end():])
        end = head.end() + (nxt.start() if nxt else len(text) - head.end())
        body = re.sub(rf"(?m)^{field}\s*=\s*[0-9.eE+-]+", f"{field} = {new}", text[head.end():end], count=1)
        text = text[:head.end()] + body + text[end:]
    if not check:
        path.write_text(text)
for p in fit["parameters"]:
    print(f"regen_fits: {p['name']} = {p['value']:.4f} (prior {p['prior']:.4f}, "
          f"{'identified' if p['identifiable'] else 'not identified'}, {p['runs']} runs)")
if stale:
    print("regen_fits: shipped fitted values differ from the fit (run tests/regen_fits.sh):\n  " + "\n  ".join(stale))
    sys.exit(1)
PY
