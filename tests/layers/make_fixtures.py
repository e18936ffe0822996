#!/usr/bin/env python3
"""Writes the PyTorch reference fixtures of the layer tests (tests/fixtures/layers/).

One .safetensors file per case, read by tests/layers/test_torch.c. Needs torch; CI does
not run this script (the fixtures are committed), it is here to regenerate or extend them:

    python3 tests/layers/make_fixtures.py [out_dir]

Each file holds:
  __metadata__: config   the layer's YAML flow mapping, as a model file would write it
                training "true" / "false" (batchnorm: batch or running statistics)
                backward "false": forward only (no dy, dx or grad tensors)
                loss     "true" for the loss layer (the objective is the mean loss)
                torch    the torch version that wrote it
  x0, x1, ...   inputs with the batch as dimension 0 (labels, token ids, I32 masks are I32)
  param.<name>  parameter and buffer values before the step (PyTorch names)
  y             output; dy the upstream gradient (not for the loss)
  dx0, ...      input gradients (zeros for an F32 input the output does not depend on
                smoothly, a mask); grad.<name> parameter gradients
  after.<name>  buffers after the step (batchnorm running statistics)
  loss          [1]: the mini-batch mean loss (loss layer only)
  tol.<name>    [1] (the *_f64 cases): y, dx and grad are a float64 reference computed from
                the float32 inputs, and tol.<name> is PyTorch's own float32 error against it

safetensors is written by hand (8-byte little-endian header length, JSON, raw data) so
that the script needs nothing beyond torch.
"""
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

DTYPES = {torch.float32: ("F32", "<f4"), torch.int32: ("I32", "<i4")}


def write_safetensors(path, tensors, meta):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        code, np_dtype = DTYPES[t.dtype]
        raw = t.numpy().astype(np_dtype).tobytes()
        header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = meta
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the header may be padded to a multiple of 8
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def run_case(out_dir, name, config, inputs, fn, params=None, training=True, after=None,
             backward=True):
    """inputs: list of tensors (float ones get gradients); fn(*inputs) -> y;
    params: ordered {name: tensor} of the module (trainable ones have requires_grad);
    backward=False: forward only (evaluation mode is never differentiated in training)."""
    params = params or {}
    before = {k: v.detach().clone() for k, v in params.items()}
    xs = [x.detach().clone().requires_grad_(x.dtype == torch.float32 and backward)
          for x in inputs]
    y = fn(*xs)
    dy = torch.randn_like(y)
    if backward:
        (y * dy).sum().backward()
    t = {}
    for i, x in enumerate(xs):
        t[f"x{i}"] = x
    for k, v in before.items():
        t[f"param.{k}"] = v
    t["y"] = y
    if backward:
        t["dy"] = dy
        for i, x in enumerate(xs):
            if x.grad is not None:
                t[f"dx{i}"] = x.grad
            elif x.requires_grad:  # a float input the output does not depend on (a mask)
                t[f"dx{i}"] = torch.zeros_like(x)
        for k, v in params.items():
            if v.requires_grad:
                t[f"grad.{k}"] = v.grad
    for k, v in (after or {}).items():
        t[f"after.{k}"] = v()
    meta = {"config": config, "training": "true" if training else "false",
            "backward": "true" if backward else "false", "torch": torch.__version__}
    write_safetensors(os.path.join(out_dir, name + ".safetensors"), t, meta)


def f64_case(out_dir, name, config, inputs, fn, params, buffers=None, training=True):
    """run_case with a float64 reference: fn(params and buffers, *inputs) is run in float64 on
    the float32 values (the stored y, dx and grad), and in float32 as PyTorch would; tol.<name>
    holds PyTorch's float32 error against the reference (largest absolute difference) per
    tensor, so the test can ask for no less accuracy than PyTorch's where float32 rounding is
    large. training=False: evaluation, forward only."""
    buffers = buffers or {}
    dy = None
    res = {}
    for dtype in (torch.float64, torch.float32):
        ps = {k: v.detach().to(dtype).requires_grad_(training) for k, v in params.items()}
        bs = {k: v.detach().to(dtype) for k, v in buffers.items()}
        xs = [x.detach().to(dtype).requires_grad_(training) for x in inputs]
        y = fn({**ps, **bs}, *xs)
        r = {"y": y}
        if training:
            if dy is None:
                dy = torch.randn(y.shape, dtype=torch.float32)
            (y * dy.to(dtype)).sum().backward()
            r.update({f"dx{i}": x.grad for i, x in enumerate(xs)})
            r.update({f"grad.{k}": v.grad for k, v in ps.items()})
        res[dtype] = {k: v.detach() for k, v in r.items()}
    t = {f"x{i}": x for i, x in enumerate(inputs)}
    for k, v in {**params, **buffers}.items():
        t[f"param.{k}"] = v.detach()
    if training:
        t["dy"] = dy
    for k, v in res[torch.float64].items():
        t[k] = v.float()
        err = (res[torch.float32][k].double() - v).abs().max()
        t[f"tol.{k}"] = err.float().reshape(1)
    meta = {"config": config, "training": "true" if training else "false",
            "backward": "true" if training else "false", "torch": torch.__version__}
    write_safetensors(os.path.join(out_dir, name + ".safetensors"), t, meta)


