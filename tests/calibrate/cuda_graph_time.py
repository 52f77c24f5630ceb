"""CUDA-graph GPU time of one call, shared by the PyTorch measurement scripts in this folder.

Each call is captured `reps` times in a CUDA graph and the graph replayed between CUDA events
(median of REPLAYS replays), so the host's launch is not in the figure.
"""
import torch

REPS_IN_GRAPH = 20
REPLAYS = 5


def graph_time(fn, reps=REPS_IN_GRAPH):
    """Seconds per call of fn, from a CUDA graph of `reps` calls (median of REPLAYS replays)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPLAYS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3 / reps)
    del g
    return sorted(times)[len(times) // 2]
