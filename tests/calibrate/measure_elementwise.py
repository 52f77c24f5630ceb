#!/usr/bin/env python3
"""Element-wise, normalization and unfused-attention kernels on one GPU, by size, through PyTorch.

The memory-bound kernels eager PyTorch and Megatron launch between the GEMMs of a block: what they
achieve of the HBM copy rate, and how that falls as a kernel gets small (a block of hidden 1024
launches kernels half the size of hidden 2048's). Each op is timed on activations of `tokens` rows
of `hidden` values in bf16, over the sizes a training step has (1 Mi to 256 Mi elements), and on
the score matrices of unfused attention (batch x heads rows of s x s).

  add          x + y                                reads 2, writes 1 element
  gelu         F.gelu (erf), gelu_tanh              reads 1, writes 1
  gelu_bwd     aten.gelu_backward                   reads 2, writes 1
  dropout      aten.native_dropout p = 0.1          reads 1, writes 1 + a 1-byte mask
  dropout_bwd  aten.native_dropout_backward         reads 1 + mask, writes 1
  layernorm    F.layer_norm with weight and bias    reads 1, writes 1 (+ fp32 mean, rstd per row)
  layernorm_bwd aten.native_layer_norm_backward     reads 2, writes 1 (+ the weight and bias grads)
  rmsnorm      F.rms_norm with weight               reads 1, writes 1
  cast_up      bf16 -> fp32 copy                    2 + 4 bytes per element
  cast_down    fp32 -> bf16 copy                    4 + 2 bytes per element
  softmax      softmax over the last dim of scores  reads 1, writes 1
  softmax_bwd  aten._softmax_backward_data          reads 2, writes 1
  bmm_qk       torch.baddbmm(beta 0) Q K^T          FLOPs 2 s^2 d per head; writes s^2
  bmm_pv       torch.bmm P V                        FLOPs 2 s^2 d per head; reads s^2

GPU time only: each op is captured 20 times in a CUDA graph, the graph replayed between CUDA events
(median of 5), so the launch is not in the figure; inputs stay in L2 where they fit, as a kernel's
input does when the kernel before it has just written it.

    python3 tests/calibrate/measure_elementwise.py OUT.csv
Rows: series,op,dtype,rows,width,elements,bytes,flops,seconds (seconds per kernel).
"""
import sys
import time

import torch
import torch.nn.functional as F

from cuda_graph_time import graph_time

dev = torch.device("cuda")
out = open(sys.argv[1], "w", buffering=1)
out.write("series,op,dtype,rows,width,elements,bytes,flops,seconds\n")
t_start = time.time()
E = 2  # bf16 bytes


def note(msg):
    print(f"[{time.time() - t_start:6.1f} s] {msg}", flush=True)


def row(series, op, rows, width, elements, nbytes, flops, seconds):
    out.write(f"{series},{op},bf16,{rows},{width},{elements},{nbytes:.6g},{flops:.6g},{seconds:.6e}\n")


def section(name, fn):
    note(f"{name} ...")
    try:
        fn()
    except Exception as e:  # one series failing must not lose the others
        print(f"{name} failed: {type(e).__name__}: {e}", flush=True)
        out.write(f"# {name} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}\n")