def loss_case(out_dir, name, config, n, k, smoothing):
    logits = torch.randn(n, k, requires_grad=True)
    labels = torch.randint(0, k, (n,), dtype=torch.int64)
    per = F.cross_entropy(logits, labels, label_smoothing=smoothing, reduction="none")
    mean = F.cross_entropy(logits, labels, label_smoothing=smoothing, reduction="mean")
    mean.backward()
    t = {"x0": logits, "x1": labels.to(torch.int32), "y": per, "loss": mean.reshape(1),
         "dx0": logits.grad}
    meta = {"config": config, "training": "true", "backward": "true", "loss": "true",
            "torch": torch.__version__}
    write_safetensors(os.path.join(out_dir, name + ".safetensors"), t, meta)


def eltloss_case(out_dir, name, config, pred, target, fn):
    """A loss of f32 targets: fn(pred, target, reduction) as F.mse_loss; the mean's gradient
    with respect to both inputs."""
    p = pred.clone().requires_grad_(True)
    t = target.clone().requires_grad_(True)
    per = fn(p, t, reduction="none")
    mean = fn(p, t, reduction="mean")
    mean.backward()
    ts = {"x0": pred, "x1": target, "y": per.detach(), "loss": mean.detach().reshape(1),
          "dx0": p.grad, "dx1": t.grad}
    meta = {"config": config, "training": "true", "backward": "true", "loss": "true",
            "torch": torch.__version__}
    write_safetensors(os.path.join(out_dir, name + ".safetensors"), ts, meta)


def conv_case(out_dir, name, config, c, h, w, k, kernel, stride=1, padding=0, dilation=1,
              groups=1, bias=True, n=2):
    conv = torch.nn.Conv2d(c, k, kernel, stride=stride, padding=padding, dilation=dilation,
                           groups=groups, bias=bias)
    params = {"weight": conv.weight}
    if bias:
        params["bias"] = conv.bias
    run_case(out_dir, name, config, [torch.randn(n, c, h, w)], conv, params)


