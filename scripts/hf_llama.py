#!/usr/bin/env python3
"""Converts a Hugging Face Llama checkpoint (LlamaForCausalLM: config.json of transformers 4 or
5, model.safetensors or shards with model.safetensors.index.json, f32, bf16 or f16) into a
gpipe model file (models/llama.yaml with the config's values) and a weights file that
`gpipe-train --load` reads, and back. Python's standard library and numpy only.
  hf_llama.py to-gpipe HF_DIR MODEL.yaml WEIGHTS.safetensors [--seq-len T]
  hf_llama.py to-hf WEIGHTS.safetensors CONFIG.json OUT_DIR
to-hf writes OUT_DIR/config.json (CONFIG.json's, the model's sizes checked against the
weights) and OUT_DIR/model.safetensors (f32). Names and layout: docs/llama.md."""
import json
import os
import struct
import sys

try:
    import numpy as np
except ImportError:
    sys.exit("hf_llama: needs numpy: apt-get install python3-numpy (scripts/setup.sh does), "
             "or pip install numpy")

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "I32": np.int32}


class Refused(Exception):
    pass


def read_safetensors(path):
    """{name: array} of one file: f32 (from F32, BF16, F16), or i32 (I32: token ids)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise Refused(f"{path}: not a safetensors file (shorter than its header length)")
    (n,) = struct.unpack("<Q", raw[:8])
    try:
        header = json.loads(raw[8:8 + n])
    except ValueError as e:
        raise Refused(f"{path}: its safetensors header is not JSON ({e})")
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dt, shape, (a, b) = t["dtype"], t["shape"], t["data_offsets"]
        if dt not in DTYPES:
            raise Refused(f"{path}: tensor {name} is {dt}; only F32, BF16, F16 and I32 are read")
        buf = raw[base + a:base + b]
        if dt == "BF16":  # the high half of an f32
            x = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            x = np.frombuffer(buf, np.dtype(DTYPES[dt]).newbyteorder("<"))
            x = x.astype(np.int32 if dt == "I32" else np.float32)
        out[name] = x.reshape(shape)
    return out


def write_safetensors(path, tensors):
    """tensors: {name: array}, written as f32 (i32 for integer arrays) in name order."""
    header, chunks, off = {}, [], 0
    for name in sorted(tensors):
        x = np.ascontiguousarray(tensors[name])
        x = x.astype("<i4") if x.dtype.kind in "iu" else x.astype("<f4")
        b = x.tobytes()
        header[name] = {"dtype": "I32" if x.dtype.kind == "i" else "F32",
                        "shape": list(x.shape), "data_offsets": [off, off + len(b)]}
        chunks.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in chunks:
            f.write(b)


def read_checkpoint(d):
    """All tensors of HF_DIR: model.safetensors, or the shards its index lists."""
    single = os.path.join(d, "model.safetensors")
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        out = {}
        for name in files:
            out.update(read_safetensors(os.path.join(d, name)))
        return out
    if os.path.exists(single):
        return read_safetensors(single)
    raise Refused(f"{d}: neither model.safetensors nor model.safetensors.index.json")


class Cfg:
    """The settings of config.json gpipe can represent; anything else is Refused, naming it."""

    def __init__(self, path):
        with open(path) as f:
            c = json.load(f)
        self.raw = c

        def need(key):
            if key not in c:
                raise Refused(f"{path}: {key}: missing")
            return c[key]

        mt = c.get("model_type", "llama")
        if mt != "llama":
            raise Refused(f"{path}: model_type: '{mt}' is not 'llama'")
        self.vocab = int(need("vocab_size"))
        self.d = int(need("hidden_size"))
        self.ff = int(need("intermediate_size"))
        self.layers = int(need("num_hidden_layers"))
        self.heads = int(need("num_attention_heads"))
        self.kv_heads = int(c.get("num_key_value_heads") or self.heads)
        self.eps = float(c.get("rms_norm_eps", 1e-6))
        self.tied = bool(c.get("tie_word_embeddings", False))
        self.bos, self.eos = c.get("bos_token_id", 1), c.get("eos_token_id", 2)
        if isinstance(self.eos, list):  # Llama 3 lists several; the first ends a sentence
            self.eos = self.eos[0]
        act = c.get("hidden_act", "silu")
        if act != "silu":
            raise Refused(f"{path}: hidden_act: '{act}' is not 'silu' (SwiGLU)")
        for key in ("attention_bias", "mlp_bias"):
            if c.get(key):
                raise Refused(f"{path}: {key}: true is not supported (Llama has no biases)")
        if self.d % self.heads or self.heads % self.kv_heads:
            raise Refused(f"{path}: num_attention_heads: {self.heads} does not divide "
                          f"hidden_size {self.d}, or num_key_value_heads {self.kv_heads} it")
        hd = c.get("head_dim")
        if hd is not None and int(hd) != self.d // self.heads:
            raise Refused(f"{path}: head_dim: {hd} is not hidden_size / num_attention_heads = "
                          f"{self.d // self.heads}, which gpipe's attention uses")
        # transformers 4: rope_theta and rope_scaling at the top; 5: rope_parameters.
        rp = c.get("rope_parameters")
        if rp is not None:
            rt = rp.get("rope_type", "default")
            if rt != "default":
                raise Refused(f"{path}: rope_parameters.rope_type: '{rt}' is not supported "
                              f"(only 'default' rope)")
            self.theta = float(rp.get("rope_theta", c.get("rope_theta", 10000.0)))
        else:
            rs = c.get("rope_scaling")
            if rs is not None:
                rt = rs.get("rope_type", rs.get("type"))
                if rt != "default":
                    raise Refused(f"{path}: rope_scaling: {json.dumps(rs)} is not supported "
                                  f"(only the default rope)")
            self.theta = float(c.get("rope_theta", 10000.0))


def gpipe_names(cfg):
    """[(gpipe name, [HF names stacked by rows])] for every parameter."""
    m = [("embed_tokens.weight", ["model.embed_tokens.weight"])]
    for i in range(cfg.layers):
        g, h = f"layers.{i}.", f"model.layers.{i}."
        m += [(g + "input_layernorm.weight", [h + "input_layernorm.weight"]),
              (g + "self_attn.in_proj_weight",
               [h + "self_attn.q_proj.weight", h + "self_attn.k_proj.weight",
                h + "self_attn.v_proj.weight"]),
              (g + "self_attn.out_proj.weight", [h + "self_attn.o_proj.weight"]),
              (g + "post_attention_layernorm.weight", [h + "post_attention_layernorm.weight"]),
              (g + "gate_proj.weight", [h + "mlp.gate_proj.weight"]),
              (g + "up_proj.weight", [h + "mlp.up_proj.weight"]),
              (g + "down_proj.weight", [h + "mlp.down_proj.weight"])]
    m += [("norm.weight", ["model.norm.weight"]), ("lm_head.weight", ["lm_head.weight"])]
    return m


def hf_shapes(cfg):
    dh = cfg.d // cfg.heads
    s = {"model.embed_tokens.weight": (cfg.vocab, cfg.d), "model.norm.weight": (cfg.d,),
         "lm_head.weight": (cfg.vocab, cfg.d)}
    for i in range(cfg.layers):
        h = f"model.layers.{i}."
        s.update({h + "input_layernorm.weight": (cfg.d,),
                  h + "post_attention_layernorm.weight": (cfg.d,),
                  h + "self_attn.q_proj.weight": (cfg.heads * dh, cfg.d),
                  h + "self_attn.k_proj.weight": (cfg.kv_heads * dh, cfg.d),
                  h + "self_attn.v_proj.weight": (cfg.kv_heads * dh, cfg.d),
                  h + "self_attn.o_proj.weight": (cfg.d, cfg.heads * dh),
                  h + "mlp.gate_proj.weight": (cfg.ff, cfg.d),
                  h + "mlp.up_proj.weight": (cfg.ff, cfg.d),
                  h + "mlp.down_proj.weight": (cfg.d, cfg.ff)})
    return s


def check_tensors(cfg, t, where):
    """Every tensor of the config's shapes is there, nothing else (a bias would be refused)."""
    want = hf_shapes(cfg)
    if cfg.tied and "lm_head.weight" not in t:
        t["lm_head.weight"] = t.get("model.embed_tokens.weight")
    for name in sorted(t):
        if name not in want and not name.endswith("rotary_emb.inv_freq"):
            raise Refused(f"{where}: tensor {name} has no place in a gpipe Llama (a bias?)")
    for name, shape in want.items():
        if t.get(name) is None:
            raise Refused(f"{where}: tensor {name} is missing")
        if tuple(t[name].shape) != shape:
            raise Refused(f"{where}: tensor {name} has shape {list(t[name].shape)}, the "
                          f"config says {list(shape)}")