def activation_ops(rows, width):
    n = rows * width
    x = torch.randn(rows, width, device=dev, dtype=torch.bfloat16)
    y = torch.randn_like(x)
    z = torch.empty_like(x)
    w = torch.randn(width, device=dev, dtype=torch.bfloat16)
    b = torch.randn_like(w)
    xf = torch.empty(rows, width, device=dev, dtype=torch.float32)
    xf.copy_(x)
    ops = []
    ops.append(("add", 3 * E * n, lambda: torch.add(x, y, out=z)))
    ops.append(("gelu", 2 * E * n, lambda: F.gelu(x)))
    ops.append(("gelu_tanh", 2 * E * n, lambda: F.gelu(x, approximate="tanh")))
    ops.append(("gelu_bwd", 3 * E * n, lambda: torch.ops.aten.gelu_backward(y, x)))
    _, mask = torch.ops.aten.native_dropout(x, 0.1, True)
    ops.append(("dropout", (2 * E + 1) * n, lambda: torch.ops.aten.native_dropout(x, 0.1, True)))
    ops.append(("dropout_bwd", (2 * E + 1) * n, lambda: torch.ops.aten.native_dropout_backward(y, mask, 1 / 0.9)))
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [width], w, b, 1e-5)
    ops.append(("layernorm", 2 * E * n, lambda: F.layer_norm(x, (width,), w, b)))
    ops.append(("layernorm_bwd", 3 * E * n,
                lambda: torch.ops.aten.native_layer_norm_backward(y, x, [width], mean, rstd, w, b, [True, True, True])))
    if hasattr(F, "rms_norm"):
        ops.append(("rmsnorm", 2 * E * n, lambda: F.rms_norm(x, (width,), w)))
    ops.append(("cast_up", 6 * n, lambda: xf.copy_(x)))
    ops.append(("cast_down", 6 * n, lambda: z.copy_(xf)))
    for op, nbytes, fn in ops:
        try:
            row("activation", op, rows, width, n, nbytes, 0, graph_time(fn))
        except Exception as e:
            out.write(f"# activation {op} {rows}x{width} failed: {type(e).__name__}\n")


def activations():
    for width in [1024, 2048, 4096, 8192]:
        for rows in [256, 1024, 2048, 4096, 8192, 16384, 32768]:
            if rows * width <= (1 << 28):
                activation_ops(rows, width)


def scores():
    """Unfused attention as Megatron-DeepSpeed runs it without flash attention."""
    for seq in [512, 1024, 2048]:
        for head_dim in [64, 128]:
            for bh in [8, 16, 32, 64, 128]:
                if bh * seq * seq > (1 << 28):
                    continue
                q = torch.randn(bh, seq, head_dim, device=dev, dtype=torch.bfloat16)
                k = torch.randn(bh, head_dim, seq, device=dev, dtype=torch.bfloat16)
                v = torch.randn(bh, seq, head_dim, device=dev, dtype=torch.bfloat16)
                s = torch.empty(bh, seq, seq, device=dev, dtype=torch.bfloat16)
                n = bh * seq * seq
                flops = 2.0 * n * head_dim
                t = graph_time(lambda: torch.baddbmm(s, q, k, beta=0.0, alpha=0.125, out=s))
                row("scores", f"bmm_qk_d{head_dim}", bh, seq, n, E * (n + 2 * bh * seq * head_dim), flops, t)
                p = torch.softmax(s.float(), dim=-1).to(torch.bfloat16)
                o = torch.empty_like(v)
                t = graph_time(lambda: torch.bmm(p, v, out=o))
                row("scores", f"bmm_pv_d{head_dim}", bh, seq, n, E * (n + 2 * bh * seq * head_dim), flops, t)
                if head_dim == 64:
                    t = graph_time(lambda: torch.softmax(s, dim=-1))
                    row("scores", "softmax", bh, seq, n, 2 * E * n, 0, t)
                    t = graph_time(lambda: torch.ops.aten._softmax_backward_data(p, p, -1, torch.bfloat16))
                    row("scores", "softmax_bwd", bh, seq, n, 3 * E * n, 0, t)
                    t = graph_time(lambda: torch.ops.aten.native_dropout(p, 0.1, True))
                    row("scores", "dropout", bh, seq, n, (2 * E + 1) * n, 0, t)
                del q, k, v, s, p, o


if __name__ == "__main__":
    props = torch.cuda.get_device_properties(0)
    out.write(f"# torch {torch.__version__} cuda {torch.version.cuda} device {props.name} sms {props.multi_processor_count}\n")
    for name, fn in [("activations", activations), ("scores", scores)]:
        section(name, fn)
    note("done")
