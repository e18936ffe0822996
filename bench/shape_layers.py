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
import torch
import torch.nn.functional as F

from torch_vs_gpipe import compare

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


if __name__ == "__main__":
    compare("bench-shape-layers", torch_cases, f"batch {B}")
