#!/usr/bin/env python3
"""Llama's layers on the CPU against PyTorch's: forward + backward of rmsnorm (transformers'
LlamaRMSNorm, written out), silu (F.silu), mul (torch.mul) and attention (transformers'
LlamaAttention written out: q/k/v projections as one, rotate_half rope,
F.scaled_dot_product_attention causal with enable_gqa, o_proj; no biases) at models/llama.yaml's
shapes (its batch of 32 rows of 64 tokens, width 256, FFN 688, 4 heads, 2 kv heads, theta
10000), torch.set_num_threads(2) against gpipe's CPU backend on 2 threads
(bench-llama-layers). The two alternate, --rounds times, in one run, so a machine
loaded by other work loads both alike; each side's time is the median over its rounds of the
per-round medians, and its best single run (less sensitive to load). Prints both and
PyTorch's time over ours (above 1: ours is faster).

    /work/torchenv/bin/python bench/llama_layers.py [--build build] [--rounds 5] [--reps 30]
        [--threads 2]

--threads 1 compares one thread each: on a machine others load, the second thread of either
side often waits for a core, which the one-thread figures do not depend on.
"""
import math

import torch
import torch.nn.functional as F

from torch_vs_gpipe import compare

ROWS, TOKENS, WIDTH, FFN, HEADS, KV_HEADS, THETA = 32, 64, 256, 688, 4, 2, 10000.0


def llama_rmsnorm(weight, eps):
    def fn(h):
        input_dtype = h.dtype
        h = h.to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + eps)
        return weight * h.to(input_dtype)
    return fn


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def llama_attention(w_in, w_out):
    h, kvh, d = HEADS, KV_HEADS, WIDTH
    dh = d // h
    inv_freq = 1.0 / (THETA ** (torch.arange(0, dh, 2, dtype=torch.int64).float() / dh))
    freqs = torch.arange(TOKENS)[:, None].float() * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def fn(x):
        n, t = x.shape[0], x.shape[1]
        proj = F.linear(x, w_in)
        q = proj[..., : h * dh].view(n, t, h, dh).transpose(1, 2)
        k = proj[..., h * dh: (h + kvh) * dh].view(n, t, kvh, dh).transpose(1, 2)
        v = proj[..., (h + kvh) * dh:].view(n, t, kvh, dh).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return F.linear(ctx.transpose(1, 2).reshape(n, t, d), w_out)
    return fn


def torch_cases():
    g = torch.Generator().manual_seed(1)
    u = lambda *s: (torch.rand(*s, generator=g) * 6 - 3)
    w = torch.nn.Parameter(torch.ones(WIDTH))
    dh = WIDTH // HEADS
    w_in = torch.nn.Parameter(torch.randn((HEADS + 2 * KV_HEADS) * dh, WIDTH, generator=g)
                              / math.sqrt(WIDTH))
    w_out = torch.nn.Parameter(torch.randn(WIDTH, WIDTH, generator=g) / math.sqrt(WIDTH))
    return {
        "rmsnorm": (llama_rmsnorm(w, 1e-6), [u(ROWS, TOKENS, WIDTH)], [w]),
        "silu": (F.silu, [u(ROWS, TOKENS, FFN)], []),
        "mul": (torch.mul, [u(ROWS, TOKENS, FFN), u(ROWS, TOKENS, FFN)], []),
        "attention": (llama_attention(w_in, w_out), [u(ROWS, TOKENS, WIDTH)], [w_in, w_out]),
    }


if __name__ == "__main__":
    compare("bench-llama-layers", torch_cases,
            f"llama.yaml: [{ROWS}, {TOKENS}, width {WIDTH} / FFN {FFN}], {HEADS} heads, "
            f"{KV_HEADS} kv heads")
