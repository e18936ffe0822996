"""The shared driver of the layer benchmarks against PyTorch (bench/llama_layers.py,
shape_layers.py, unet_layers.py): gpipe's bench-*-layers program and PyTorch's forward +
backward alternate, --rounds times, in one run, so a machine loaded by other work loads both
alike; each side's time is the median over its rounds of the per-round medians, and its best
single run (less sensitive to load). Prints both and PyTorch's time over ours (above 1: ours
is faster).
"""
import argparse
import os
import re
import statistics
import subprocess
import time

import torch


def time_torch(fn, inputs, params, reps):
    xs = [x.clone().requires_grad_(True) for x in inputs]
    dy = torch.rand_like(fn(*xs)) * 2 - 1
    ms = []
    for r in range(-3, reps):
        for t in xs + params:
            t.grad = None
        t0 = time.perf_counter()
        fn(*xs).backward(dy)
        if r >= 0:
            ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms), min(ms)


def time_ours(exe, reps, threads, case=None):
    cmd = [exe, "--threads", str(threads), "--reps", str(reps)] + (["--case", case] if case else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return {m.group(1): (float(m.group(2)), float(m.group(3)))
            for m in re.finditer(r"^(\S+)\s.*median ([0-9.]+) ms, best ([0-9.]+) ms", out, re.M)}


def compare(program, torch_cases, shapes):
    """program: bench/'s executable; torch_cases(): {name: (fn, inputs, params)}, named as the
    program's cases; shapes: what the header line says of them."""
    compare_all([(program, torch_cases)], shapes)


def compare_all(programs, shapes):
    """programs: [(program, torch_cases)], each as compare's; in each round every program, then
    its PyTorch cases, in turn: one table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cases", help="NAME,NAME,...: only these, each program run per case")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    load0 = os.getloadavg()[0]
    groups = [(os.path.join(a.build, "bench", prog), tc()) for prog, tc in programs]
    if a.cases:
        only = a.cases.split(",")
        groups = [(exe, {k: v for k, v in cases.items() if k in only}) for exe, cases in groups]
        groups = [(exe, cases) for exe, cases in groups if cases]
    ours = {k: [] for _, cases in groups for k in cases}
    theirs = {k: [] for k in ours}
    for _ in range(a.rounds):
        for exe, cases in groups:
            if a.cases:  # a case, then PyTorch's, in turn
                for k, (fn, xs, ps) in cases.items():
                    ours[k].append(time_ours(exe, a.reps, a.threads, k)[k])
                    theirs[k].append(time_torch(fn, xs, ps, a.reps))
                continue
            for k, v in time_ours(exe, a.reps, a.threads).items():
                ours[k].append(v)
            for k, (fn, xs, ps) in cases.items():
                theirs[k].append(time_torch(fn, xs, ps, a.reps))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; gpipe CPU backend, "
          f"{a.threads} threads; {shapes}; {a.rounds} alternated rounds; load "
          f"{load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    w = max(len(k) for k in ours)
    print(f"{'layer':{w}} {'median: gpipe ms':>16} {'torch ms':>9} {'torch/gpipe':>11}   "
          f"{'best: gpipe ms':>14} {'torch ms':>9} {'torch/gpipe':>11}")
    for k in ours:
        if not ours[k]:
            print(f"{k:{w}} (gpipe's program printed no line for it)")
            continue
        o = statistics.median(m for m, _ in ours[k])
        t = statistics.median(m for m, _ in theirs[k])
        ob, tb = min(b for _, b in ours[k]), min(b for _, b in theirs[k])
        print(f"{k:{w}} {o:16.3f} {t:9.3f} {t / o:10.2f}x   {ob:14.3f} {tb:9.3f} {tb / ob:10.2f}x")
