#!/usr/bin/env python3
"""The attention layer's CPU forward + backward against PyTorch's at llama-like shapes.

gpipe: build/bench/bench-attention-cpu (the layer through its CPU backend, 2 threads).
PyTorch: the same Llama attention (one q/k/v projection, rotary embedding as transformers'
rotate_half, F.scaled_dot_product_attention causal with enable_gqa, o_proj), no biases,
torch.set_num_threads(2). Each side's time is the best of --reps runs of forward + backward
(input and weight gradients); the two are alternated --rounds times in one run, so a load
that comes and goes hits both. Prints both best times and torch / gpipe (> 1: gpipe faster).

    python3 bench/attention_vs_torch.py [--bin build/bench/bench-attention-cpu] [--rounds 5]
        [--reps 10] [--batch 8] [--tokens 128] [--dim 256] [--heads 8] [--kv-heads 2]
        [--theta 10000]
"""
import argparse
import math
import subprocess
import time

import torch
import torch.nn.functional as F


def rotary(pos, dh, theta):
    inv_freq = 1.0 / (theta ** (torch.arange(0, dh, 2, dtype=torch.int64).float() / dh))
    freqs = pos[:, None].float() * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def torch_best(a, reps):
    n, t, d, h, kvh = a.batch, a.tokens, a.dim, a.heads, a.kv_heads
    dh = d // h
    w_in = torch.nn.Parameter(torch.randn((h + 2 * kvh) * dh, d) / math.sqrt(d))
    w_out = torch.nn.Parameter(torch.randn(d, d) / math.sqrt(d))
    x = (torch.rand(n, t, d) * 2 - 1).requires_grad_(True)
    dy = torch.rand(n, t, d) * 2 - 1
    cos, sin = rotary(torch.arange(t), dh, a.theta) if a.theta > 0 else (None, None)

    def step():
        proj = F.linear(x, w_in)
        q = proj[..., : h * dh].view(n, t, h, dh).transpose(1, 2)
        k = proj[..., h * dh: (h + kvh) * dh].view(n, t, kvh, dh).transpose(1, 2)
        v = proj[..., (h + kvh) * dh:].view(n, t, kvh, dh).transpose(1, 2)
        if cos is not None:
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kvh != h)
        y = F.linear(ctx.transpose(1, 2).reshape(n, t, d), w_out)
        y.backward(dy)

    best = math.inf
    for r in range(reps + 1):  # the first is a warm-up
        x.grad = w_in.grad = w_out.grad = None
        t0 = time.perf_counter()
        step()
        s = time.perf_counter() - t0
        if r > 0:
            best = min(best, s)
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", default="build/bench/bench-attention-cpu")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--theta", type=float, default=10000.0)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    cmd = [a.bin, "--threads", str(a.threads), "--reps", str(a.reps)]
    for k in ("batch", "tokens", "dim", "heads", "kv_heads", "theta"):
        cmd += ["--" + k.replace("_", "-"), str(getattr(a, k))]
    g_best = t_best = math.inf
    for _ in range(a.rounds):
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()
        g_best = min(g_best, float(out[1]))
        t_best = min(t_best, torch_best(a, a.reps))
    print(f"attention fwd+bwd, batch {a.batch}, {a.tokens} tokens, width {a.dim}, {a.heads} heads, "
          f"{a.kv_heads} kv heads, rope theta {a.theta:g}, {a.threads} threads, torch {torch.__version__}")
    print(f"gpipe {g_best * 1e3:.2f} ms  torch {t_best * 1e3:.2f} ms  torch/gpipe {t_best / g_best:.2f}x")


if __name__ == "__main__":
    main()
