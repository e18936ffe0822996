"""The layers of issue 51 for scripts/torch_compare.py (Llama's rmsnorm, silu, mul and
attention's rope, kv_heads and named inputs; a U-Net's conv_transpose2d, upsample and
groupnorm; conv1d, reshape, permute; the losses mse, l1, bce_with_logits and
softmax_cross_entropy over a class axis): their settings as gpipe's layers/*.c name them, their
shape rules and their torch modules, kept apart so that torch_compare.py only dispatches.
"""

import math

# gpipe's settings and defaults (layers/*.c); None: required unless in OPTIONAL.
SETTINGS = {
    "rmsnorm": {"eps": 1e-6},
    "silu": {},
    "mul": {},
    "conv1d": {"out_channels": None, "kernel": None, "stride": 1, "padding": 0, "dilation": 1,
               "groups": 1, "bias": True},
    "conv_transpose2d": {"out_channels": None, "kernel": None, "stride": 1, "padding": 0,
                         "output_padding": 0, "dilation": 1, "groups": 1, "bias": True},
    "upsample": {"mode": "nearest", "scale_factor": None, "size": None, "align_corners": None},
    "reshape": {"shape": None},
    "permute": {"axes": None},
    "groupnorm": {"groups": None, "eps": 1e-5},
}
OPTIONAL = {("upsample", "scale_factor"), ("upsample", "size"), ("upsample", "align_corners"),
            ("attention", "kv_heads"), ("attention", "rope"), ("attention", "inputs"),
            ("linear", "std"), ("embedding", "std")}
# Settings the older types gained: merged into torch_compare.py's table.
MORE = {
    "linear": {"std": None},
    "embedding": {"init": "default", "std": None},
    "attention": {"kv_heads": None, "rope": None, "inputs": None},
    "softmax_cross_entropy": {"axis": -1},
}
# Losses of an f32 target of the prediction's shape (layers/eltloss.c).
F32_LOSSES = ("mse", "l1", "bce_with_logits")
INPUTS = {"mul": (2, 2)}
ATTENTION_ROLES = ("query", "memory", "mask", "segments", "key_segments", "pos")


class SpecError(Exception):
    pass


def _pair(v):
    return (int(v[0]), int(v[1])) if isinstance(v, list) else (int(v), int(v))


def upsample_size(c, x):
    if c["size"] is not None:
        return _pair(c["size"])
    s = float(c["scale_factor"]) if c["scale_factor"] is not None else 2.0
    return int(math.floor(x[1] * s)), int(math.floor(x[2] * s))


