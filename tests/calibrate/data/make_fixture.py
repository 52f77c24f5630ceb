#!/usr/bin/env python3
"""Writes model_generated_h100.json: a small measurements file computed from KNOWN parameters with
the models meshplan fits (docs/calibration.md), not measured on any GPU. tests/calibrate checks
that `meshplan calibrate --fit` recovers these parameters from it.

    python3 tests/calibrate/data/make_fixture.py > tests/calibrate/data/model_generated_h100.json
"""
import json

KIB, MIB, GIB = 1024, 1024**2, 1024**3
BF16_PEAK, FP8_PEAK = 989.4e12, 1978.9e12   # hardware_profiles/h100-sxm-80gb.toml
PARAMS = {
    "gemm_bf16": {256: 0.05, 512: 0.18, 1024: 0.45, 2048: 0.70, 4096: 0.80, 8192: 0.81, 16384: 0.82},
    "gemm_fp8": {1024: 0.14, 2048: 0.51, 4096: 0.61, 8192: 0.65, 16384: 0.70},
    "hbm_copy": (4e-6, 2.95e12),        # latency s, bandwidth B/s (bytes = read + written)
    "hbm_triad": (4e-6, 3.0e12),
    "launch": (2.5e-6, 2.0e12),
    "h2d": (10e-6, 53e9),
    "d2h": (10e-6, 54e9),
    "all_reduce": (25e-6, 260e9),       # nccl-tests size / algbw
    "all_gather": (20e-6, 400e9),
    "interference": 0.15,
    "attention_tflops": {1024: 100.0, 2048: 150.0, 4096: 180.0, 8192: 200.0},
}


def line(p, b):
    return p[0] + b / p[1]


def main():
    m = {
        "schema": "meshplan-calibration", "schema_version": 1,
        "generator": "python3 tests/calibrate/data/make_fixture.py (model-generated from known parameters, NOT a measurement)",
        "created_utc": "", "host": "", "mode": "model",
        "device": {"name": "model-generated (H100 SXM parameters)", "compute_capability": "9.0", "sm_count": 132,
                   "memory_bytes": 80e9, "l2_bytes": 50 * MIB, "sm_clock_mhz": 1980, "memory_clock_mhz": 2619,
                   "driver_version": "", "cuda_runtime_version": "", "cublas_version": "", "nccl_version": "",
                   "gpus_per_node": 8, "nodes": 1, "world_size": 8},
        "gemm": [], "attention": [], "hbm": [], "launch": [], "host_copy": [], "collectives": [],
        "interference": [],
        "notes": ["model-generated test fixture; parameters in make_fixture.py PARAMS"],
    }
    for dtype, peak, table in (("bf16", BF16_PEAK, PARAMS["gemm_bf16"]), ("fp8", FP8_PEAK, PARAMS["gemm_fp8"])):
        for n, eff in table.items():
            m["gemm"].append({"m": n, "n": n, "k": n, "batch": 1, "dtype": dtype,
                              "seconds": 2.0 * n**3 / (eff * peak), "label": "grid"})
    for seq, tflops in PARAMS["attention_tflops"].items():
        batch, heads, hd = 16384 // seq, 16, 128
        fwd = 4.0 * batch * heads * seq * seq * hd * 0.5      # causal half, compute_cost attention_flops
        m["attention"].append({"kernel": "bgemm-softmax-proxy", "fused": False, "pass": "fwd+bwd", "dtype": "bf16",
                               "batch": batch, "heads": heads, "seq_len": seq, "head_dim": hd, "causal": True,
                               "seconds": 3.5 * fwd / (tflops * 1e12)})
    for size in (64 * MIB, 256 * MIB, GIB, 4 * GIB, 8 * GIB):
        m["hbm"].append({"kernel": "copy", "bytes": size, "seconds": line(PARAMS["hbm_copy"], size)})
        m["hbm"].append({"kernel": "triad", "bytes": size * 3 // 2, "seconds": line(PARAMS["hbm_triad"], size * 3 // 2)})
    for size in (2 * KIB, 8 * KIB, 32 * KIB, 128 * KIB, 512 * KIB, 2 * MIB):
        m["launch"].append({"kernel": "elementwise", "bytes": size, "seconds": line(PARAMS["launch"], size)})
    for size in (MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB, GIB):
        for d in ("h2d", "d2h"):
            m["host_copy"].append({"direction": d, "bytes": size, "seconds": line(PARAMS[d], size)})
    for op in ("all_reduce", "all_gather"):
        size = KIB
        while size <= 8 * GIB:
            m["collectives"].append({"op": op, "scope": "intra_node", "ranks": 8, "nodes": 1, "bytes": size,
                                     "seconds": line(PARAMS[op], size)})
            size *= 8
    for n in (4096, 8192):
        alone = 2.0 * n**3 / (PARAMS["gemm_bf16"][n] * BF16_PEAK)
        m["interference"].append({"m": n, "n": n, "k": n, "batch": 1, "dtype": "bf16", "alone_seconds": alone,
                                  "with_comm_seconds": alone * (1 + PARAMS["interference"]), "comm_op": "all_reduce",
                                  "comm_bytes": 256 * MIB, "comm_ranks": 8})
    print(json.dumps(m, indent=1))


if __name__ == "__main__":
    main()
