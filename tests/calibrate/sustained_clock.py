#!/usr/bin/env python3
"""Sustained vs burst GEMM rate on one GPU: what `sustained_clock_fraction` (docs/compute.md) means.

A bf16 8192^3 matmul loop runs for SECONDS (default 60); every 5 s it writes the achieved rate
and the SM clock and power nvidia-smi reads. The burst rate is the first window's (the GPU at its
boost clock, cool), the sustained rate the median of the last half's windows.
    python3 tests/calibrate/sustained_clock.py OUT.csv [SECONDS]
"""
import subprocess
import sys
import time

import torch

seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
n = 8192
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
flops = 2.0 * n ** 3
out = open(sys.argv[1], "w", buffering=1)
out.write("t_s,tflops,sm_clock_mhz,power_w,temp_c\n")
for _ in range(3):
    torch.mm(a, b, out=c)
torch.cuda.synchronize()
t0 = time.time()
rates = []
while time.time() - t0 < seconds:
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    w0 = time.time()
    e0.record()
    calls = 0
    while time.time() - w0 < 5.0:
        for _ in range(50):
            torch.mm(a, b, out=c)
        calls += 50
        torch.cuda.synchronize()
    e1.record()
    e1.synchronize()
    rate = flops * calls / (e0.elapsed_time(e1) * 1e-3) / 1e12
    q = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True).stdout.strip().split(", ")
    out.write(f"{time.time() - t0:.1f},{rate:.1f},{q[0]},{q[1]},{q[2]}\n")
    print(f"{time.time() - t0:5.1f} s  {rate:.1f} TFLOP/s  sm {q[0]} MHz  {q[1]} W  {q[2]} C", flush=True)
    rates.append(rate)
tail = sorted(rates[len(rates) // 2:])
print(f"burst {rates[0]:.1f}, sustained {tail[len(tail) // 2]:.1f} TFLOP/s, fraction {tail[len(tail) // 2] / rates[0]:.3f}")
