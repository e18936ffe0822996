#!/usr/bin/env python3
"""The shape layers and losses of f32 targets on the CPU against PyTorch's: forward + backward of
reshape and permute (against .reshape/.permute then .contiguous()), groupnorm (F.group_norm),
mse, l1 and bce_with_logits (F.*_loss, reduction 'mean', gradients of both inputs) at U-Net
and Llama-like shapes (bench/shape_layers.c's table), torch.set_num_threads(2) against
gpipe's CPU backend on 2 threads (bench-shape-layers). The two alternate, --rounds times, in
one run, so a machine loaded by other work loads both alike; each side's time is the median
over its rounds of the per-round medians, and its best single run. Prints both and PyTorch's
time over ours (above 1: ours is faster).

    /work/torchenv/bin/python bench/shape_layers.py [--build build] [--rounds 5] [--reps 30]
        [--threads 2]
"""
import argparse
import os
import re
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F

B = 8


def torch_cases():
    g = torch.Generator().manual_seed(1)
    u = lambda *s: (torch.rand(*s, generator=g) * 6 - 3)
    w, b = torch.nn.Parameter(torch.ones(64)), torch.nn.Parameter(torch.zeros(64))
    return {
        "reshape": (lambda a: a.reshape(B, 64, -1).contiguous(), [u(B, 64, 32, 32)], []),
        "permute_hwc": (lambda a: a.permute(0, 2, 3, 1).contiguous(), [u(B, 64, 32, 32)], []),
        "permute_heads": (lambda a: a.permute(0, 2, 1, 3).contiguous(), [u(B, 128, 4, 64)], []),
        "groupnorm": (lambda a: F.group_norm(a, 32, w, b, 1e-5), [u(B, 64, 32, 32)], [w, b]),
        "mse": (F.mse_loss, [u(B, 3, 32, 32), u(B, 3, 32, 32)], []),
        "l1": (F.l1_loss, [u(B, 3, 32, 32), u(B, 3, 32, 32)], []),
        "bce": (F.binary_cross_entropy_with_logits,
                [u(B, 1, 64, 64), torch.rand(B, 1, 64, 64, generator=g)], []),
    }


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


def time_ours(exe, reps, threads):
    out = subprocess.run([exe, "--threads", str(threads), "--reps", str(reps)], check=True,
                         capture_output=True, text=True).stdout
    return {m.group(1): (float(m.group(2)), float(m.group(3)))
            for m in re.finditer(r"^(\S+)\s.*median ([0-9.]+) ms, best ([0-9.]+) ms", out, re.M)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    exe = os.path.join(a.build, "bench", "bench-shape-layers")
    cases = torch_cases()
    ours, theirs = {k: [] for k in cases}, {k: [] for k in cases}
    for _ in range(a.rounds):
        for k, v in time_ours(exe, a.reps, a.threads).items():
            ours[k].append(v)
        for k, (fn, xs, ps) in cases.items():
            theirs[k].append(time_torch(fn, xs, ps, a.reps))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; gpipe CPU backend, "
          f"{a.threads} threads; batch {B}; {a.rounds} alternated rounds")
    print(f"{'layer':13} {'median: gpipe ms':>16} {'torch ms':>9} {'torch/gpipe':>11}   "
          f"{'best: gpipe ms':>14} {'torch ms':>9} {'torch/gpipe':>11}")
    for k in cases:
        o = statistics.median(m for m, _ in ours[k])
        t = statistics.median(m for m, _ in theirs[k])
        ob, tb = min(b for _, b in ours[k]), min(b for _, b in theirs[k])
        print(f"{k:13} {o:16.3f} {t:9.3f} {t / o:10.2f}x   {ob:14.3f} {tb:9.3f} {tb / ob:10.2f}x")


if __name__ == "__main__":
    main()
