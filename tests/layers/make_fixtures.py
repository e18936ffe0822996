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
  x0, x1, ...   inputs with the batch as dimension 0 (labels are I32)
  param.<name>  parameter and buffer values before the step (PyTorch names)
  y             output; dy the upstream gradient (not for the loss)
  dx0, ...      input gradients; grad.<name> parameter gradients
  after.<name>  buffers after the step (batchnorm running statistics)
  loss          [1]: the mini-batch mean loss (loss layer only)

safetensors is written by hand (8-byte little-endian header length, JSON, raw data) so
that the script needs nothing beyond torch.
"""
import json
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
        for k, v in params.items():
            if v.requires_grad:
                t[f"grad.{k}"] = v.grad
    for k, v in (after or {}).items():
        t[f"after.{k}"] = v()
    meta = {"config": config, "training": "true" if training else "false",
            "backward": "true" if backward else "false", "torch": torch.__version__}
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


def conv_case(out_dir, name, config, c, h, w, k, kernel, stride=1, padding=0, dilation=1,
              groups=1, bias=True, n=2):
    conv = torch.nn.Conv2d(c, k, kernel, stride=stride, padding=padding, dilation=dilation,
                           groups=groups, bias=bias)
    params = {"weight": conv.weight}
    if bias:
        params["bias"] = conv.bias
    run_case(out_dir, name, config, [torch.randn(n, c, h, w)], conv, params)


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


if __name__ == "__main__":
    main()
