#!/usr/bin/env python3
"""PyTorch eager baseline for gpipe's single-device training throughput (issue 7).

Reads one of gpipe's model files (models/*.yaml), builds the same network in torch.nn
(parameter names are gpipe's layer paths, so the parameter count can be checked against
gpipe's), and times full training steps (forward, loss, backward, optimizer step) of the
file's batch, optimizer and loss on random data, as gpipe-bench does. Prints the parameter
count and one JSON line of results.

    scripts/torch_compare.py models/resnet56-cifar.yaml --device cuda:0 --precision bf16

A second mode evaluates a sequence model's test split with gpipe's saved weights, to show
that both networks are the same function (the loss and token accuracy gpipe-train printed):

    scripts/torch_compare.py models/transformer-lm.yaml --eval-text DATA_DIR --load W.safetensors

A third mode turns the raw outputs of scripts/compare-torch.sh into its table:

    scripts/torch_compare.py --report OUT_DIR/raw [--peak-tflops 67,989] [--gpu NAME]

See docs/torch-compare.md for what is compared and how.
"""

import argparse
import ast
import json
import math
import operator
import os
import random
import re
import statistics
import sys
import time

import torch_compare_layers as tcl
from torch_compare_layers import SpecError

# ---- the model file ------------------------------------------------------------------------

