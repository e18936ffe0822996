#!/usr/bin/env python3
"""Llama's layers on the CPU against PyTorch's: forward + backward of rmsnorm (transformers'
LlamaRMSNorm, written out), silu (F.silu) and mul (torch.mul) at Llama-like shapes (8 rows of
128 tokens, width 256, FFN 688), torch.set_num_threads(2) against gpipe's CPU backend on 2
threads (bench-llama-layers). The two alternate, --rounds times, in one run, so a machine
loaded by other work loads both alike; each side's time is the median over its rounds of the
per-round medians, and its best single run (less sensitive to load). Prints both and
PyTorch's time over ours (above 1: ours is faster).

    /work/torchenv/bin/python bench/llama_layers.py [--build build] [--rounds 5] [--reps 30]
        [--threads 2]

--threads 1 compares one thread each: on a machine others load, the second thread of either
side often waits for a core, which the one-thread figures do not depend on.
"""
import torch
import torch.nn.functional as F

from torch_vs_gpipe import compare

ROWS, TOKENS, WIDTH, FFN = 8, 128, 256, 688


def llama_rmsnorm(weight, eps):
    def fn(h):
        input_dtype = h.dtype
        h = h.to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + eps)
        return weight * h.to(input_dtype)
    return fn


def torch_cases():
    g = torch.Generator().manual_seed(1)
    u = lambda *s: (torch.rand(*s, generator=g) * 6 - 3)
    w = torch.nn.Parameter(torch.ones(WIDTH))
    return {
        "rmsnorm": (llama_rmsnorm(w, 1e-6), [u(ROWS, TOKENS, WIDTH)], [w]),
        "silu": (F.silu, [u(ROWS, TOKENS, FFN)], []),
        "mul": (torch.mul, [u(ROWS, TOKENS, FFN), u(ROWS, TOKENS, FFN)], []),
    }


if __name__ == "__main__":
    compare("bench-llama-layers", torch_cases, f"[{ROWS}, {TOKENS}, width {WIDTH} / FFN {FFN}]")