MODEL = """# {name}: a Llama checkpoint converted by scripts/hf_llama.py from {src}
# (models/llama.yaml with its config's values; weights: {weights}).
name: {name}
inputs:
  tokens: {{shape: [{T}], dtype: i32}}
  seg: {{shape: [{T}], dtype: i32}}
  pos: {{shape: [{T}], dtype: i32}}
  label: {{shape: [{T}], dtype: i32}}

blocks:
  layer:
    params: {{d: {d}, heads: {heads}, kv_heads: {kv_heads}, ff: {ff}, theta: {theta!r}, eps: {eps!r}}}
    inputs: [x, seg, pos]
    layers:
      - {{type: rmsnorm, eps: $eps, from: x, name: input_layernorm}}
      - {{type: attention, heads: $heads, kv_heads: $kv_heads, dim: $d, bias: false, causal: true,
         rope: {{theta: $theta}}, from: [input_layernorm, seg, pos], inputs: [query, segments, pos],
         name: self_attn}}
      - {{type: add, from: [self_attn, x], name: res1}}
      - {{type: rmsnorm, eps: $eps, name: post_attention_layernorm}}
      - {{type: linear, out_features: $ff, bias: false, init: normal, name: gate_proj}}
      - {{type: silu, name: act}}
      - {{type: linear, out_features: $ff, bias: false, init: normal, from: post_attention_layernorm, name: up_proj}}
      - {{type: mul, from: [act, up_proj], name: gated}}
      - {{type: linear, out_features: $d, bias: false, init: normal, name: down_proj}}
      - {{type: add, from: [down_proj, res1]}}

layers:
  - {{type: embedding, num_embeddings: {vocab}, dim: {d}, init: normal, from: tokens, name: embed_tokens}}
  - {{block: layer, from: [embed_tokens, seg, pos], repeat: {layers}, name: layers}}
  - {{type: rmsnorm, eps: {eps!r}, name: norm}}
  - {{type: linear, out_features: {vocab}, bias: false, init: normal, name: lm_head}}
loss: {{type: softmax_cross_entropy, ignore_index: -100}}

tied:
  embeddings: {{params: [embed_tokens.weight, lm_head.weight], enabled: {tied}}}

# Token-id text (docs/data-translation.md): --set data.path=DIR --set data.target=LANG reads
# DIR/{{train,valid,test}}.LANG.ids (the tokenizer's ids, one sentence a line) and DIR/spm.vocab
# ({vocab} lines, one a piece); bos_id and eos_id are the config's.
data:
  dataset: text
  path: bible
  target: es
  bos_id: {bos}
  eos_id: {eos}

# Further training: a fine-tuning rate (--set train.optimizer.lr=... for another).
train:
  batch_size: 8
  optimizer: {{type: adamw, lr: 1.0e-4}}

pipeline: {{stages: 1, micro_batches: 1, devices: [cpu]}}
"""


