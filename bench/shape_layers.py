#!/usr/bin/env python3
"""The shape layers and losses on the CPU against PyTorch's: forward + backward of reshape and
permute (against .reshape/.permute then .contiguous(); reshape_copy, our copy where the
executor cannot run a view, against .reshape then .clone(), a copy of the same bytes), groupnorm (F.group_norm), mse, l1 and
bce_with_logits (F.*_loss, reduction 'mean', gradients of both inputs) and
softmax_cross_entropy over axis 0 (F.cross_entropy of [N, C, H, W] logits) at the shapes of a
U-Net on 28x28 Fashion-MNIST at batch 64 and of models/llama.yaml (bench/shape_layers.c's
table), torch.set_num_threads(2) against gpipe's CPU backend on 2 threads
(bench-shape-layers). The two alternate, --rounds times, in one run, so a machine loaded by
other work loads both alike; each side's time is the median over its rounds of the per-round
medians, and its best single run. Prints both and PyTorch's time over ours (above 1: ours is
faster).

    /work/torchenv/bin/python bench/shape_layers.py [--build build] [--rounds 5] [--reps 30]
        [--threads 2]
"""
import torch
import torch.nn.functional as F

from torch_vs_gpipe import compare

B = 64


def torch_cases():
    g = torch.Generator().manual_seed(1)
    u = lambda *s: (torch.rand(*s, generator=g) * 6 - 3)
    p = lambda *s: torch.rand(*s, generator=g)
    w8, b8 = torch.nn.Parameter(torch.ones(32)), torch.nn.Parameter(torch.zeros(32))
    w32, b32 = torch.nn.Parameter(torch.ones(64)), torch.nn.Parameter(torch.zeros(64))
    labels = torch.randint(0, 10, (B, 28, 28), generator=g)
    view = lambda a: a.reshape(B, 32, -1).contiguous()
    return {
        "reshape": (view, [u(B, 32, 28, 28)], []),
        # where the executor cannot alias, ours copies: against a copy (clone) of the same bytes
        "reshape_copy": (lambda a: a.reshape(B, 32, -1).clone(), [u(B, 32, 28, 28)], []),
        "permute_hwc": (lambda a: a.permute(0, 2, 3, 1).contiguous(), [u(B, 32, 28, 28)], []),
        "permute_heads": (lambda a: a.permute(0, 2, 1, 3).contiguous(), [u(32, 64, 4, 64)], []),
        "groupnorm_28": (lambda a: F.group_norm(a, 8, w8, b8, 1e-5), [u(B, 32, 28, 28)],
                         [w8, b8]),
        "groupnorm_14": (lambda a: F.group_norm(a, 32, w32, b32, 1e-5), [u(B, 64, 14, 14)],
                         [w32, b32]),
        "mse": (F.mse_loss, [u(B, 1, 28, 28), p(B, 1, 28, 28)], []),
        "l1": (F.l1_loss, [u(B, 1, 28, 28), p(B, 1, 28, 28)], []),
        "bce": (F.binary_cross_entropy_with_logits, [u(B, 1, 28, 28), p(B, 1, 28, 28)], []),
        "xent_axis0": (lambda z: F.cross_entropy(z, labels), [u(B, 10, 28, 28)], []),
    }


if __name__ == "__main__":
    compare("bench-shape-layers", torch_cases,
            f"U-Net batch {B} (28x28, 32 / 64 channels), llama.yaml's heads at 32 x 64 tokens")