ENTRY_KEYS = {"name", "from", "repeat", "type"}
BLOCK_ENTRY_KEYS = {"block", "name", "from", "repeat"}
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Layer types this script builds, with the settings it understands (gpipe's names and
# defaults, layers/*.c). Anything else is refused rather than approximated.
SETTINGS = {
    "identity": {},
    "relu": {},
    "tanh": {},
    "sigmoid": {},
    "gelu": {"approximate": "none"},
    "flatten": {},
    "dropout": {"p": 0.5},
    "linear": {"out_features": None, "bias": True, "init": "default"},
    "conv2d": {
        "out_channels": None,
        "kernel": None,
        "stride": 1,
        "padding": 0,
        "dilation": 1,
        "groups": 1,
        "bias": True,
        "init": "default",
    },
    "batchnorm": {"eps": 1e-5, "momentum": 0.1},
    "maxpool": {"kernel": None, "stride": None, "padding": 0},
    "avgpool": {"kernel": None, "stride": None, "padding": 0, "count_pad": False},
    "global_avgpool": {},
    "add": {},
    "concat": {"axis": 0},
    "pad": {"channels": None},
    "softmax_cross_entropy": {"label_smoothing": 0.0, "ignore_index": -100},
    "layernorm": {"eps": 1e-5},
    "embedding": {"num_embeddings": None, "dim": None, "padding_idx": None, "scale": False},
    "positional": {"max_len": None, "kind": "sinusoidal"},
    "attention": {
        "heads": None,
        "dim": 0,
        "bias": True,
        "causal": False,
        "mask": "padding",
        "dropout": 0.0,
    },
}
# Settings whose default is "none" rather than "required".
OPTIONAL = {("maxpool", "stride"), ("avgpool", "stride"), ("embedding", "padding_idx")}
# issue 51's layers and settings (scripts/torch_compare_layers.py)
SETTINGS.update(tcl.SETTINGS)
for _t, _more in tcl.MORE.items():
    SETTINGS[_t].update(_more)
SETTINGS.update({k: {} for k in tcl.F32_LOSSES})
OPTIONAL |= tcl.OPTIONAL

# The sequence inputs by name, as gpipe's data/seqfeed.c reads them: a language model has
# tokens (+ seg and pos, or mask) and label; a translation model src and tgt_in with theirs.
SEQ_ROLES = {
    "tokens": ("tgt", "ids"), "mask": ("tgt", "mask"), "seg": ("tgt", "seg"),
    "pos": ("tgt", "pos"), "src": ("src", "ids"), "src_mask": ("src", "mask"),
    "src_seg": ("src", "seg"), "src_pos": ("src", "pos"), "tgt_in": ("tgt", "ids"),
    "tgt_mask": ("tgt", "mask"), "tgt_seg": ("tgt", "seg"), "tgt_pos": ("tgt", "pos"),
}


def apply_set(doc, text):
    """--set key.path=value, as gpipe's overrides: mapping keys and list indices; a missing
    key in an existing mapping is added (and the sections gpipe creates are created)."""
    if "=" not in text:
        raise SpecError(f"--set {text}: expected key.path=value")
    path, value = text.split("=", 1)
    import yaml

    val = yaml.safe_load(value) if value != "" else ""
    keys = path.split(".")
    node = doc
    for i, k in enumerate(keys[:-1]):
        if isinstance(node, list):
            node = node[int(k)]
        else:
            if k not in node and ".".join(keys[: i + 1]) in (
                "data",
                "train",
                "pipeline",
                "train.optimizer",
                "train.schedule",
            ):
                node[k] = {}
            if k not in node:
                raise SpecError(f"--set {text}: no key '{k}'")
            if isinstance(node[k], str) and k in ("optimizer", "schedule"):
                node[k] = {"type": node[k]}  # `optimizer: sgd` is `{type: sgd}`
            node = node[k]
    last = keys[-1]
    if isinstance(node, list):
        node[int(last)] = val
    else:
        node[last] = val


def load_doc(path, sets):
    import yaml

    with open(path) as f:
        doc = yaml.safe_load(f)
    if not isinstance(doc, dict):
        raise SpecError(f"{path}: the top level is not a mapping")
    for s in sets:
        apply_set(doc, s)
    return doc


def eval_expr(text, env):
    """${expr}: + - * / // % and parentheses over numbers and block parameters, with
    Python's meanings (as gpipe's core/spec/expr.c); an integral result is an integer."""
    ops = {
        ast.Add: operator.add,
        ast.Sub: operator.sub,
        ast.Mult: operator.mul,
        ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod,
    }

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)):
            return n.value
        if isinstance(n, ast.Name):
            if n.id not in env:
                raise SpecError(f"'{text}': unknown parameter '{n.id}'")
            v = env[n.id]
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise SpecError(f"'{text}': parameter '{n.id}' is not a number")
            return v
        if isinstance(n, ast.BinOp) and type(n.op) in ops:
            return ops[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            v = ev(n.operand)
            return -v if isinstance(n.op, ast.USub) else v
        raise SpecError(f"'{text}': unsupported expression")

    v = ev(ast.parse(text, mode="eval"))
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return v


def subst(v, env):
    if isinstance(v, str):
        if v.startswith("$") and IDENT.match(v[1:]):
            if v[1:] not in env:
                raise SpecError(f"unknown block parameter '{v}'")
            return env[v[1:]]
        if len(v) >= 3 and v.startswith("${") and v.endswith("}"):
            return eval_expr(v[2:-1], env)
        return v
    if isinstance(v, list):
        return [subst(x, env) for x in v]
    if isinstance(v, dict):
        return {k: subst(x, env) for k, x in v.items()}
    return v


def pair(v, what):
    if isinstance(v, list):
        if len(v) != 2:
            raise SpecError(f"{what}: expected 2 values, got {len(v)}")
        return int(v[0]), int(v[1])
    return int(v), int(v)


class Node:
    def __init__(self, path, type_, conf, inputs, in_shapes):
        self.path, self.type, self.conf, self.inputs = path, type_, conf, inputs
        self.in_shapes = in_shapes
        self.out_shape = None
        self.out = -1  # tensor id
        self.macs = 0  # multiply-adds per sample of the forward (conv2d, linear)
        self.params = 0


def conf_of(type_, entry):
    if type_ not in SETTINGS:
        raise SpecError(
            f"layer type '{type_}' is not supported by this script "
            f"(it builds: {', '.join(sorted(SETTINGS))})"
        )
    known = SETTINGS[type_]
    conf = dict(known)
    for k, v in entry.items():
        if k in ENTRY_KEYS:
            continue
        if k not in known:
            raise SpecError(f"{type_}: setting '{k}' is not supported by this script")
        conf[k] = v
    for k, v in conf.items():
        if v is None and (type_, k) not in OPTIONAL:
            raise SpecError(f"{type_}: '{k}' is required")
    return conf


def infer(node):
    """Per-sample output shape, forward multiply-adds and trainable parameters: gpipe's
    shape rules (layers/*.c)."""
    t, c, xs = node.type, node.conf, node.in_shapes
    x = xs[0]
    if t in ("identity", "relu", "tanh", "sigmoid", "gelu", "dropout"):
        return x
    if t == "flatten":
        return (math.prod(x),)
    if t == "linear":
        n_in, n_out = x[-1], int(c["out_features"])
        node.macs = math.prod(x) // n_in * n_in * n_out
        node.params = n_in * n_out + (n_out if c["bias"] else 0)
        return x[:-1] + (n_out,)
    if t == "conv2d":
        if len(x) != 3:
            raise SpecError(f"{node.path}: conv2d expects [C, H, W], got {list(x)}")
        k, g = int(c["out_channels"]), int(c["groups"])
        kh, kw = pair(c["kernel"], "kernel")
        sh, sw = pair(c["stride"], "stride")
        ph, pw = pair(c["padding"], "padding")
        dh, dw = pair(c["dilation"], "dilation")
        oh = (x[1] + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
        ow = (x[2] + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
        node.macs = k * oh * ow * (x[0] // g) * kh * kw
        node.params = k * (x[0] // g) * kh * kw + (k if c["bias"] else 0)
        return (k, oh, ow)
    if t == "batchnorm":
        node.params = 2 * x[0]
        return x
    if t in ("maxpool", "avgpool"):
        if len(x) != 3:
            raise SpecError(f"{node.path}: {t} expects [C, H, W], got {list(x)}")
        kh, kw = pair(c["kernel"], "kernel")
        sh, sw = pair(c["stride"] if c["stride"] is not None else c["kernel"], "stride")
        ph, pw = pair(c["padding"], "padding")
        return (x[0], (x[1] + 2 * ph - kh) // sh + 1, (x[2] + 2 * pw - kw) // sw + 1)
    if t == "global_avgpool":
        return (x[0],)
    if t == "add":
        for s in xs[1:]:
            if s != x:
                raise SpecError(f"{node.path}: add of shapes {list(x)} and {list(s)}")
        return x
    if t == "concat":
        ax = int(c["axis"])
        ax = ax + len(x) if ax < 0 else ax
        out = list(x)
        out[ax] = sum(s[ax] for s in xs)
        return tuple(out)
    if t == "pad":
        b, a = pair(c["channels"], "channels")
        return (x[0] + b + a,) + tuple(x[1:])
    if t == "layernorm":
        node.params = 2 * x[-1]
        return x
    if t == "embedding":
        node.params = int(c["num_embeddings"]) * int(c["dim"])
        return x + (int(c["dim"]),)
    if t == "positional":
        if len(x) != 2 or x[0] > int(c["max_len"]):
            raise SpecError(f"{node.path}: positional over {list(x)}, max_len {c['max_len']}")
        node.params = int(c["max_len"]) * x[1] if c["kind"] == "learned" else 0
        return x
    if t == "attention":
        # told apart by rank as layers/attention.c: [Tq, d] queries, [Tk, d] keys/values
        kv = [s for s in xs[1:] if len(s) == 2]
        tq, d = x
        tk = kv[0][0] if kv else tq
        if len(x) != 2 or int(c["dim"]) not in (0, d) or d % int(c["heads"]):
            raise SpecError(f"{node.path}: attention over {list(x)}")
        node.macs = 2 * tq * d * d + 2 * tk * d * d + 2 * tq * tk * d
        node.params = tcl.attention_params(c, d)
        return x
    if t in tcl.SETTINGS:
        out, node.macs, node.params = tcl.infer(node)
        return out
    raise SpecError(f"{node.path}: no shape rule for {t}")


class Model:
    """The expanded model: nodes in order, tensors by id, the graph's input and output."""

    def __init__(self, path, doc):
        self.file = path
        self.doc = doc
        self.name = doc.get("name") or os.path.splitext(os.path.basename(path))[0]
        self.nodes = []
        self.shapes = []  # tensor id -> per-sample shape
        self.producer = []  # tensor id -> node index, or -1 for a model input
        self.blocks = doc.get("blocks") or {}
        inputs = doc.get("inputs")
        if not isinstance(inputs, dict) or not inputs:
            raise SpecError(f"{path}: no inputs")
        self.input_names = list(inputs)
        self.input_dtypes = []
        for name, v in inputs.items():
            shape, dtype = (v["shape"], v.get("dtype", "f32")) if isinstance(v, dict) else (v, "f32")
            self.input_dtypes.append(dtype)
            self.new_tensor(tuple(int(d) for d in shape), -1)
        self.label_input = self.find_label()
        self.data_inputs = [i for i in range(len(self.input_names)) if i != self.label_input]
        xs = self.data_inputs
        self.sequence = all(self.input_names[i] in SEQ_ROLES for i in xs)
        if self.sequence:
            if doc.get("tied") and any(
                isinstance(g, dict) and g.get("enabled", True) for g in doc["tied"].values()
            ):
                raise SpecError(f"{path}: tied weights are not built by this script")
        elif len(xs) != 1 or self.input_dtypes[xs[0]] != "f32":
            raise SpecError(
                f"{path}: this script takes models of one f32 input and i32 labels (or an f32 "
                f"target), or "
                f"sequence models with gpipe's input names "
                f"(inputs: {', '.join(self.input_names)})"
            )
        top = {n: i for i, n in enumerate(self.input_names)}
        self.n_units = 0
        last = self.expand(doc["layers"], {}, top, 0, None)
        self.make_loss(doc.get("loss"), top, last)

    def new_tensor(self, shape, producer):
        self.shapes.append(shape)
        self.producer.append(producer)
        return len(self.shapes) - 1

    def find_label(self):
        for i, n in enumerate(self.input_names):
            if n in ("label", "labels"):
                return i
        if len(self.input_names) >= 2:
            return len(self.input_names) - 1
        raise SpecError(f"{self.file}: no label input")

    def resolve(self, scope, ref):
        if not isinstance(ref, str) or ref not in scope:
            raise SpecError(f"from: no tensor named '{ref}' here")
        return scope[ref]

    def expand(self, entries, env, scope, prev, prefix):
        """Entries of one scope (top level when prefix is None); returns the last output."""
        index = 0
        for raw in entries:
            e = subst(raw, env)
            if ("type" in e) == ("block" in e):
                raise SpecError(f"an entry needs exactly one of type: or block: ({raw})")
            repeat = int(e.get("repeat", 1))
            name = e.get("name")
            frm = e.get("from")
            ins0 = None
            if frm is not None:
                refs = frm if isinstance(frm, list) else [frm]
                ins0 = [self.resolve(scope, r) for r in refs]
            for r in range(repeat):
                ins = list(ins0) if ins0 else [prev]
                if r > 0:
                    ins[0] = prev
                comp = (f"{name}.{r}" if repeat > 1 else name) if name else None
                if prefix is None:
                    path = comp if comp else str(self.n_units)
                    self.n_units += 1
                else:
                    path = f"{prefix}.{comp if comp else index}"
                index += 1
                if "type" in e:
                    prev = self.add_layer(e["type"], e, ins, path)
                else:
                    prev = self.add_block(e, ins, path)
            if name:
                scope[name] = prev
        return prev

    def add_layer(self, type_, entry, ins, path):
        conf = conf_of(type_, entry)
        node = Node(path, type_, conf, ins, [self.shapes[t] for t in ins])
        if type_ == "softmax_cross_entropy":
            raise SpecError(f"{path}: softmax_cross_entropy is a loss, not a layer")
        n_in = len(ins)
        lo, hi = {"add": (2, 99), "concat": (2, 99), "attention": (1, 6), "positional": (1, 2),
                  **tcl.INPUTS}.get(type_, (1, 1))
        if not lo <= n_in <= hi:
            raise SpecError(f"{path}: {type_} with {n_in} inputs")
        node.out_shape = infer(node)
        self.nodes.append(node)
        node.out = self.new_tensor(node.out_shape, len(self.nodes) - 1)
        return node.out

    def add_block(self, e, ins, path):
        bname = e["block"]
        if bname not in self.blocks:
            raise SpecError(f"{path}: no block named '{bname}'")
        b = self.blocks[bname]
        params = b.get("params") or {}
        for k in e:
            if k not in BLOCK_ENTRY_KEYS and k not in params:
                raise SpecError(f"{path}: block '{bname}' has no parameter '{k}'")
        env = {}
        for k, dflt in params.items():
            if k in e:
                env[k] = e[k]
            elif dflt is None:
                raise SpecError(f"{path}: block '{bname}' needs parameter '{k}'")
            else:
                env[k] = subst(dflt, env)
        names = b.get("inputs") or ["in"]
        if len(names) != len(ins):
            raise SpecError(f"{path}: block '{bname}' takes {len(names)} inputs, got {len(ins)}")
        scope = dict(zip(names, ins))
        out = self.expand(b["layers"], env, scope, ins[0], path)
        if b.get("output"):
            out = self.resolve(scope, b["output"])
        return out

    def make_loss(self, loss, top, last):
        if loss is None:
            raise SpecError(f"{self.file}: no loss")
        if isinstance(loss, str):
            loss = {"type": loss}
        self.loss_type = loss.get("type")
        if self.loss_type not in ("softmax_cross_entropy",) + tcl.F32_LOSSES:
            raise SpecError(f"loss type '{self.loss_type}' is not supported by this script")
        self.loss_conf = conf_of(self.loss_type, loss)
        frm = loss.get("from")
        if frm is not None:
            ins = [self.resolve(top, r) for r in frm]
            if len(ins) != 2 or ins[1] != self.label_input:
                raise SpecError("loss: from: must be [logits, the label input]")
            last = ins[0]
        self.output = last
        logits, label = self.shapes[last], self.shapes[self.label_input]
        if self.loss_type in tcl.F32_LOSSES:
            if tuple(logits) != tuple(label) or self.input_dtypes[self.label_input] != "f32":
                raise SpecError(f"loss: {self.loss_type} of {list(logits)} against a target "
                                f"{list(label)} (f32 of the prediction's shape)")
            self.classes = 0
            return
        ax = int(self.loss_conf.get("axis", -1))
        ax = ax + len(logits) if ax < 0 else ax
        if ax != len(logits) - 1:  # the class axis moved last, as layers/softmax_xent.c
            logits = tuple(d for i, d in enumerate(logits) if i != ax) + (logits[ax],)
        if len(logits) != 1 + len(label) or tuple(logits[:-1]) != tuple(label):
            raise SpecError(
                f"loss: logits of shape {list(logits)} and labels {list(label)}; expected "
                "[classes] and [] or [T, classes] and [T]"
            )
        self.classes = logits[-1]

    def params(self):
        return sum(n.params for n in self.nodes)

    def macs(self):
        return sum(n.macs for n in self.nodes)


# ---- the torch network ---------------------------------------------------------------------


def consumers(model):
    count = [0] * len(model.shapes)
    for n in model.nodes:
        for t in n.inputs:
            count[t] += 1
    count[model.output] += 1
    return count


def seq_modules():
    """The sequence layers gpipe has and torch.nn has not as such (layers/embedding.c,
    positional.c, attention.c): same parameter names, shapes, initializations and masks."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Embedding(nn.Embedding):
        def __init__(self, vocab, dim, padding_idx, scale):
            super().__init__(vocab, dim, padding_idx=padding_idx)
            self.scale = math.sqrt(dim) if scale else 0.0
            if scale:
                with torch.no_grad():
                    nn.init.normal_(self.weight, std=dim ** -0.5)
                    if padding_idx is not None:
                        self.weight[padding_idx].zero_()

        def forward(self, ids):
            y = super().forward(ids)
            return y * self.scale if self.scale else y

    class Positional(nn.Module):
        def __init__(self, max_len, dim, learned):
            super().__init__()
            if learned:
                self.weight = nn.Parameter(torch.randn(max_len, dim))
            else:
                pos = torch.arange(max_len, dtype=torch.float32)[:, None]
                ang = pos / torch.pow(10000.0, torch.arange(0, dim, 2).float() / dim)
                pe = torch.zeros(max_len, dim)
                pe[:, 0::2] = torch.sin(ang)
                pe[:, 1::2] = torch.cos(ang[:, : dim // 2])
                self.register_buffer("pe", pe)

        def forward(self, x, pos=None):
            table = self.weight if hasattr(self, "weight") else self.pe
            return x + (table[pos] if pos is not None else table[: x.shape[1]])

    class Attention(nn.Module):
        """nn.MultiheadAttention's parameters; F.scaled_dot_product_attention with gpipe's
        masks (segments: same non-zero segment id; padding: key mask 1; causal: j <= i)."""

        def __init__(self, dim, heads, bias, causal, segments, p):
            super().__init__()
            self.h, self.causal, self.segments, self.p = heads, causal, segments, p
            self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim))
            nn.init.xavier_uniform_(self.in_proj_weight)
            self.in_proj_bias = nn.Parameter(torch.zeros(3 * dim)) if bias else None
            self.out_proj = nn.Linear(dim, dim, bias=bias)
            if bias:
                nn.init.zeros_(self.out_proj.bias)

        def forward(self, q, *rest):
            kv = next((t for t in rest if t.dim() == 3), None)
            masks = [t for t in rest if t.dim() == 2]
            B, Tq, d = q.shape
            h, dh = self.h, d // self.h
            w, b = self.in_proj_weight, self.in_proj_bias
            if kv is None:
                qkv = F.linear(q, w, b).view(B, Tq, 3, h, dh).permute(2, 0, 3, 1, 4)
                qh, kh, vh = qkv[0], qkv[1], qkv[2]
            else:
                qh = F.linear(q, w[:d], None if b is None else b[:d])
                kvp = F.linear(kv, w[d:], None if b is None else b[d:])
                Tk = kv.shape[1]
                qh = qh.view(B, Tq, h, dh).transpose(1, 2)
                kvp = kvp.view(B, Tk, 2, h, dh).permute(2, 0, 3, 1, 4)
                kh, vh = kvp[0], kvp[1]
            Tk = kh.shape[2]
            allow = None
            if self.segments:
                qs, ks = (masks[0], masks[1]) if len(masks) == 2 else (masks[0], masks[0])
                allow = (qs[:, :, None] == ks[:, None, :]) & (ks[:, None, :] != 0)
            elif masks:
                allow = (masks[0] != 0)[:, None, :].expand(B, Tq, Tk)
            if self.causal:
                tri = torch.ones(Tq, Tk, dtype=torch.bool, device=q.device).tril()
                allow = tri.expand(B, Tq, Tk) if allow is None else allow & tri
            if allow is not None:
                # gpipe gives a query with no key a context of 0; SDPA would give NaN. Such
                # queries are padding, outside the loss: letting them see key 0 costs the same.
                allow = allow.clone()
                allow[:, :, 0] |= ~allow.any(-1)
                allow = allow[:, None]
            ctx = F.scaled_dot_product_attention(
                qh, kh, vh, attn_mask=allow, dropout_p=self.p if self.training else 0.0
            )
            return self.out_proj(ctx.transpose(1, 2).reshape(B, Tq, d))

    return Embedding, Positional, Attention


def build_torch(model, inplace=True):
    """An fx GraphModule: modules for the layers with parameters or a training mode, plain
    functions for the rest, in-place ReLU and residual adds where that is safe (the input
    has no other use and its producer's backward does not need its output), as torchvision's
    ResNets do."""
    import torch
    import torch.fx as fx
    import torch.nn as nn
    import torch.nn.functional as F

    uses = consumers(model)
    g = fx.Graph()
    env = {i: g.placeholder(model.input_names[i]) for i in model.data_inputs}
    if model.sequence:
        Embedding, Positional, Attention = seq_modules()
    mods = {}
    # producers whose backward reads their input (or nothing), never their output
    out_free = ("conv2d", "batchnorm", "linear", "add")

    def can_overwrite(t):
        p = model.producer[t]
        return inplace and p >= 0 and uses[t] == 1 and model.nodes[p].type in out_free

    for node in model.nodes:
        c, t = node.conf, node.type
        a = [env[i] for i in node.inputs]
        x = node.in_shapes[0]
        if t == "identity":
            out = a[0]
        elif t == "relu":
            out = g.call_function(F.relu, (a[0],), {"inplace": can_overwrite(node.inputs[0])})
        elif t == "tanh":
            out = g.call_function(torch.tanh, (a[0],))
        elif t == "sigmoid":
            out = g.call_function(torch.sigmoid, (a[0],))
        elif t == "gelu":
            out = g.call_function(F.gelu, (a[0],), {"approximate": c["approximate"]})
        elif t == "flatten":
            out = g.call_function(torch.flatten, (a[0], 1))
        elif t == "dropout":
            mods[node.path] = nn.Dropout(float(c["p"]))
            out = g.call_module(node.path, (a[0],))
        elif t == "linear":
            m = nn.Linear(x[-1], int(c["out_features"]), bias=bool(c["bias"]))
            if c["init"] == "normal":
                tcl.init_normal(m, c)
            if c["init"] == "he":
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            mods[node.path] = m
            out = g.call_module(node.path, (a[0],))
        elif t == "conv2d":
            m = nn.Conv2d(
                x[0],
                int(c["out_channels"]),
                pair(c["kernel"], "kernel"),
                pair(c["stride"], "stride"),
                pair(c["padding"], "padding"),
                pair(c["dilation"], "dilation"),
                int(c["groups"]),
                bias=bool(c["bias"]),
            )
            if c["init"] == "he":
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            mods[node.path] = m
            out = g.call_module(node.path, (a[0],))
        elif t == "batchnorm":
            cls = {1: nn.BatchNorm1d, 2: nn.BatchNorm1d, 3: nn.BatchNorm2d, 4: nn.BatchNorm3d}
            if len(x) not in cls:
                raise SpecError(f"{node.path}: batchnorm over {list(x)}")
            mods[node.path] = cls[len(x)](x[0], eps=float(c["eps"]), momentum=float(c["momentum"]))
            out = g.call_module(node.path, (a[0],))
        elif t in ("maxpool", "avgpool"):
            k = pair(c["kernel"], "kernel")
            s = pair(c["stride"] if c["stride"] is not None else c["kernel"], "stride")
            p = pair(c["padding"], "padding")
            if t == "maxpool":
                out = g.call_function(F.max_pool2d, (a[0], k, s, p))
            else:
                out = g.call_function(
                    F.avg_pool2d, (a[0], k, s, p), {"count_include_pad": bool(c["count_pad"])}
                )
        elif t == "global_avgpool":
            out = g.call_method("mean", (a[0], (2, 3)))
        elif t == "add":
            first = node.inputs[0]
            if can_overwrite(first) and node.inputs.count(first) == 1:
                out = g.call_method("add_", (a[0], a[1]))
            else:
                out = g.call_function(torch.add, (a[0], a[1]))
            for more in a[2:]:
                out = g.call_function(torch.add, (out, more))
        elif t == "concat":
            ax = int(c["axis"])
            out = g.call_function(torch.cat, (a,), {"dim": ax + 1 if ax >= 0 else ax})
        elif t == "layernorm":
            mods[node.path] = nn.LayerNorm(x[-1], eps=float(c["eps"]))
            out = g.call_module(node.path, (a[0],))
        elif t == "embedding":
            pad = c["padding_idx"]
            mods[node.path] = Embedding(int(c["num_embeddings"]), int(c["dim"]),
                                        None if pad is None else int(pad), bool(c["scale"]))
            if c["init"] == "normal":
                tcl.init_normal(mods[node.path], c)
            out = g.call_module(node.path, (a[0],))
        elif t == "positional":
            mods[node.path] = Positional(int(c["max_len"]), x[-1], c["kind"] == "learned")
            out = g.call_module(node.path, tuple(a))
        elif t == "attention" and any(c.get(k) is not None for k in tcl.MORE["attention"]):
            roles = tcl.attention_roles(c, len(a))
            if roles is None:  # told apart by rank and count: [x] or [x, seg]; pos last
                roles = {"query": 0}
                if c["mask"] == "segments" and len(a) >= 2:
                    roles["segments"] = 1
                if c.get("rope") is not None:
                    roles["pos"] = len(a) - 1
            mods[node.path] = tcl.attention_module(node, roles)
            out = g.call_module(node.path, tuple(a))
        elif t in tcl.SETTINGS:
            out = tcl.build(g, mods, node, a)
        elif t == "attention":
            if c["mask"] not in ("padding", "segments"):
                raise SpecError(f"{node.path}: attention mask '{c['mask']}'")
            mods[node.path] = Attention(x[-1], int(c["heads"]), bool(c["bias"]),
                                        bool(c["causal"]), c["mask"] == "segments",
                                        float(c["dropout"]))
            out = g.call_module(node.path, tuple(a))
        elif t == "pad":
            before, after = pair(c["channels"], "channels")
            pad = (0, 0) * (len(x) - 1) + (before, after)
            out = g.call_function(F.pad, (a[0], pad))
        else:
            raise SpecError(f"{node.path}: {t} is not built")
        env[node.out] = out
    g.output(env[model.output])
    return fx.GraphModule(mods, g, class_name=re.sub(r"\W", "_", model.name))


# ---- timing --------------------------------------------------------------------------------


def make_optimizer(model, net, impl):
    import torch

    tr = model.doc.get("train") or {}
    o = tr.get("optimizer", "sgd")
    o = {"type": o} if isinstance(o, str) else dict(o)
    kind = o.pop("type", "sgd")
    extra = {}
    if impl == "foreach":
        extra["foreach"] = True
    elif impl == "fused":
        extra["fused"] = True
    elif impl == "single":
        extra["foreach"] = False
    params = [p for p in net.parameters() if p.requires_grad]
    # gpipe's update rules are PyTorch's (core/cpu/optim.c): SGD with L2 decay added to the
    # gradient and dampening 0, AdamW with decoupled decay, RMSprop uncentred.
    if kind == "sgd":
        known = {"lr": 0.1, "momentum": 0.0, "nesterov": False, "weight_decay": 0.0}
        hp = {**known, **o}
        opt = torch.optim.SGD(params, lr=float(hp["lr"]), momentum=float(hp["momentum"]),
                              nesterov=bool(hp["nesterov"]),
                              weight_decay=float(hp["weight_decay"]), **extra)
    elif kind == "adamw":
        known = {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}
        hp = {**known, **o}
        opt = torch.optim.AdamW(params, lr=float(hp["lr"]),
                                betas=tuple(float(b) for b in hp["betas"]), eps=float(hp["eps"]),
                                weight_decay=float(hp["weight_decay"]), **extra)
    elif kind == "rmsprop":
        known = {"lr": 0.01, "alpha": 0.99, "eps": 1e-8, "momentum": 0.0, "weight_decay": 0.0}
        hp = {**known, **o}
        if impl == "fused":
            raise SpecError("RMSprop has no fused implementation in PyTorch")
        opt = torch.optim.RMSprop(params, lr=float(hp["lr"]), alpha=float(hp["alpha"]),
                                  eps=float(hp["eps"]), momentum=float(hp["momentum"]),
                                  weight_decay=float(hp["weight_decay"]), **extra)
    else:
        raise SpecError(f"optimizer '{kind}' is not supported by this script")
    unknown = set(o) - set(known)
    if unknown:
        raise SpecError(f"optimizer {kind}: settings {sorted(unknown)} are not supported")
    return opt, kind, hp


def seq_layout(model):
    """(roles: (side, what) -> input index, row length per side, packed: segment inputs)."""
    roles = {SEQ_ROLES[model.input_names[i]]: i for i in model.data_inputs}
    lens = {side: model.shapes[roles[(side, "ids")]][0] for side in ("src", "tgt")
            if (side, "ids") in roles}
    return roles, lens, any(what == "seg" for _, what in roles)


def pack_rows(model, pairs, pad, max_rows=None):
    """Rows of the model's sequence inputs from pairs {side: (ids, labels or None)}, in order:
    a pair joins the open row while both sides have room and the model has segment inputs
    (segment ids 1, 2, ..., positions within each sentence), else opens the next row (one a
    row with mask inputs). Padding: `pad` in ids, 0 in segments, positions and masks, -100 in
    labels. Returns the rows' columns per role and their labels; stops at max_rows rows."""
    roles, lens, packed = seq_layout(model)
    rows = []
    for pair in pairs:
        row = rows[-1] if rows else None
        if row is None or not packed or any(
            row["used"][side] + len(pair[side][0]) > lens[side] for side in lens
        ):
            if max_rows is not None and len(rows) == max_rows:
                break
            row = {"used": dict.fromkeys(lens, 0), "seg": 0, "label": [-100] * lens["tgt"],
                   "cols": {k: [pad if k[1] == "ids" else 0] * lens[k[0]] for k in roles}}
            rows.append(row)
        row["seg"] += 1
        for side in lens:
            seq, lab = pair[side]
            at = row["used"][side]
            for j, t in enumerate(seq):
                for what, v in (("ids", t), ("seg", row["seg"]), ("pos", j), ("mask", 1)):
                    if (side, what) in roles:
                        row["cols"][(side, what)][at + j] = v
                if lab is not None:
                    row["label"][at + j] = lab[j]
            row["used"][side] += len(seq)
    return [{k: row["cols"][k] for k in roles} for row in rows], [row["label"] for row in rows]


def seq_tensors(model, cols, labels, torch):
    """The data inputs in the file's order, and the labels, as tensors of rows."""
    names = model.input_names
    xs = [torch.tensor([c[SEQ_ROLES[names[i]]] for c in cols]) for i in model.data_inputs]
    return xs, torch.tensor(labels)


def seq_batch(model, batch, rnd, torch):
    """`batch` packed rows of random sentences, as gpipe's synthetic sequence data
    (data/seqdata.c): lengths (EOS included) uniform in [2, L], ids in [4, V)."""
    roles, lens, _ = seq_layout(model)
    vocab = {side: int(n.conf["num_embeddings"]) for n in model.nodes for side in lens
             if n.type == "embedding" and n.inputs[0] == roles[(side, "ids")]}

    def ids(side, n, hi):
        lo = 4 if hi > 4 else 0
        return [rnd.randrange(lo, hi) for _ in range(n)]

    def pairs():
        while True:
            pair = {}
            for side in lens:
                n = rnd.randint(min(2, lens[side]), lens[side])
                seq = ids(side, n, vocab.get(side, 8))
                pair[side] = (seq, ids(side, n, model.classes) if side == "tgt" else None)
            yield pair

    cols, labels = pack_rows(model, pairs(), 0, max_rows=batch)
    return seq_tensors(model, cols, labels, torch)


def sync(torch, dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def measure(args):
    import torch
    import torch.nn.functional as F

    doc = load_doc(args.model, args.set)
    model = Model(args.model, doc)
    tr = doc.get("train") or {}
    batch = args.batch_size or int(tr.get("batch_size", 32))
    seed = int(tr.get("seed", 0))
    clip = float(tr.get("clip_grad_norm", 0) or 0)

    dev = torch.device(args.device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit(f"torch_compare: {args.device}: torch sees no CUDA device")
        torch.cuda.set_device(dev)
    if args.threads:
        torch.set_num_threads(args.threads)
    # gpipe's fp32 is true fp32 (cuBLAS default math, cuDNN FMA math): no TF32 here either.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    # gpipe's bf16 accumulates GEMM products in f32; so must cuBLAS here.
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cudnn.benchmark = True
    # gpipe runs only deterministic cuDNN algorithms; torch's default may pick others
    torch.backends.cudnn.deterministic = args.deterministic
    torch.manual_seed(seed)

    net = build_torch(model, inplace=not args.no_inplace).to(dev)
    mem_fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    if args.channels_last:
        net = net.to(memory_format=mem_fmt)
    net.train()
    n_params = sum(p.numel() for p in net.parameters() if p.requires_grad)
    print(f"parameters: {n_params}", flush=True)
    if n_params != model.params():
        raise SystemExit(f"torch_compare: built {n_params} parameters, the file has {model.params()}")
    if args.expect_params is not None and n_params != args.expect_params:
        raise SystemExit(
            f"torch_compare: {n_params} parameters, gpipe counts {args.expect_params}: "
            "the models differ"
        )
    if args.count_only:
        print(json.dumps({"model": model.name, "params": n_params,
                          "macs_per_sample": model.macs()}))
        return 0

    opt, opt_kind, opt_hp = make_optimizer(model, net, args.optimizer_impl)
    lc = model.loss_conf
    smoothing = float(lc.get("label_smoothing", 0.0))
    ignore = int(lc.get("ignore_index", -100))

    # gpipe-bench's synthetic data: uniform [-1, 1) inputs and uniform labels, 4 batches'
    # worth, made before the timing. gpipe's step takes host buffers and copies them to the
    # device inside the step; --input host does the same (from pinned memory, without
    # blocking, as a DataLoader with pin_memory would); --input device leaves them there.
    # Sequence models get packed rows of random sentences instead (seq_batch).
    g = torch.Generator().manual_seed(seed)
    rnd = random.Random(seed)
    host = []
    for _ in range(4):
        if model.sequence:
            host.append(seq_batch(model, batch, rnd, torch))
        else:
            xshape = (batch,) + model.shapes[model.data_inputs[0]]
            yshape = (batch,) + model.shapes[model.label_input]
            y = (torch.rand(yshape, generator=g) if not model.classes else
                 torch.randint(0, model.classes, yshape, generator=g))
            host.append(([torch.rand(xshape, generator=g) * 2 - 1], y))

    def place(x):
        x = x.to(dev, non_blocking=True)
        return x.contiguous(memory_format=mem_fmt) if x.dim() == 4 else x

    copy_in = args.input == "host" and dev.type == "cuda"
    if copy_in:
        batches = [([x.pin_memory() for x in xs], y.pin_memory()) for xs, y in host]
    else:
        batches = [([place(x) for x in xs], y.to(dev)) for xs, y in host]
    bf16 = args.precision == "bf16"

    def step(i):
        xs, y = batches[i % len(batches)]
        if copy_in:
            xs = [place(x) for x in xs]
            y = y.to(dev, non_blocking=True)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=bf16):
            logits = net(*xs)
            loss = tcl.loss(model.loss_type, lc, logits, y, model.classes, ignore, smoothing)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
        opt.step()
        return loss

    i = 0
    for _ in range(args.warmup):
        loss = step(i)
        i += 1
    sync(torch, dev)
    first_loss = float(loss.detach()) if args.warmup else float("nan")
    if not math.isfinite(first_loss) and args.warmup:
        raise SystemExit(f"torch_compare: the loss is {first_loss} after warm-up")
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    rates = []
    for _ in range(args.windows):
        sync(torch, dev)
        t0 = time.perf_counter()
        for _ in range(args.window_steps):
            step(i)
            i += 1
        sync(torch, dev)
        rates.append(args.window_steps * batch / (time.perf_counter() - t0))
    sps = statistics.median(rates)
    flops = 6.0 * model.macs()
    out = {
        "side": "torch",
        "model": model.name,
        "model_file": args.model,
        "device": args.device,
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "precision": args.precision,
        "batch_size": batch,
        "params": n_params,
        "macs_per_sample": model.macs(),
        "flops_per_sample": flops,
        "optimizer": opt_kind,
        "optimizer_hp": opt_hp,
        "optimizer_impl": args.optimizer_impl,
        "loss": {"label_smoothing": smoothing, "ignore_index": ignore},
        "warmup": args.warmup,
        "windows": args.windows,
        "window_steps": args.window_steps,
        "input": args.input,
        "inplace": not args.no_inplace,
        "channels_last": bool(args.channels_last),
        "threads": torch.get_num_threads(),
        "samples_per_s": sps,
        "window_samples_per_s": rates,
        "tflops": flops * sps / 1e12,
        "peak_mem_bytes": torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else 0,
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version() if dev.type == "cuda" else None,
        "tf32": torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "loss_after_warmup": first_loss,
    }
    line = json.dumps(out)
    print(line, flush=True)
    if args.json_out:
        with open(args.json_out, "a") as f:
            f.write(line + "\n")
    return 0


# ---- the same function: gpipe's weights, the test split -------------------------------------


def read_safetensors(path, torch):
    """{name: tensor} of an F32/I32/I64 safetensors file (8-byte header length, JSON header,
    raw little-endian data), without the safetensors package."""
    with open(path, "rb") as f:
        blob = f.read()
    n = int.from_bytes(blob[:8], "little")
    head = json.loads(blob[8 : 8 + n])
    dtypes = {"F32": torch.float32, "I32": torch.int32, "I64": torch.int64}
    out = {}
    for name, v in head.items():
        if name == "__metadata__":
            continue
        a, b = v["data_offsets"]
        raw = bytearray(blob[8 + n + a : 8 + n + b])
        t = torch.frombuffer(raw, dtype=dtypes[v["dtype"]]) if raw else torch.empty(0)
        out[name] = t.reshape(v["shape"]).clone()
    return out


def eval_text(args):
    """gpipe-train's test evaluation of a sequence model, in PyTorch: the weights of
    `gpipe-train --save` loaded strictly by name, the test split's sentences (pairs) packed in
    order into rows (segment ids 1, 2, ... when the model has segment inputs, else one a
    row), the file's loss summed over real tokens / their count, and the token accuracy.
    Packing changes no token's loss (attention never crosses sentences), so this is gpipe's
    number whatever its rows."""
    import torch
    import torch.nn.functional as F

    doc = load_doc(args.model, args.set)
    model = Model(args.model, doc)
    if not model.sequence:
        raise SpecError("--eval-text takes a sequence model (transformer-lm, transformer-nmt)")
    data = doc.get("data") or {}
    bos, eos, pad = (int(data.get(k, d)) for k, d in (("bos_id", 2), ("eos_id", 3), ("pad_id", 0)))
    _, lens, _ = seq_layout(model)
    sides = {"tgt": data["target"]}
    if "src" in lens:
        sides["src"] = data["source"]
    seqs = {}
    for side, lang in sides.items():
        with open(os.path.join(args.eval_text, f"test.{lang}.ids")) as f:
            ids = [[int(t) for t in ln.split()] for ln in f.read().splitlines()]
        for k, x in enumerate(ids):
            if len(x) + 1 > lens[side]:
                raise SpecError(f"test.{lang}.ids:{k + 1}: longer than the row ({lens[side]})")
        # src: ids EOS; tgt_in: BOS ids; label: ids EOS
        seqs[side] = [(x + [eos], None) if side == "src" else ([bos] + x, x + [eos]) for x in ids]
    pairs = [{side: seqs[side][k] for side in sides} for k in range(len(seqs["tgt"]))]
    cols, labels = pack_rows(model, pairs, pad)

    net = build_torch(model)
    net.load_state_dict(read_safetensors(args.load, torch), strict=True)
    net.eval()
    smoothing = float(model.loss_conf["label_smoothing"])  # gpipe evaluates the file's loss
    loss_sum, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for r0 in range(0, len(cols), 32):
            xs, y = seq_tensors(model, cols[r0 : r0 + 32], labels[r0 : r0 + 32], torch)
            y = y.reshape(-1)
            logits = net(*xs).reshape(-1, model.classes)
            real = y != -100
            loss_sum += float(F.cross_entropy(logits, y, ignore_index=-100, reduction="sum",
                                              label_smoothing=smoothing))
            correct += int((logits.argmax(-1)[real] == y[real]).sum())
            count += int(real.sum())
    out = {"model": model.name, "weights": args.load, "sentences": len(pairs),
           "rows": len(cols), "tokens": count, "loss": loss_sum / count,
           "accuracy": correct / count}
    print(json.dumps(out))
    return 0


# ---- the report of scripts/compare-torch.sh -----------------------------------------------

# NVIDIA's datasheet peaks in TFLOP/s (dense, boost clock): fp32 on the CUDA cores (our fp32
# and PyTorch's without TF32 never touch tensor cores) and bf16 on the tensor cores. H100 SXM5
# and PCIe, H100 NVL: "NVIDIA H100 Tensor Core GPU" datasheet; H200 SXM and NVL: "NVIDIA H200
# Tensor Core GPU" datasheet; A100: "NVIDIA A100 Tensor Core GPU" datasheet. The datasheets
# print bf16 "with sparsity"; dense is half of that.
PEAKS = [
    ("H200 NVL", 60.0, 835.5),
    ("H200", 67.0, 989.5),
    ("H100 NVL", 60.0, 835.5),
    ("H100 PCIe", 51.0, 756.5),
    ("H100", 67.0, 989.5),  # SXM5 ("NVIDIA H100 80GB HBM3")
    ("A100", 19.5, 312.0),
]


def peak_for(gpu):
    for key, fp32, bf16 in PEAKS:
        if key.lower() in (gpu or "").lower():
            return {"fp32": fp32, "bf16": bf16}, f"datasheet, {key}"
    return None, "unknown GPU"


def read_json(path):
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    for chunk in (text, text.strip().splitlines()[-1] if text.strip() else ""):
        try:
            return json.loads(chunk)
        except ValueError:
            continue
    return None


def fmt(v, spec):
    return "n/a" if v is None else format(v, spec)


def report(args):
    raw = args.report
    runs = {}
    # every run leaves BASE.err (and BASE.json when it produced a result)
    pat = re.compile(r"^((gpipe|torch)\.(.+)\.(fp32|bf16)\.r(\d+))\.err$")
    for f in sorted(os.listdir(raw)):
        m = pat.match(f)
        if not m:
            continue
        base, side, model, prec, rep = m.group(1), m.group(2), m.group(3), m.group(4), m.group(5)
        j = read_json(os.path.join(raw, base + ".json"))
        r = runs.setdefault((model, prec), {"gpipe": [], "torch": [], "gpipe_meta": None,
                                            "torch_meta": None, "errors": []})
        if j is None:
            with open(os.path.join(raw, f)) as ef:
                lines = [ln.strip() for ln in ef if ln.strip()]
            r["errors"].append(f"{side} r{rep}: {lines[-1] if lines else 'no result'}")
            continue
        if side == "gpipe":
            one = [x for x in j["runs"] if x["stages"] == 1 and x["micro_batches"] == 1]
            r["gpipe"].append(one[0]["samples_per_s"])
            r["gpipe_meta"] = j
        else:
            r["torch"].append(j["samples_per_s"])
            r["torch_meta"] = j
    user_peak = None
    if args.peak_tflops:
        a = [float(v) for v in args.peak_tflops.split(",")]
        user_peak = {"fp32": a[0], "bf16": a[1] if len(a) > 1 else a[0]}
    peak, peak_src = (user_peak, "--peak-tflops") if user_peak else peak_for(args.gpu)
    order = {"fashion-cnn": 0, "resnet56-cifar": 1, "fp32": 0, "bf16": 1}
    rows, out, problems = [], [], []
    for (model, prec), r in sorted(
        runs.items(), key=lambda kv: (order.get(kv[0][0], 9), kv[0][0], order[kv[0][1]])
    ):
        tm, gm = r["torch_meta"], r["gpipe_meta"]
        g = statistics.median(r["gpipe"]) if r["gpipe"] else None
        t = statistics.median(r["torch"]) if r["torch"] else None
        # the model's FLOPs per sample, counted from the file itself (not from either side)
        mfile = (tm or gm or {}).get("model_file")
        flops = 6.0 * Model(mfile, load_doc(mfile, [])).macs() if mfile else None
        batch = tm["batch_size"] if tm else (gm["batch_size"] if gm else None)
        if gm and gm.get("precision", prec) != prec:
            problems.append(f"{model} {prec}: gpipe ran in {gm['precision']}")
        if tm and gm and tm["batch_size"] != gm["batch_size"]:
            problems.append(f"{model} {prec}: gpipe's batch {gm['batch_size']}, torch's {tm['batch_size']}")
        pk = peak.get(prec) if peak else None
        if pk is None and args.cpu_peak_gflops and prec == "fp32":
            pk, psrc = args.cpu_peak_gflops / 1e3, "sgemm"
        else:
            psrc = peak_src
        mfu = lambda s: (flops * s / (pk * 1e12)) if (s and flops and pk) else None  # noqa: E731
        pg, pt = (gm["params"] if gm else None), (tm["params"] if tm else None)
        if pg is not None and pt is not None and pg != pt:
            problems.append(f"{model}: gpipe counts {pg} parameters, torch {pt}")
        row = {
            "model": model,
            "precision": prec,
            "batch_size": batch,
            "gpipe_samples_per_s": g,
            "torch_samples_per_s": t,
            "ratio": (g / t) if (g and t) else None,
            "gpipe_mfu": mfu(g),
            "torch_mfu": mfu(t),
            "gpipe_reps": r["gpipe"],
            "torch_reps": r["torch"],
            "params_gpipe": pg,
            "params_torch": pt,
            "flops_per_sample": flops,
            "gpipe_analytic_flops_per_sample": gm["flops_per_sample"] if gm else None,
            "peak_tflops": pk,
            "peak_source": psrc if pk else None,
            "errors": r["errors"],
        }
        rows.append(row)
        out.append(
            f"| {model} | {prec} | {fmt(batch, 'd')} | {fmt(g, '.1f')} | {fmt(t, '.1f')} | "
            f"{fmt(row['ratio'], '.2f')} | {fmt(row['gpipe_mfu'] and 100 * row['gpipe_mfu'], '.2f')}"
            f" | {fmt(row['torch_mfu'] and 100 * row['torch_mfu'], '.2f')} | "
            f"{fmt(pg, 'd')} / {fmt(pt, 'd')} |"
        )
    head = [
        "| model | precision | batch | gpipe samples/s | torch samples/s | ratio | gpipe MFU % "
        "| torch MFU % | params gpipe / torch |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    table = "\n".join(head + out)
    notes = [
        f"device: {args.gpu or 'unknown'}; peak: "
        + (f"{peak['fp32']} (fp32) / {peak['bf16']} (bf16) TFLOP/s, {peak_src}" if peak else
           ("measured sgemm of the cores (fp32 only)" if args.cpu_peak_gflops else "unknown")),
        "samples/s: median over the repetitions (each: gpipe-bench's batch / median step time; "
        "torch: median of timed windows); ratio = gpipe / torch.",
        "MFU: 6 x (conv2d, linear and attention multiply-adds per sample) x samples/s / peak.",
    ]
    seen = set()
    for row in rows:
        if row["model"] in seen or not row["flops_per_sample"]:
            continue
        seen.add(row["model"])
        ga = row["gpipe_analytic_flops_per_sample"]
        notes.append(
            f"{row['model']}: {row['flops_per_sample'] / 1e6:.2f} MFLOP per sample"
            + (f" (gpipe's cost model, which adds norms, pooling and element-wise work: "
               f"{ga / 1e6:.2f})" if ga else "")
        )
    for row in rows:
        for e in row["errors"]:
            notes.append(f"failed: {row['model']} {row['precision']}: {e}")
    notes += [f"MISMATCH: {p}" for p in problems]
    text = table + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    print(text, end="")
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    if args.summary:
        with open(args.summary, "w") as f:
            json.dump({"gpu": args.gpu, "peak": peak, "peak_source": peak_src, "rows": rows,
                       "problems": problems}, f, indent=1)
    return 3 if problems else 4 if any(row["errors"] for row in rows) else 0


# ---- command line --------------------------------------------------------------------------


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", help="gpipe model file (models/*.yaml)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda:N (default cpu)")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--batch-size", type=int, default=0, help="default: the file's train.batch_size")
    ap.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                    help="override a value of the model file, as gpipe's --set")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first (default 10)")
    ap.add_argument("--windows", type=int, default=5, help="timed windows (default 5)")
    ap.add_argument("--window-steps", type=int, default=20, help="steps per window (default 20)")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's)")
    ap.add_argument("--input", choices=["host", "device"], default="host",
                    help="host: each step copies its batch from pinned host memory, as gpipe's "
                    "step copies from host buffers (default); device: batches stay on the device")
    ap.add_argument("--optimizer-impl", choices=["default", "foreach", "fused", "single"],
                    default="default", help="PyTorch's optimizer implementation (default: "
                    "PyTorch's choice, foreach on CUDA)")
    ap.add_argument("--channels-last", action="store_true", help="NHWC memory format")
    ap.add_argument("--no-inplace", action="store_true", help="no in-place ReLU or residual add")
    ap.add_argument("--deterministic", action="store_true",
                    help="only deterministic cuDNN algorithms, as gpipe (default: torch's choice)")
    ap.add_argument("--expect-params", type=int, help="fail unless the count is this (gpipe's)")
    ap.add_argument("--count-only", action="store_true", help="build, print the count, exit")
    ap.add_argument("--json-out", help="also append the JSON line to this file")
    ap.add_argument("--eval-text", metavar="DIR",
                    help="evaluate the test split of this text/translation data directory "
                    "with the weights of --load (a sequence model), instead of timing")
    ap.add_argument("--load", metavar="W.safetensors",
                    help="--eval-text: the weights of gpipe-train --save")
    ap.add_argument("--report", metavar="RAW_DIR", help="make compare-torch.sh's table")
    ap.add_argument("--gpu", help="--report: the GPU's name (nvidia-smi)")
    ap.add_argument("--peak-tflops", help="--report: FP32,BF16 peaks instead of the table's")
    ap.add_argument("--cpu-peak-gflops", type=float,
                    help="--report: fp32 peak of a CPU run (gpipe-bench's sgemm x cores)")
    ap.add_argument("--md", help="--report: write the table here too")
    ap.add_argument("--summary", help="--report: write the rows as JSON here")
    args = ap.parse_args(argv)
    try:
        if args.report:
            return report(args)
        if not args.model:
            ap.error("a model file is needed (or --report DIR)")
        if args.eval_text:
            if not args.load:
                ap.error("--eval-text needs --load W.safetensors")
            return eval_text(args)
        return measure(args)
    except SpecError as e:
        msg = str(e) if str(e).startswith(str(args.model)) else f"{args.model}: {e}"
        print(f"torch_compare: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