def infer(node):
    """(per-sample output shape, forward multiply-adds, parameters) of a type in SETTINGS."""
    t, c, xs = node.type, node.conf, node.in_shapes
    x = xs[0]
    if t in ("silu",):
        return x, 0, 0
    if t == "rmsnorm":
        return x, 0, x[-1]
    if t == "mul":
        if xs[1] != x:
            raise SpecError(f"{node.path}: mul of shapes {list(x)} and {list(xs[1])}")
        return x, 0, 0
    if t == "groupnorm":
        if x[0] % int(c["groups"]):
            raise SpecError(f"{node.path}: {x[0]} channels in {c['groups']} groups")
        return x, 0, 2 * x[0]
    if t == "conv1d":
        if len(x) != 2:
            raise SpecError(f"{node.path}: conv1d expects [C, L], got {list(x)}")
        k, g, kk = int(c["out_channels"]), int(c["groups"]), int(c["kernel"])
        ol = (x[1] + 2 * int(c["padding"]) - (int(c["dilation"]) * (kk - 1) + 1)) // int(
            c["stride"]) + 1
        return (k, ol), k * ol * (x[0] // g) * kk, k * (x[0] // g) * kk + (k if c["bias"] else 0)
    if t == "conv_transpose2d":
        if len(x) != 3:
            raise SpecError(f"{node.path}: conv_transpose2d expects [C, H, W], got {list(x)}")
        k, g = int(c["out_channels"]), int(c["groups"])
        (kh, kw), (sh, sw) = _pair(c["kernel"]), _pair(c["stride"])
        (ph, pw), (oph, opw) = _pair(c["padding"]), _pair(c["output_padding"])
        dh, dw = _pair(c["dilation"])
        oh = (x[1] - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
        ow = (x[2] - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
        per = x[0] * (k // g) * kh * kw
        return (k, oh, ow), per * x[1] * x[2], per + (k if c["bias"] else 0)
    if t == "upsample":
        if len(x) != 3:
            raise SpecError(f"{node.path}: upsample expects [C, H, W], got {list(x)}")
        return (x[0],) + upsample_size(c, x), 0, 0
    if t == "reshape":
        shape, n = [int(d) for d in c["shape"]], math.prod(x)
        if -1 in shape:
            shape[shape.index(-1)] = n // -math.prod(shape)
        if math.prod(shape) != n:
            raise SpecError(f"{node.path}: reshape of {list(x)} to {c['shape']}")
        return tuple(shape), 0, 0
    if t == "permute":
        axes = [int(a) % len(x) for a in c["axes"]]
        if sorted(axes) != list(range(len(x))):
            raise SpecError(f"{node.path}: permute axes {c['axes']} of {list(x)}")
        return tuple(x[a] for a in axes), 0, 0
    raise SpecError(f"{node.path}: no shape rule for {t}")


def attention_roles(c, n_in):
    """The input index of each role named by `inputs:` (query first), or None."""
    if c.get("inputs") is None:
        return None
    names = list(c["inputs"])
    if len(names) != n_in or names[0] != "query" or any(r not in ATTENTION_ROLES for r in names):
        raise SpecError(f"attention: inputs: {names} for {n_in} inputs")
    return {r: names.index(r) for r in names}


def attention_params(c, d):
    h = int(c["heads"])
    kvh = int(c["kv_heads"]) if c.get("kv_heads") is not None else h
    dh = d // h
    rows = (h + 2 * kvh) * dh
    return rows * d + d * d + ((rows + d) if c["bias"] else 0)


def modules():
    """The torch modules (built on first use: torch is imported only then)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class RMSNorm(nn.Module):
        """transformers' LlamaRMSNorm"""

        def __init__(self, n, eps):
            super().__init__()
            self.weight, self.eps = nn.Parameter(torch.ones(n)), eps

        def forward(self, x):
            return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def rotate(x, pos, theta):
        """transformers' apply_rotary_pos_emb with rotate_half, positions per row"""
        dh = x.shape[-1]
        inv = 1.0 / (theta ** (torch.arange(0, dh, 2, device=x.device).float() / dh))
        ang = pos[:, None, :, None].float() * inv  # [B, 1, T, dh/2]
        emb = torch.cat((ang, ang), -1)
        x1, x2 = x[..., : dh // 2], x[..., dh // 2:]
        return x * emb.cos() + torch.cat((-x2, x1), -1) * emb.sin()

    class Attention(nn.Module):
        """gpipe's attention with kv_heads, rope and named inputs (layers/attention.c):
        in_proj_weight [(H + 2 KVH) dh, d], rows Q, K, V; out_proj; masks as torch_compare's
        Attention (segments: equal non-zero ids; padding: key mask 1; causal: j <= i)."""

        def __init__(self, d, c, roles):
            super().__init__()
            self.h = int(c["heads"])
            self.kvh = int(c["kv_heads"]) if c.get("kv_heads") is not None else self.h
            self.theta = float(c["rope"]["theta"]) if c.get("rope") else 0.0
            self.causal, self.p, self.roles = bool(c["causal"]), float(c["dropout"]), roles
            self.segments = c["mask"] == "segments" or "segments" in roles
            dh = d // self.h
            rows = (self.h + 2 * self.kvh) * dh
            self.in_proj_weight = nn.Parameter(torch.empty(rows, d))
            nn.init.xavier_uniform_(self.in_proj_weight)
            self.in_proj_bias = nn.Parameter(torch.zeros(rows)) if c["bias"] else None
            self.out_proj = nn.Linear(d, d, bias=bool(c["bias"]))
            if c["bias"]:
                nn.init.zeros_(self.out_proj.bias)

        def forward(self, *a):
            r = self.roles
            if "memory" in r:
                raise SpecError("attention: memory with kv_heads / rope is not built here")
            q = a[0]
            B, T, d = q.shape
            h, kvh = self.h, self.kvh
            dh = d // h
            p = F.linear(q, self.in_proj_weight, self.in_proj_bias)
            qh = p[..., : h * dh].view(B, T, h, dh).transpose(1, 2)
            kh = p[..., h * dh: (h + kvh) * dh].view(B, T, kvh, dh).transpose(1, 2)
            vh = p[..., (h + kvh) * dh:].view(B, T, kvh, dh).transpose(1, 2)
            if self.theta:
                pos = a[r["pos"]]
                qh, kh = rotate(qh, pos, self.theta), rotate(kh, pos, self.theta)
            allow = None
            if "segments" in r:
                s = a[r["segments"]]
                allow = (s[:, :, None] == s[:, None, :]) & (s[:, None, :] != 0)
            elif "mask" in r:
                allow = (a[r["mask"]] != 0)[:, None, :].expand(B, T, T)
            if self.causal:
                tri = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
                allow = tri.expand(B, T, T) if allow is None else allow & tri
            if allow is not None:  # a query with no key: as torch_compare's Attention
                allow = allow.clone()
                allow[:, :, 0] |= ~allow.any(-1)
                allow = allow[:, None]
            ctx = F.scaled_dot_product_attention(
                qh, kh, vh, attn_mask=allow, dropout_p=self.p if self.training else 0.0,
                enable_gqa=kvh != h)
            return self.out_proj(ctx.transpose(1, 2).reshape(B, T, d))

    return torch, nn, F, RMSNorm, Attention


def build(g, mods, node, a):
    """Adds node (a type in SETTINGS) to the fx graph g; a: its inputs' graph values."""
    torch, nn, F, RMSNorm, _ = modules()
    c, t, x = node.conf, node.type, node.in_shapes[0]
    if t == "rmsnorm":
        mods[node.path] = RMSNorm(x[-1], float(c["eps"]))
        return g.call_module(node.path, (a[0],))
    if t == "silu":
        return g.call_function(F.silu, (a[0],))
    if t == "mul":
        return g.call_function(torch.mul, (a[0], a[1]))
    if t == "groupnorm":
        mods[node.path] = nn.GroupNorm(int(c["groups"]), x[0], eps=float(c["eps"]))
        return g.call_module(node.path, (a[0],))
    if t == "conv1d":
        mods[node.path] = nn.Conv1d(x[0], int(c["out_channels"]), int(c["kernel"]),
                                    int(c["stride"]), int(c["padding"]), int(c["dilation"]),
                                    int(c["groups"]), bias=bool(c["bias"]))
        return g.call_module(node.path, (a[0],))
    if t == "conv_transpose2d":
        mods[node.path] = nn.ConvTranspose2d(
            x[0], int(c["out_channels"]), _pair(c["kernel"]), _pair(c["stride"]),
            _pair(c["padding"]), _pair(c["output_padding"]), int(c["groups"]),
            bias=bool(c["bias"]), dilation=_pair(c["dilation"]))
        return g.call_module(node.path, (a[0],))
    if t == "upsample":
        # by the output size, so torch's source index is dst * in / out as gpipe's
        kw = {"size": node.out_shape[1:], "mode": c["mode"]}
        if c["mode"] == "bilinear":
            kw["align_corners"] = bool(c["align_corners"])
        return g.call_function(F.interpolate, (a[0],), kw)
    if t == "reshape":
        return g.call_method("reshape", (a[0], (-1,) + tuple(node.out_shape)))
    if t == "permute":
        axes = [int(v) % len(x) for v in c["axes"]]
        p = g.call_method("permute", (a[0], (0,) + tuple(1 + v for v in axes)))
        return g.call_method("contiguous", (p,))
    raise SpecError(f"{node.path}: {t} is not built")


def attention_module(node, roles):
    _, _, _, _, Attention = modules()
    return Attention(node.in_shapes[0][-1], node.conf, roles)


def init_normal(module, c):
    """`init: normal` (linear: zero bias) with `std` (0.02 unless given)."""
    import torch.nn as nn

    std = float(c["std"]) if c.get("std") is not None else 0.02
    nn.init.normal_(module.weight, std=std)
    if getattr(module, "bias", None) is not None:
        nn.init.zeros_(module.bias)


def loss(kind, conf, out, y, classes, ignore, smoothing):
    """The model file's loss of out against y, reduction 'mean' as gpipe's."""
    import torch.nn.functional as F

    if kind == "mse":
        return F.mse_loss(out, y)
    if kind == "l1":
        return F.l1_loss(out, y)
    if kind == "bce_with_logits":
        return F.binary_cross_entropy_with_logits(out, y)
    ax = int(conf.get("axis", -1))
    nd = out.dim() - 1
    ax = ax + nd if ax < 0 else ax
    z = out.movedim(1 + ax, -1) if ax != nd - 1 else out
    return F.cross_entropy(z.reshape(-1, classes), y.reshape(-1), ignore_index=ignore,
                           label_smoothing=smoothing)
