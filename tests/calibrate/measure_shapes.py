#!/usr/bin/env python3
"""Kernel timings by shape on one GPU, through PyTorch (the kernels the frameworks launch).

What `meshplan calibrate` (cuBLASLt, fixed shapes) does not cover: the shape effects issue 31
asks the compute model to explain.
  gemm_wave     bf16 M = 4096, K = 4096, N from 64 up: tiles over the SMs, the partial last wave
  gemm_square   bf16 M = N around the one-wave boundary, K = 4096
  gemm_shortk   bf16 M = N = 8192, K from 64 up: the K loop against the per-tile fixed cost
  gemm_layer    bf16 forward, dgrad and wgrad GEMMs of GPT blocks of hidden 1024 and 2048 (tp 1-8,
                1-8 sequences of 2048 tokens), as Megatron launches them
  grouped       torch._grouped_mm over experts (balanced and imbalanced token counts) and the
                sequential fallback (one torch.mm per expert), MoE widths of gpt-oss-120b,
                Qwen3-30B-A3B and Qwen3-235B-A22B
  fp8           torch._scaled_mm e4m3 tensorwise (one scale per operand) and rowwise (a scale per
                row of A and per column of B), with bf16 on the same Llama-3-8B shapes
  attention     scaled_dot_product_attention (flash backend), causal and full, fwd and fwd+bwd

GPU time only: each GEMM is captured 20 times in a CUDA graph and the graph replayed between CUDA
events (median of 5 replays), so launch overhead is not in the figure; the eager sequential
grouped series is also timed without a graph (host launches included). Operands stay in L2
where they fit, as in a training step's back-to-back GEMMs.

    python3 tests/calibrate/measure_shapes.py OUT.csv
Rows: series,label,dtype,m,n,k,groups,flops,seconds (seconds per kernel or per grouped call).
"""
import math
import sys
import time

import torch
import torch.nn.functional as F

from cuda_graph_time import REPLAYS, graph_time

dev = torch.device("cuda")
out = open(sys.argv[1], "w", buffering=1)
out.write("series,label,dtype,m,n,k,groups,flops,seconds\n")
t_start = time.time()


def note(msg):
    print(f"[{time.time() - t_start:6.1f} s] {msg}", flush=True)


def row(series, label, dtype, m, n, k, groups, flops, seconds):
    out.write(f"{series},{label},{dtype},{m},{n},{k},{groups},{flops:.6g},{seconds:.6e}\n")


