#!/usr/bin/env python3
"""A U-Net decoder's layers on the CPU against PyTorch's: forward + backward of
conv_transpose2d (nn.ConvTranspose2d(64, 32, 2, stride=2), input, weight and bias gradients)
from 7x7 to 14x14 and from 14x14 to 28x28, and upsample x2 of [32, 64, 14, 14] (F.interpolate,
bilinear and nearest), and conv1d (nn.Conv1d(64, 64, 3, padding=1) over [32, 64, 196]: not a
U-Net layer; a 14x14 map's pixels as a sequence), batch 32 as a U-Net on 28x28 Fashion-MNIST, torch.set_num_threads(2)
against gpipe's CPU backend on 2 threads (bench-unet-layers). The two alternate, --rounds times, in one run, so a machine
loaded by other work loads both alike; each side's time is the median over its rounds of the
per-round medians, and its best single run (less sensitive to load). Prints both and
PyTorch's time over ours (above 1: ours is faster).

    /work/torchenv/bin/python bench/unet_layers.py [--build build] [--rounds 5] [--reps 30]
        [--threads 2]

--threads 1 compares one thread each: on a machine others load, the second thread of either
side often waits for a core, which the one-thread figures do not depend on.
"""
import argparse
import os
import re
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F

BATCH = 32


def torch_cases():
    g = torch.Generator().manual_seed(1)
    u = lambda *s: (torch.rand(*s, generator=g) * 6 - 3)
    ct = torch.nn.ConvTranspose2d(64, 32, 2, stride=2)
    ps = list(ct.parameters())
    c1 = torch.nn.Conv1d(64, 64, 3, padding=1)
    return {
        "convt_7to14": (ct, [u(BATCH, 64, 7, 7)], ps),
        "convt_14to28": (ct, [u(BATCH, 64, 14, 14)], ps),
        "bilinear_x2": (lambda a: F.interpolate(a, scale_factor=2, mode="bilinear",
                                                align_corners=False), [u(BATCH, 64, 14, 14)], []),
        "nearest_x2": (lambda a: F.interpolate(a, scale_factor=2, mode="nearest"),
                       [u(BATCH, 64, 14, 14)], []),
        "conv1d_k3": (c1, [u(BATCH, 64, 196)], list(c1.parameters())),
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
    load0 = os.getloadavg()[0]
    exe = os.path.join(a.build, "bench", "bench-unet-layers")
    cases = torch_cases()
    ours, theirs = {k: [] for k in cases}, {k: [] for k in cases}
    for _ in range(a.rounds):
        for k, v in time_ours(exe, a.reps, a.threads).items():
            ours[k].append(v)
        for k, (fn, xs, ps) in cases.items():
            theirs[k].append(time_torch(fn, xs, ps, a.reps))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; gpipe CPU backend, "
          f"{a.threads} threads; batch {BATCH}; {a.rounds} alternated rounds; load "
          f"{load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    print(f"{'layer':12} {'median: gpipe ms':>16} {'torch ms':>9} {'torch/gpipe':>11}   "
          f"{'best: gpipe ms':>14} {'torch ms':>9} {'torch/gpipe':>11}")
    for k in cases:
        o = statistics.median(m for m, _ in ours[k])
        t = statistics.median(m for m, _ in theirs[k])
        ob, tb = min(b for _, b in ours[k]), min(b for _, b in theirs[k])
        print(f"{k:12} {o:16.3f} {t:9.3f} {t / o:10.2f}x   {ob:14.3f} {tb:9.3f} {tb / ob:10.2f}x")


if __name__ == "__main__":
    main()