def to_gpipe(hf_dir, model_path, weights_path, seq_len):
    cfg = Cfg(os.path.join(hf_dir, "config.json"))
    t = read_checkpoint(hf_dir)
    check_tensors(cfg, t, hf_dir)
    # Both sides use transformers' rotate_half layout (the head's halves paired), so Q and K
    # are stacked as they are: no permutation (docs/layers-transformer.md).
    out = {g: np.concatenate([t[h] for h in hs], 0) for g, hs in gpipe_names(cfg)}
    write_safetensors(weights_path, out)
    name = os.path.splitext(os.path.basename(model_path))[0]
    with open(model_path, "w") as f:
        f.write(MODEL.format(name=name, src=os.path.abspath(hf_dir), weights=weights_path,
                             T=seq_len, d=cfg.d, heads=cfg.heads, kv_heads=cfg.kv_heads,
                             ff=cfg.ff, theta=cfg.theta, eps=cfg.eps, vocab=cfg.vocab,
                             layers=cfg.layers, tied="true" if cfg.tied else "false",
                             bos=cfg.bos, eos=cfg.eos))


def to_hf(weights_path, config_path, out_dir):
    cfg = Cfg(config_path)
    g = read_safetensors(weights_path)
    dh = cfg.d // cfg.heads
    t = {}
    for gname, hs in gpipe_names(cfg):
        if gname not in g:
            raise Refused(f"{weights_path}: tensor {gname} is missing")
        rows = [hf_shapes(cfg)[h][0] for h in hs]
        if g[gname].shape[0] != sum(rows):
            raise Refused(f"{weights_path}: tensor {gname} has {g[gname].shape[0]} rows, "
                          f"{config_path} says {sum(rows)}")
        for h, part in zip(hs, np.split(g[gname], np.cumsum(rows)[:-1], 0)):
            t[h] = part
    if cfg.tied:
        if not np.array_equal(t["lm_head.weight"], t["model.embed_tokens.weight"]):
            raise Refused(f"{weights_path}: lm_head.weight differs from embed_tokens.weight "
                          f"but {config_path} ties them")
        del t["lm_head.weight"]
    check_tensors(cfg, dict(t), weights_path)
    assert dh * cfg.heads == cfg.d
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), t)
    c = dict(cfg.raw)
    for key in ("torch_dtype", "dtype"):  # transformers 4's name, 5's
        if key in c:
            c[key] = "float32"
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(c, f, indent=2)


def main(argv):
    usage = [l for l in __doc__.split("\n") if l.startswith("  hf_llama.py")]
    try:
        if len(argv) >= 4 and argv[1] == "to-gpipe":
            T = 64
            rest = argv[5:]
            if rest[:1] == ["--seq-len"] and len(rest) == 2 and rest[1].isdigit():
                T = int(rest[1])
            elif rest:
                raise Refused("usage:\n" + "\n".join(usage))
            to_gpipe(argv[2], argv[3], argv[4], T)
        elif len(argv) == 5 and argv[1] == "to-hf":
            to_hf(argv[2], argv[3], argv[4])
        else:
            raise Refused("usage:\n" + "\n".join(usage))
    except (Refused, OSError) as e:
        print(f"hf_llama: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