def eager_time(fn, reps=10):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPLAYS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3 / reps)
    return sorted(times)[len(times) // 2]


def gemm(series, label, m, n, k, dtype=torch.bfloat16):
    a = torch.randn(m, k, device=dev, dtype=dtype)
    b = torch.randn(k, n, device=dev, dtype=dtype)
    c = torch.empty(m, n, device=dev, dtype=dtype)
    t = graph_time(lambda: torch.mm(a, b, out=c))
    row(series, label, "bf16", m, n, k, 1, 2.0 * m * n * k, t)


def section(name, fn):
    note(f"{name} ...")
    try:
        fn()
    except Exception as e:  # one series failing must not lose the others
        print(f"{name} failed: {type(e).__name__}: {e}", flush=True)
        out.write(f"# {name} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}\n")


def wave():
    for n in [64, 128, 192, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 2048, 3072, 4096]:
        gemm("gemm_wave", "m4096k4096", 4096, n, 4096)
    for mn in [1536, 1664, 1792, 1920, 2048, 2176, 2304, 2432, 2560, 2816, 3072, 3328, 3584]:
        gemm("gemm_square", "k4096", mn, mn, 4096)


def shortk():
    for k in [32, 64, 128, 256, 512, 1024, 2048, 4096]:
        gemm("gemm_shortk", "m8192n8192", 8192, 8192, k)


def layer():
    for hidden in [1024, 2048]:
        linears = {"qkv": (hidden, 3 * hidden, True), "proj": (hidden, hidden, False),
                   "fc1": (hidden, 4 * hidden, True), "fc2": (4 * hidden, hidden, False)}
        for tp in [1, 2, 4, 8]:
            for seqs in [1, 2, 4, 8]:
                tokens = 2048 * seqs
                for name, (din, dout, column) in linears.items():
                    i = din if column else din // tp
                    o = dout // tp if column else dout
                    lab = f"h{hidden}_tp{tp}_mb{seqs}_{name}"
                    gemm("gemm_layer", lab + "_fwd", tokens, o, i)
                    gemm("gemm_layer", lab + "_dgrad", tokens, i, o)
                    gemm("gemm_layer", lab + "_wgrad", o, i, tokens)


def grouped_counts(groups, per_expert, imbalanced):
    total = groups * per_expert
    if not imbalanced:
        return [per_expert] * groups
    # A deterministic skew: weights 1/(rank+1)^0.5, the shape of an untrained router's load.
    w = [1.0 / math.sqrt(r + 1) for r in range(groups)]
    s = sum(w)
    counts = [max(16, int(round(total * x / s / 16)) * 16) for x in w]
    counts[0] += total - sum(counts)
    return counts


def grouped():
    have = hasattr(torch, "_grouped_mm")
    widths = {"gptoss": (2880, 2880), "qwen30b": (2048, 768), "qwen235b": (4096, 1536)}
    for model, (hidden, ffn) in widths.items():
        for groups in [8, 16, 32]:
            for per_expert in [128, 256, 512, 1024, 2048]:
                for imb in [False, True]:
                    counts = grouped_counts(groups, per_expert, imb)
                    total = sum(counts)
                    offs = torch.tensor(list(itertools_accumulate(counts)), device=dev, dtype=torch.int32)
                    for proj, (k, n) in {"up": (hidden, 2 * ffn), "down": (ffn, hidden)}.items():
                        x = torch.randn(total, k, device=dev, dtype=torch.bfloat16)
                        w = torch.randn(groups, n, k, device=dev, dtype=torch.bfloat16).transpose(-2, -1)
                        flops = 2.0 * total * n * k
                        lab = f"{model}_{proj}_e{groups}_t{per_expert}_{'imb' if imb else 'bal'}"
                        if have:
                            t = graph_time(lambda: torch._grouped_mm(x, w, offs=offs))
                            row("grouped", lab, "bf16", total, n, k, groups, flops, t)
                        if imb or per_expert not in (256, 1024):
                            continue
                        chunks = list(torch.split(x, counts))
                        ws = [w[e] for e in range(groups)]

                        def seq():
                            for e in range(groups):
                                torch.mm(chunks[e], ws[e])
                        row("sequential_graph", lab, "bf16", total, n, k, groups, flops, graph_time(seq, reps=4))
                        row("sequential_eager", lab, "bf16", total, n, k, groups, flops, eager_time(seq, reps=4))


def itertools_accumulate(xs):
    s = 0
    for x in xs:
        s += x
        yield s


def fp8():
    f8 = torch.float8_e4m3fn
    tokens = 8192
    # Llama-3-8B's linears as torchtitan runs them (w1 and w3 separate), forward / dgrad / wgrad.
    linears = {"wqkv": (4096, 6144), "wo": (4096, 4096), "w1": (4096, 14336), "w2": (14336, 4096)}
    shapes = []
    for name, (i, o) in linears.items():
        shapes += [(name + "_fwd", tokens, o, i), (name + "_dgrad", tokens, i, o), (name + "_wgrad", o, i, tokens)]
    shapes += [("sq4096", 4096, 4096, 4096), ("sq8192", 8192, 8192, 8192), ("sq16384", 16384, 16384, 16384)]
    for lab, m, n, k in shapes:
        gemm("fp8_bf16_ref", lab, m, n, k)
        a = torch.randn(m, k, device=dev).to(f8)
        b = torch.randn(n, k, device=dev).to(f8).t()  # column-major B, as _scaled_mm requires
        one = torch.ones((), device=dev, dtype=torch.float32)
        t = graph_time(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
        row("fp8_tensorwise", lab, "fp8", m, n, k, 1, 2.0 * m * n * k, t)
        sa = torch.ones(m, 1, device=dev, dtype=torch.float32)
        sb = torch.ones(1, n, device=dev, dtype=torch.float32)
        t = graph_time(lambda: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                                                use_fast_accum=True))
        row("fp8_rowwise", lab, "fp8", m, n, k, 1, 2.0 * m * n * k, t)
    # The casts torchao issues without compile: amax, scale, saturate, cast (bytes = what moves).
    for m, k in [(8192, 4096), (8192, 14336), (14336, 4096)]:
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)

        def tensorwise():
            s = 448.0 / x.abs().amax().float().clamp(min=1e-12)
            (x.float() * s).clamp(-448, 448).to(f8)

        def rowwise():
            s = 448.0 / x.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12)
            (x.float() * s).clamp(-448, 448).to(f8)
        row("fp8_cast_tensorwise_eager", f"{m}x{k}", "bf16", m, 0, k, 1, 0, graph_time(tensorwise, reps=4))
        row("fp8_cast_rowwise_eager", f"{m}x{k}", "bf16", m, 0, k, 1, 0, graph_time(rowwise, reps=4))
        row("copy_bf16", f"{m}x{k}", "bf16", m, 0, k, 1, 0, graph_time(lambda: x.clone(), reps=4))


def attention():
    for causal in [True, False]:
        for seq in [512, 1024, 2048, 4096, 8192, 16384, 32768]:
            heads, hd = 32, 128
            batch = max(1, 65536 // seq)
            q, k, v = (torch.randn(batch, heads, seq, hd, device=dev, dtype=torch.bfloat16, requires_grad=True)
                       for _ in range(3))
            fwd_flops = 4.0 * batch * heads * seq * seq * hd * (0.5 if causal else 1.0)
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
                tf = graph_time(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), reps=5)
                o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                g = torch.randn_like(o)

                def fb():
                    y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    y.backward(g)
                tfb = eager_time(fb, reps=3)
            lab = f"{'causal' if causal else 'full'}_b{batch}_h{heads}"
            row("attention_fwd", lab, "bf16", batch * heads, seq, hd, 1, fwd_flops, tf)
            row("attention_fwd_bwd", lab, "bf16", batch * heads, seq, hd, 1, 3.5 * fwd_flops, tfb)
            del q, k, v, o, g


note(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, cuBLAS {torch.backends.cuda.preferred_blas_library()}")
out.write(f"# torch {torch.__version__} cuda {torch.version.cuda} device {torch.cuda.get_device_name()} "
          f"sms {torch.cuda.get_device_properties(0).multi_processor_count}\n")
for name, fn in [("wave", wave), ("shortk", shortk), ("layer", layer), ("grouped", grouped), ("fp8", fp8),
                 ("attention", attention)]:
    section(name, fn)
note("done")