def sinusoid_table(max_len, dim):
    """Vaswani et al.'s table as the PyTorch tutorial's PositionalEncoding computes it (float32),
    extended to odd dims: feature 2i is sin(pos * w_i), feature 2i+1 cos(pos * w_i),
    w_i = exp(-2i ln(10000) / dim)."""
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    pe = torch.zeros(max_len, dim)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term[: dim // 2])
    return pe


def embedding_case(out_dir, name, config, vocab, dim, ids, padding_idx=None, scale=False):
    emb = torch.nn.Embedding(vocab, dim, padding_idx=padding_idx)
    k = math.sqrt(dim) if scale else 1.0
    run_case(out_dir, name, config, [ids.to(torch.int32)],
             lambda i: emb(i.long()) * k, {"weight": emb.weight})


def attention_case(out_dir, name, config, n, tq, dim, heads, bias=True, tk=None, mask=None,
                   causal=False, no_keys=False):
    """nn.MultiheadAttention(batch_first=True) in training mode with dropout 0. tk: cross-
    attention over a second input of tk positions. mask: None, "i32" or "f32": a key-padding
    input, 1 = token, 0 = pad (PyTorch's boolean key_padding_mask is its negation); key 0 is
    always a token unless no_keys: then the last sample's key 0 is padding too, and also every
    key when not causal, so some queries have no key at all (PyTorch's training path then
    gives a zero context, the output out_proj.bias, and no gradient; its inference fast path
    would give NaN)."""
    mha = torch.nn.MultiheadAttention(dim, heads, bias=bias, batch_first=True)
    params = {"in_proj_weight": mha.in_proj_weight}
    if bias:
        with torch.no_grad():  # PyTorch starts the biases at 0: make them matter
            mha.in_proj_bias.copy_(torch.randn(3 * dim) * 0.5)
            mha.out_proj.bias.copy_(torch.randn(dim) * 0.5)
        params["in_proj_bias"] = mha.in_proj_bias
    params["out_proj.weight"] = mha.out_proj.weight
    if bias:
        params["out_proj.bias"] = mha.out_proj.bias
    mha.train()
    cross = tk is not None
    tk = tk if cross else tq
    inputs = [torch.randn(n, tq, dim)]
    if cross:
        inputs.append(torch.randn(n, tk, dim))
    if mask:
        keep = (torch.rand(n, tk) > 0.35).to(torch.int32)
        keep[:, 0] = 1
        keep[0, :] = 1  # one sample without padding
        if no_keys:
            keep[-1, 0] = 0
            if not causal:
                keep[-1, :] = 0
        inputs.append(keep if mask == "i32" else keep.to(torch.float32))
    attn_mask = torch.triu(torch.ones(tq, tk, dtype=torch.bool), 1) if causal else None

    def fn(*xs):
        q = xs[0]
        kv = xs[1] if cross else q
        kpm = (xs[-1] == 0) if mask else None
        y, _ = mha(q, kv, kv, key_padding_mask=kpm, attn_mask=attn_mask, need_weights=False)
        return y

    run_case(out_dir, name, config, inputs, fn, params)


def llama_rotary(pos, dh, theta):
    """cos, sin [n, T, dh] as transformers' LlamaRotaryEmbedding (default rope type, scaling
    1): inv_freq = 1 / theta^(arange(0, dh, 2) / dh), angles pos * inv_freq in float32, the
    half repeated (rotate_half pairs i with i + dh/2)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, dh, 2, dtype=torch.int64).float() / dh))
    freqs = (inv_freq[None, :, None].float() @ pos[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def llama_attention_case(out_dir, name, config, n, t, dim, heads, kv_heads, theta, bias=False,
                         packed=False, named=False):
    """transformers' LlamaAttention (eager: q/k/v_proj, rotary embedding, repeat_kv, causal
    softmax, o_proj) written out, gpipe's in_proj_weight being q_proj, k_proj and v_proj
    stacked. packed: rows of several sentences, positions restarting at each, the last token
    of the last sample padding (segment 0: its output is out_proj.bias alone); inputs [x, seg,
    pos], else [x, pos] (named: the same with inputs: [query, pos])."""
    dh = dim // heads
    grp = heads // kv_heads
    nq = (heads + 2 * kv_heads) * dh
    w_in = torch.nn.Parameter(torch.randn(nq, dim) / math.sqrt(dim))
    w_out = torch.nn.Parameter(torch.randn(dim, dim) / math.sqrt(dim))
    params = {"in_proj_weight": w_in}
    if bias:
        b_in = torch.nn.Parameter(torch.randn(nq) * 0.5)
        b_out = torch.nn.Parameter(torch.randn(dim) * 0.5)
        params["in_proj_bias"] = b_in
    params["out_proj.weight"] = w_out
    if bias:
        params["out_proj.bias"] = b_out
    x = torch.randn(n, t, dim)
    if packed:
        seg = torch.ones(n, t, dtype=torch.int32)
        pos = torch.zeros(n, t, dtype=torch.int32)
        for b in range(n):
            cut = 2 + b  # sentence 1 [0, cut), 2 [cut, t)
            seg[b, cut:] = 2
            pos[b, :cut] = torch.arange(cut)
            pos[b, cut:] = torch.arange(t - cut)
        seg[-1, -1] = 0
        inputs = [x, seg, pos]
    else:
        pos = (torch.arange(t) + 3 * torch.arange(n)[:, None]).to(torch.int32)  # offsets too
        inputs = [x, pos]

    def fn(*xs):
        h = xs[0]
        p = xs[-1].long()
        proj = F.linear(h, w_in, b_in if bias else None)
        q = proj[..., : heads * dh].view(n, t, heads, dh).transpose(1, 2)
        k = proj[..., heads * dh: (heads + kv_heads) * dh].view(n, t, kv_heads, dh).transpose(1, 2)
        v = proj[..., (heads + kv_heads) * dh:].view(n, t, kv_heads, dh).transpose(1, 2)
        cos, sin = llama_rotary(p, dh, theta)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k[:, :, None].expand(n, kv_heads, grp, t, dh).reshape(n, heads, t, dh)  # repeat_kv
        v = v[:, :, None].expand(n, kv_heads, grp, t, dh).reshape(n, heads, t, dh)
        keep = torch.tril(torch.ones(t, t, dtype=torch.bool))[None, None]
        if packed:
            sg = xs[1]
            keep = keep & ((sg[:, :, None] == sg[:, None, :]) & (sg[:, None, :] != 0))[:, None]
        sc = (q @ k.transpose(2, 3)) / math.sqrt(dh)
        pr = torch.softmax(sc.masked_fill(~keep, torch.finfo(sc.dtype).min), dim=-1) * keep
        ctx = (pr @ v).transpose(1, 2).reshape(n, t, dim)
        return F.linear(ctx, w_out, b_out if bias else None)

    run_case(out_dir, name, config, inputs, fn, params)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "layers")
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(20240601)
    torch.use_deterministic_algorithms(True)

    x = lambda *s: torch.randn(*s)
    run_case(out_dir, "identity", "{type: identity}", [x(2, 2, 3, 3)], lambda a: a.clone())
    run_case(out_dir, "relu", "{type: relu}", [x(2, 3, 4)], F.relu)
    run_case(out_dir, "gelu", "{type: gelu}", [x(2, 3, 4) * 2], F.gelu)
    run_case(out_dir, "gelu_tanh", "{type: gelu, approximate: tanh}", [x(2, 3, 4) * 2],
             lambda a: F.gelu(a, approximate="tanh"))
    run_case(out_dir, "tanh", "{type: tanh}", [x(2, 3, 4) * 2], torch.tanh)
    run_case(out_dir, "sigmoid", "{type: sigmoid}", [x(2, 3, 4) * 2], torch.sigmoid)
    run_case(out_dir, "flatten", "{type: flatten}", [x(2, 2, 3, 4)],
             lambda a: torch.flatten(a, 1))

    lin = torch.nn.Linear(5, 4)
    run_case(out_dir, "linear_3d", "{type: linear, out_features: 4}", [x(2, 3, 5)], lin,
             {"weight": lin.weight, "bias": lin.bias})
    lin = torch.nn.Linear(6, 3, bias=False)
    run_case(out_dir, "linear_nobias", "{type: linear, out_features: 3, bias: false}",
             [x(3, 6)], lin, {"weight": lin.weight})

    conv_case(out_dir, "conv2d_3x3", "{type: conv2d, out_channels: 4, kernel: 3}",
              3, 6, 6, 4, 3)
    conv_case(out_dir, "conv2d_stride2_pad1",
              "{type: conv2d, out_channels: 4, kernel: 3, stride: 2, padding: 1}",
              3, 7, 7, 4, 3, stride=2, padding=1)
    conv_case(out_dir, "conv2d_dilation2",
              "{type: conv2d, out_channels: 3, kernel: 3, dilation: 2, padding: 2}",
              2, 7, 8, 3, 3, padding=2, dilation=2)
    conv_case(out_dir, "conv2d_groups2",
              "{type: conv2d, out_channels: 6, kernel: 3, groups: 2, padding: 1}",
              4, 5, 5, 6, 3, padding=1, groups=2)
    conv_case(out_dir, "conv2d_depthwise",
              "{type: conv2d, out_channels: 4, kernel: 3, groups: 4, padding: 1, stride: 2}",
              4, 7, 7, 4, 3, stride=2, padding=1, groups=4)
    conv_case(out_dir, "conv2d_1x7",
              "{type: conv2d, out_channels: 4, kernel: [1, 7], padding: [0, 3]}",
              3, 5, 9, 4, (1, 7), padding=(0, 3))
    conv_case(out_dir, "conv2d_7x1",
              "{type: conv2d, out_channels: 4, kernel: [7, 1], padding: [3, 0]}",
              3, 9, 5, 4, (7, 1), padding=(3, 0))
    conv_case(out_dir, "conv2d_nobias",
              "{type: conv2d, out_channels: 5, kernel: 1, bias: false}",
              3, 4, 4, 5, 1, bias=False)
    conv_case(out_dir, "conv2d_rect_stride",
              "{type: conv2d, out_channels: 3, kernel: [3, 2], stride: [2, 1], padding: [1, 0]}",
              2, 7, 5, 3, (3, 2), stride=(2, 1), padding=(1, 0))

    for training in (True, False):
        bn = torch.nn.BatchNorm2d(3, eps=1e-5, momentum=0.1)
        with torch.no_grad():
            bn.weight.copy_(torch.rand(3) + 0.5)
            bn.bias.copy_(torch.randn(3) * 0.5)
            bn.running_mean.copy_(torch.randn(3) * 0.3)
            bn.running_var.copy_(torch.rand(3) + 0.5)
        bn.train(training)
        params = {"weight": bn.weight, "bias": bn.bias, "running_mean": bn.running_mean,
                  "running_var": bn.running_var}
        after = {"running_mean": lambda: bn.running_mean, "running_var": lambda: bn.running_var}
        run_case(out_dir, "batchnorm_" + ("train" if training else "eval"),
                 "{type: batchnorm, eps: 1.0e-5, momentum: 0.1}", [x(4, 3, 4, 4) * 2 + 1], bn,
                 params, training=training, after=after, backward=training)

    ln = torch.nn.LayerNorm(8, eps=1e-5)
    with torch.no_grad():
        ln.weight.copy_(torch.rand(8) + 0.5)
        ln.bias.copy_(torch.randn(8) * 0.5)
    run_case(out_dir, "layernorm", "{type: layernorm, eps: 1.0e-5}", [x(2, 3, 8) * 2 + 0.5], ln,
             {"weight": ln.weight, "bias": ln.bias})

    run_case(out_dir, "maxpool_2", "{type: maxpool, kernel: 2, stride: 2}", [x(2, 2, 6, 6)],
             lambda a: F.max_pool2d(a, 2, 2))
    run_case(out_dir, "maxpool_3_s2_p1", "{type: maxpool, kernel: 3, stride: 2, padding: 1}",
             [x(2, 2, 7, 7)], lambda a: F.max_pool2d(a, 3, 2, 1))
    run_case(out_dir, "avgpool_2", "{type: avgpool, kernel: 2, stride: 2}", [x(2, 2, 6, 6)],
             lambda a: F.avg_pool2d(a, 2, 2))
    run_case(out_dir, "avgpool_3_s2_p1", "{type: avgpool, kernel: 3, stride: 2, padding: 1}",
             [x(2, 2, 7, 7)], lambda a: F.avg_pool2d(a, 3, 2, 1, count_include_pad=False))
    run_case(out_dir, "avgpool_3_s2_p1_count_pad",
             "{type: avgpool, kernel: 3, stride: 2, padding: 1, count_pad: true}",
             [x(2, 2, 7, 7)], lambda a: F.avg_pool2d(a, 3, 2, 1, count_include_pad=True))
    run_case(out_dir, "global_avgpool", "{type: global_avgpool}", [x(2, 3, 4, 5)],
             lambda a: a.mean(dim=(2, 3)))

    run_case(out_dir, "add_3", "{type: add}", [x(2, 2, 3, 3), x(2, 2, 3, 3), x(2, 2, 3, 3)],
             lambda a, b, c: a + b + c)
    run_case(out_dir, "concat_3", "{type: concat, axis: 0}",
             [x(2, 2, 3, 3), x(2, 3, 3, 3), x(2, 1, 3, 3)], lambda a, b, c: torch.cat([a, b, c], 1))
    run_case(out_dir, "pad_channels", "{type: pad, channels: [1, 2]}", [x(2, 2, 3, 3)],
             lambda a: F.pad(a, (0, 0, 0, 0, 1, 2)))

    loss_case(out_dir, "softmax_cross_entropy", "{type: softmax_cross_entropy}", 6, 5, 0.0)
    loss_case(out_dir, "softmax_cross_entropy_smooth",
              "{type: softmax_cross_entropy, label_smoothing: 0.1}", 6, 5, 0.1)

    # ---- Transformer layers (appended: the cases above keep their random draws) ----
    embedding_case(out_dir, "embedding", "{type: embedding, num_embeddings: 11, dim: 6}", 11, 6,
                   torch.randint(0, 11, (3, 5)))
    ids = torch.randint(0, 10, (2, 7))
    ids[0, 1] = ids[1, 3] = ids[1, 4] = 2  # the padding row, several times
    ids[0, 2] = ids[0, 5] = ids[1, 0] = 7  # a row used more than once
    embedding_case(out_dir, "embedding_pad_scale",
                   "{type: embedding, num_embeddings: 10, dim: 12, padding_idx: 2, scale: true}",
                   10, 12, ids, padding_idx=2, scale=True)
    ids = torch.randint(0, 9, (2, 3, 4))
    ids[1, 2, 0] = 8
    embedding_case(out_dir, "embedding_negpad_3d",
                   "{type: embedding, num_embeddings: 9, dim: 5, padding_idx: -1}", 9, 5, ids,
                   padding_idx=-1)

    for dim, max_len, tlen in ((12, 9, 5), (7, 6, 6)):
        pe = sinusoid_table(max_len, dim)
        run_case(out_dir, f"positional_sinusoidal_{dim}",
                 f"{{type: positional, max_len: {max_len}}}", [x(2, tlen, dim)],
                 lambda a, pe=pe, t=tlen: a + pe[:t], {"pe": pe})
    w = torch.nn.Parameter(torch.randn(8, 12))
    run_case(out_dir, "positional_learned", "{type: positional, kind: learned, max_len: 8}",
             [x(3, 5, 12)], lambda a: a + w[:5], {"weight": w})

    attention_case(out_dir, "attention_self_h1", "{type: attention, heads: 1}", 2, 4, 8, 1)
    attention_case(out_dir, "attention_self_h3", "{type: attention, heads: 3, dim: 12}", 2, 5, 12,
                   3)
    attention_case(out_dir, "attention_self_nobias_h2", "{type: attention, heads: 2, bias: false}",
                   2, 5, 12, 2, bias=False)
    attention_case(out_dir, "attention_causal_h4", "{type: attention, heads: 4, causal: true}", 2,
                   5, 12, 4, causal=True)
    attention_case(out_dir, "attention_self_mask_i32_h3", "{type: attention, heads: 3}", 3, 5, 12,
                   3, mask="i32")
    attention_case(out_dir, "attention_causal_mask_f32_h6",
                   "{type: attention, heads: 6, causal: true}", 3, 5, 12, 6, mask="f32",
                   causal=True)
    attention_case(out_dir, "attention_cross_h3", "{type: attention, heads: 3}", 2, 5, 12, 3,
                   tk=7)
    attention_case(out_dir, "attention_cross_mask_i32_nobias_h2",
                   "{type: attention, heads: 2, bias: false}", 3, 4, 12, 2, bias=False, tk=6,
                   mask="i32")
    attention_case(out_dir, "attention_cross_causal_mask_f32_h3",
                   "{type: attention, heads: 3, causal: true}", 2, 5, 12, 3, tk=6, mask="f32",
                   causal=True)
    attention_case(out_dir, "attention_no_keys_i32_h2", "{type: attention, heads: 2}", 3, 4, 8, 2,
                   mask="i32", no_keys=True)
    attention_case(out_dir, "attention_causal_no_keys_f32_h2",
                   "{type: attention, heads: 2, causal: true}", 3, 4, 8, 2, mask="f32",
                   causal=True, no_keys=True)

    # ---- NaN inputs (appended): PyTorch propagates them, so a diverged value stays visible ----
    # max pooling: a window with a NaN gives NaN and its gradient goes to the NaN; a NaN at each
    # of the four places of a 2x2 window (the unrolled 2x2 stride-2 path), and the general path.
    # (With two NaNs in a window PyTorch's CPU kernel sends the gradient to the last one, ours to
    # the first: not tested, the values are NaN either way.)
    nan = float("nan")
    a = x(2, 2, 4, 6)
    a[0, 0, 0, 0] = a[0, 0, 0, 3] = a[0, 1, 1, 4] = a[1, 0, 3, 1] = nan
    run_case(out_dir, "maxpool_2_nan", "{type: maxpool, kernel: 2, stride: 2}", [a],
             lambda a: F.max_pool2d(a, 2, 2))
    a = x(1, 2, 5, 5)
    a[0, 0, 1, 1] = a[0, 1, 4, 4] = nan
    run_case(out_dir, "maxpool_3_s2_p1_nan", "{type: maxpool, kernel: 3, stride: 2, padding: 1}",
             [a], lambda a: F.max_pool2d(a, 3, 2, 1))
    # relu: NaN in, NaN out, and the gradient passes (threshold_backward zeroes only y <= 0)
    a = x(2, 3, 4)
    a[0, 0, 1] = a[1, 2, 3] = a[1, 0, 0] = nan
    run_case(out_dir, "relu_nan", "{type: relu}", [a], F.relu)

    # ---- float64 references (appended) where float32 rounding is large ----
    # layernorm of rows whose mean is 1e5 (1e3) times their spread: a mean from a plain float32
    # sum is off by several ulp of it, which every output inherits
    for tag, off, sc, cols in (("1e5", 1e5, 1.0, 1000), ("1e3", 1e3, 1e-2, 33)):
        a = x(3, 2, cols) * sc + off
        w, b = torch.rand(cols) + 0.5, torch.randn(cols) * 0.5
        f64_case(out_dir, f"layernorm_offset_{tag}_f64", "{type: layernorm, eps: 1.0e-5}", [a],
                 lambda p, a: F.layer_norm(a, (a.shape[-1],), p["weight"], p["bias"], 1e-5),
                 {"weight": w, "bias": b})
    # batch norm of channels whose mean is 1e4 (1e3) times their spread, in training and with
    # such running statistics in evaluation: x * scale + (beta - mean * scale) cancels
    for tag, off, sc, shape in (("1e4", 1e4, 1.0, (2, 3, 7, 9)), ("1e3", 1e3, 1e-2, (16, 2, 8, 8))):
        c = shape[1]
        a = x(*shape) * sc + off
        w, b = torch.rand(c) + 0.5, torch.randn(c) * 0.5
        rm, rv = off + torch.randn(c) * sc, (torch.rand(c) + 0.5) * sc * sc
        for training in (True, False):
            f64_case(out_dir, f"batchnorm_offset_{tag}_{'train' if training else 'eval'}_f64",
                     "{type: batchnorm, eps: 1.0e-5, momentum: 0.1}", [a],
                     lambda p, a, tr=training: F.batch_norm(
                         a, p["running_mean"].clone(), p["running_var"].clone(), p["weight"],
                         p["bias"], tr, 0.1, 1e-5),
                     {"weight": w, "bias": b}, {"running_mean": rm, "running_var": rv}, training)

    # ---- Llama's layers (appended, with their own seed so the cases above keep theirs) ----
    torch.manual_seed(20261129)

    def llama_rmsnorm(weight, eps):
        """transformers' LlamaRMSNorm.forward, written out (transformers is not needed)."""
        def fn(hidden_states):
            input_dtype = hidden_states.dtype
            hidden_states = hidden_states.to(torch.float32)
            variance = hidden_states.pow(2).mean(-1, keepdim=True)
            hidden_states = hidden_states * torch.rsqrt(variance + eps)
            return weight * hidden_states.to(input_dtype)
        return fn

    w = torch.nn.Parameter(torch.rand(16) + 0.5)
    run_case(out_dir, "rmsnorm", "{type: rmsnorm}", [x(2, 3, 16) * 2 + 0.5],
             llama_rmsnorm(w, 1e-6), {"weight": w})
    # 19 features: a tail after the 8-float loops; rows of small values, where eps matters
    w = torch.nn.Parameter(torch.rand(19) + 0.5)
    run_case(out_dir, "rmsnorm_eps_tail", "{type: rmsnorm, eps: 1.0e-2}", [x(3, 19) * 0.1],
             llama_rmsnorm(w, 1e-2), {"weight": w})
    a = x(2, 3, 13) * 4
    a[0, 0, 0], a[0, 0, 1], a[1, 2, 3] = -100.0, 100.0, -90.0  # where e^-x overflows
    run_case(out_dir, "silu", "{type: silu}", [a], F.silu)
    run_case(out_dir, "mul", "{type: mul}", [x(2, 3, 5), x(2, 3, 5)], torch.mul)
    # ---- Llama attention (appended): rotary positions and grouped-query heads ----
    torch.manual_seed(20261129)
    llama_attention_case(out_dir, "attention_llama_gqa_rope",
                         "{type: attention, heads: 4, kv_heads: 2, bias: false, causal: true, "
                         "rope: {theta: 10000}}", 2, 7, 32, 4, 2, 10000.0)
    llama_attention_case(out_dir, "attention_llama_mqa_rope_packed",
                         "{type: attention, heads: 4, kv_heads: 1, bias: false, causal: true, "
                         "mask: segments, rope: {theta: 500000}}", 3, 8, 32, 4, 1, 500000.0,
                         packed=True)
    llama_attention_case(out_dir, "attention_llama_gqa_rope_bias_named",
                         "{type: attention, heads: 6, kv_heads: 3, causal: true, "
                         "rope: {theta: 1000}, inputs: [query, pos]}", 2, 6, 48, 6, 3, 1000.0,
                         bias=True, named=True)

    # ---- U-Net and shape layers, losses of f32 targets (appended, with their own seed) ----
    torch.manual_seed(20261130)
    run_case(out_dir, "reshape", "{type: reshape, shape: [6, -1, 5]}", [x(2, 4, 6, 5)],
             lambda a: a.reshape(a.shape[0], 6, -1, 5))
    # [C, H, W] to [H, W, C] (channels last), and [T, H, D] to [H, T, D] (heads first)
    run_case(out_dir, "permute_chw_hwc", "{type: permute, axes: [1, 2, 0]}", [x(2, 3, 4, 5)],
             lambda a: a.permute(0, 2, 3, 1).contiguous())
    run_case(out_dir, "permute_heads", "{type: permute, axes: [1, 0, -1]}", [x(2, 5, 2, 4)],
             lambda a: a.permute(0, 2, 1, 3).contiguous())
    w, b = torch.nn.Parameter(torch.rand(8) + 0.5), torch.nn.Parameter(torch.randn(8))
    run_case(out_dir, "groupnorm", "{type: groupnorm, groups: 4}", [x(2, 8, 5, 5) * 2 + 1],
             lambda a: F.group_norm(a, 4, w, b, 1e-5), {"weight": w, "bias": b})
    w, b = torch.nn.Parameter(torch.rand(6) + 0.5), torch.nn.Parameter(torch.randn(6))
    run_case(out_dir, "groupnorm_eps_1d", "{type: groupnorm, groups: 3, eps: 1.0e-3}",
             [x(3, 6, 7) * 0.1], lambda a: F.group_norm(a, 3, w, b, 1e-3),
             {"weight": w, "bias": b})
    a = x(3, 4, 5)
    eltloss_case(out_dir, "mse", "{type: mse}", a, a + torch.randn(3, 4, 5), F.mse_loss)
    eltloss_case(out_dir, "l1", "{type: l1}", a, a + torch.rand(3, 4, 5) * 2 - 1, F.l1_loss)
    a = x(2, 3, 4, 4) * 3
    a[0, 0, 0, 0], a[1, 2, 3, 3] = 40.0, -40.0  # where e^-x or e^x overflows a naive form
    eltloss_case(out_dir, "bce_with_logits", "{type: bce_with_logits}", a,
                 torch.rand(2, 3, 4, 4), F.binary_cross_entropy_with_logits)
    # per-pixel segmentation: [C, H, W] logits, [H, W] labels (PyTorch's class axis 1 of N, C, ...)
    z = torch.randn(2, 5, 3, 4, requires_grad=True)
    lab = torch.randint(0, 5, (2, 3, 4), dtype=torch.int64)
    lab[0, 1, 2] = -100  # ignored
    per = F.cross_entropy(z, lab, reduction="none")
    mean = F.cross_entropy(z, lab)
    mean.backward()
    write_safetensors(os.path.join(out_dir, "softmax_cross_entropy_axis0.safetensors"),
                      {"x0": z.detach(), "x1": lab.to(torch.int32), "y": per.detach(),
                       "loss": mean.detach().reshape(1), "dx0": z.grad},
                      {"config": "{type: softmax_cross_entropy, axis: 0}", "training": "true",
                       "backward": "true", "loss": "true", "torch": torch.__version__})
    # ---- U-Net decoders' layers (appended, with their own seed) ----
    torch.manual_seed(20261130)

    def convt_case(name, config, c, h, w, k, kernel, n=2, bias=True, **kw):
        conv = torch.nn.ConvTranspose2d(c, k, kernel, bias=bias, **kw)
        params = {"weight": conv.weight}
        if bias:
            params["bias"] = conv.bias
        run_case(out_dir, name, config, [x(n, c, h, w)], conv, params)

    convt_case("conv_transpose2d_k2s2",
               "{type: conv_transpose2d, out_channels: 4, kernel: 2, stride: 2}", 6, 4, 5, 4, 2,
               stride=2)
    convt_case("conv_transpose2d_s2p1op1",
               "{type: conv_transpose2d, out_channels: 3, kernel: 3, stride: 2, padding: 1, "
               "output_padding: 1}", 4, 5, 4, 3, 3, stride=2, padding=1, output_padding=1)
    convt_case("conv_transpose2d_groups_dilation",
               "{type: conv_transpose2d, out_channels: 6, kernel: [3, 2], stride: [2, 3], "
               "dilation: [2, 1], groups: 3, output_padding: [1, 2], bias: false}", 6, 4, 3, 6,
               (3, 2), stride=(2, 3), dilation=(2, 1), groups=3, output_padding=(1, 2),
               bias=False)

    def up(**kw):
        return lambda a: F.interpolate(a, **kw)

    run_case(out_dir, "upsample_nearest_x2", "{type: upsample, scale_factor: 2}", [x(2, 3, 4, 5)],
             up(scale_factor=2, mode="nearest"))
    run_case(out_dir, "upsample_nearest_size", "{type: upsample, size: [7, 11]}",
             [x(2, 3, 4, 5)], up(size=(7, 11), mode="nearest"))
    run_case(out_dir, "upsample_nearest_x1_5", "{type: upsample, scale_factor: 1.5}",
             [x(2, 2, 5, 7)], up(scale_factor=1.5, mode="nearest"))
    run_case(out_dir, "upsample_bilinear_x2", "{type: upsample, mode: bilinear, scale_factor: 2}",
             [x(2, 3, 4, 5)], up(scale_factor=2, mode="bilinear", align_corners=False))
    run_case(out_dir, "upsample_bilinear_size",
             "{type: upsample, mode: bilinear, size: [9, 6]}", [x(2, 3, 4, 5)],
             up(size=(9, 6), mode="bilinear", align_corners=False))
    run_case(out_dir, "upsample_bilinear_x1_7", "{type: upsample, mode: bilinear, scale_factor: 1.7}",
             [x(2, 2, 5, 7)], up(scale_factor=1.7, mode="bilinear", align_corners=False))
    run_case(out_dir, "upsample_bilinear_align_x2",
             "{type: upsample, mode: bilinear, scale_factor: 2, align_corners: true}",
             [x(2, 3, 4, 5)], up(scale_factor=2, mode="bilinear", align_corners=True))
    run_case(out_dir, "upsample_bilinear_align_size",
             "{type: upsample, mode: bilinear, size: [7, 3], align_corners: true}",
             [x(2, 3, 4, 5)], up(size=(7, 3), mode="bilinear", align_corners=True))
    # conv1d (appended, with its own seed)
    torch.manual_seed(20261131)
    conv = torch.nn.Conv1d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2)
    run_case(out_dir, "conv1d_s2p2d2g2",
             "{type: conv1d, out_channels: 6, kernel: 3, stride: 2, padding: 2, dilation: 2, "
             "groups: 2}", [x(2, 4, 11)], conv, {"weight": conv.weight, "bias": conv.bias})
    conv = torch.nn.Conv1d(5, 3, 4, bias=False)
    run_case(out_dir, "conv1d_nobias", "{type: conv1d, out_channels: 3, kernel: 4, bias: false}",
             [x(3, 5, 9)], conv, {"weight": conv.weight})


if __name__ == "__main__":
    main()
