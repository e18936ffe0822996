#!/usr/bin/env python3
"""A U-Net decoder's layers on the CPU against PyTorch's: forward + backward of
conv_transpose2d (nn.ConvTranspose2d(64, 32, 2, stride=2), input, weight and bias gradients)
from 7x7 to 14x14 and from 14x14 to 28x28, and upsample x2 of [32, 64, 14, 14] (F.interpolate,
bilinear and nearest), and conv1d (nn.Conv1d(64, 64, 3, padding=1) over [32, 64, 196]: not a
U-Net layer; a 14x14 map's pixels as a sequence), batch 64 as a U-Net on 28x28 Fashion-MNIST, torch.set_num_threads(2)
against gpipe's CPU backend on 2 threads (bench-unet-layers). The two alternate, --rounds times, in one run, so a machine
loaded by other work loads both alike; each side's time is the median over its rounds of the
per-round medians, and its best single run (less sensitive to load). Prints both and
PyTorch's time over ours (above 1: ours is faster).

    /work/torchenv/bin/python bench/unet_layers.py [--build build] [--rounds 5] [--reps 30]
        [--threads 2]

--threads 1 compares one thread each: on a machine others load, the second thread of either
side often waits for a core, which the one-thread figures do not depend on.
"""
import torch
import torch.nn.functional as F

from torch_vs_gpipe import compare

BATCH = 64


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


if __name__ == "__main__":
    compare("bench-unet-layers", torch_cases, f"batch {BATCH}")
