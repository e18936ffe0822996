#!/usr/bin/env python3
"""GPT-2 small and transformer-lm trained by gpipe and by PyTorch on one device, in one sitting
(issue 52's comparison; docs/gpu-transformers.md explains every number).

PyTorch: the same model written plainly below (pre-norm blocks, F.scaled_dot_product_attention
with the flash kernel forced, bf16 autocast, fused AdamW, global-norm clipping as the
model file's), eager and torch.compile (default mode, compiled once per model: the only
compile warm-up). gpipe: gpipe-bench, one stage, one micro-batch, remat never, at --precision
(auto: bf16-mixed where gpipe-bench offers it, else bf16, today's bf16 operands with f32
activations). Same batch, sequence length and tokens per step on both sides; the three are
alternated --rounds times, each round's median step after --warmup steps is kept and the
best round reported. MFU counts (6 N + 12 L d T) FLOPs a token (N parameters, tied ones once;
the attention's scores and context with the causal mask counted in full, as llm.c and
Megatron-LM count), against the datasheet's dense bf16 peak and the device's own bf16
n x n x n matmul rate, measured here.

    python3 bench/gpt2_vs_torch.py --out DIR [--bin build/cli] [--device cuda:0]
        [--models gpt2-small,transformer-lm] [--precision auto|bf16-mixed|bf16|fp32]
        [--batch MODEL=N ...] [--steps 20] [--warmup 5] [--rounds 3] [--search-batch]
        [--matmul-n 8192] [--peak-tflops 989.5] [--shard DIR] [--no-compile] [--smoke]
    python3 bench/gpt2_vs_torch.py --make-shard DIR [--vocab 50304] [--seq 1024] [--lines 256]

--smoke: tiny shapes (2 layers, width 64 or 32, T 32 or 16) on the CPU, so the whole path is
tested without a GPU (tests/models/gpt2_vs_torch.sh). Writes DIR/results.json,
DIR/results.md and every gpipe-bench run's JSON under DIR/raw/. Exits 1 when a side fails,
the two sides' parameter counts differ, or a loss is not finite.
"""
import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The model files' shapes; the torch model is built from these and must count the parameters
# gpipe counts. sets: the --set keys of each shape in the file, for the smoke shapes.
MODELS = {
    "gpt2-small": dict(
        file="models/gpt2-small.yaml", layers=12, d=768, heads=12, ff=3072, vocab=50304, T=1024,
        p=0.0, gelu="tanh", tied=True, head_bias=False, segments=False, clip=1.0, batch=16,
        lr=6e-4, wd=0.1,
        sets=dict(T=["inputs.tokens.shape.0", "inputs.label.shape.0", "layers.1.max_len"],
                  vocab=["layers.0.num_embeddings", "layers.4.out_features"],
                  d=["layers.0.dim", "blocks.layer.params.d"], layers=["layers.2.repeat"],
                  heads=["blocks.layer.params.heads"], ff=["blocks.layer.params.ff"])),
    "transformer-lm": dict(
        file="models/transformer-lm.yaml", layers=4, d=256, heads=4, ff=1024, vocab=8000, T=64,
        p=0.1, gelu="none", tied=False, head_bias=True, segments=True, clip=1.0, batch=256,
        lr=1e-3, wd=0.1,
        sets=dict(T=["inputs.tokens.shape.0", "inputs.seg.shape.0", "inputs.pos.shape.0",
                     "inputs.label.shape.0", "layers.1.max_len"],
                  vocab=["layers.0.num_embeddings", "layers.5.out_features"],
                  d=["layers.0.dim", "blocks.layer.params.d"], layers=["layers.3.repeat"],
                  heads=["blocks.layer.params.heads"], ff=["blocks.layer.params.ff"])),
}
SMOKE = {
    "gpt2-small": dict(layers=2, d=64, heads=2, ff=256, vocab=512, T=32, batch=4),
    "transformer-lm": dict(layers=2, d=32, heads=2, ff=64, vocab=256, T=16, batch=8),
}

# NVIDIA's datasheets, dense bf16 tensor-core TFLOP/s (the sheets print "with sparsity", twice
# these): "NVIDIA H200 Tensor Core GPU" (H200 SXM 989.5, NVL 835.5), "NVIDIA H100 Tensor Core
# GPU" (SXM 989.5, PCIe 756.5, NVL 835.5), "NVIDIA A100 Tensor Core GPU" (312). As
# scripts/torch_compare.py's table.
PEAKS = [("H200 NVL", 835.5), ("H200", 989.5), ("H100 NVL", 835.5), ("H100 PCIe", 756.5),
         ("H100", 989.5), ("A100", 312.0)]


def flops_per_token(c, n_params):
    """llm.c's and Megatron-LM's count: 6 N for the weights' forward and backward, and
    12 L d T for attention's scores and context (2 matmuls of 2 L d T FLOPs forward, twice that
    backward), the causal half that is masked counted too."""
    return 6 * n_params + 12 * c["layers"] * c["d"] * c["T"]


# ---- token-id shards ------------------------------------------------------------------------

def make_shard(path, vocab, seq, lines, seed=52):
    """Random token ids in [4, vocab), seq - 1 a line, so every row (BOS + the line) is full:
    speed only, nothing to learn. spm.vocab names <pad> <unk> <s> </s> as ids 0-3, gpipe's
    defaults (docs/data-translation.md)."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "spm.vocab"), "w") as f:
        f.write("<pad>\t0\n<unk>\t0\n<s>\t0\n</s>\t0\n")
        f.writelines(f"t{i}\t0\n" for i in range(4, vocab))
    rnd = random.Random(seed)
    for split, n in (("train", lines), ("valid", min(lines, 64)), ("test", min(lines, 64))):
        with open(os.path.join(path, f"{split}.en.ids"), "w") as f:
            for _ in range(n):
                f.write(" ".join(str(rnd.randrange(4, vocab)) for _ in range(seq - 1)) + "\n")


# ---- PyTorch's side -------------------------------------------------------------------------

def torch_model(c, torch):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(c["d"])
            self.c_attn = nn.Linear(c["d"], 3 * c["d"])
            self.attn_proj = nn.Linear(c["d"], c["d"])
            self.ln_2 = nn.LayerNorm(c["d"])
            self.c_fc = nn.Linear(c["d"], c["ff"])
            self.c_proj = nn.Linear(c["ff"], c["d"])
            self.drop = nn.Dropout(c["p"])

        def forward(self, x):
            B, T, D = x.shape
            H = c["heads"]
            q, k, v = self.c_attn(self.ln_1(x)).split(D, dim=2)
            q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               dropout_p=c["p"] if self.training else 0.0)
            x = x + self.drop(self.attn_proj(y.transpose(1, 2).reshape(B, T, D)))
            h = F.gelu(self.c_fc(self.ln_2(x)), approximate=c["gelu"])
            return x + self.drop(self.c_proj(h))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(c["vocab"], c["d"])
            self.wpe = nn.Embedding(c["T"], c["d"])
            self.drop = nn.Dropout(c["p"])
            self.h = nn.ModuleList(Block() for _ in range(c["layers"]))
            self.ln_f = nn.LayerNorm(c["d"])
            self.lm_head = nn.Linear(c["d"], c["vocab"], bias=c["head_bias"])
            if c["tied"]:
                self.lm_head.weight = self.wte.weight
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, std=0.02)

        def forward(self, idx, label):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.drop(self.wte(idx) + self.wpe(pos))
            for b in self.h:
                x = b(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), label.view(-1),
                                   ignore_index=-100)

    return LM()


class TorchSide:
    """One PyTorch model and its optimizer, eager or compiled, kept for every round."""

    def __init__(self, c, torch, dev, compiled, seed, backend="inductor"):
        self.torch, self.dev, self.c = torch, dev, c
        torch.manual_seed(seed)
        self.model = torch_model(c, torch).to(dev).train()
        self.n_params = sum(p.numel() for p in self.model.parameters())
        kw = dict(lr=c["lr"], betas=(0.9, 0.95), weight_decay=c["wd"])
        try:
            self.opt = torch.optim.AdamW(self.model.parameters(), fused=True, **kw)
            self.fused = True
        except (RuntimeError, TypeError):  # a device without the fused kernel
            self.opt = torch.optim.AdamW(self.model.parameters(), **kw)
            self.fused = False
        self.fn = torch.compile(self.model, backend=backend) if compiled else self.model
        self.compile_s = None
        self.compiled = compiled

    def batches(self, batch):
        g = self.torch.Generator().manual_seed(batch)
        shape = (batch, self.c["T"])
        return [(self.torch.randint(4, self.c["vocab"], shape, generator=g).to(self.dev),
                 self.torch.randint(4, self.c["vocab"], shape, generator=g).to(self.dev))
                for _ in range(4)]

    def step(self, x, y):
        torch = self.torch
        with torch.autocast(self.dev.type, dtype=torch.bfloat16):
            loss = self.fn(x, y)
        loss.backward()
        if self.c["clip"]:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.c["clip"], foreach=True)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss

    def sync(self):
        if self.dev.type == "cuda":
            self.torch.cuda.synchronize(self.dev)

    def run(self, batch, warmup, steps):
        """Median step (s) after warm-up, peak bytes (CUDA), last loss."""
        torch = self.torch
        data = self.batches(batch)
        cuda = self.dev.type == "cuda"
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.dev)
        # PyTorch's CPU flash kernel has no dropout: there transformer-lm takes the default
        ctx = sdpa_context(torch, self.c["flash"] and (cuda or self.c["p"] == 0))
        times = []
        with ctx:
            for i in range(warmup + steps):
                t0 = time.perf_counter()
                loss = self.step(*data[i % len(data)])
                self.sync()
                dt = time.perf_counter() - t0
                if i == 0 and self.compiled and self.compile_s is None:
                    self.compile_s = dt
                if i >= warmup:
                    times.append(dt)
        loss = float(loss.detach())
        peak = torch.cuda.max_memory_allocated(self.dev) if cuda else None
        return statistics.median(times), peak, loss


def sdpa_context(torch, flash):
    """The flash kernel only (an error rather than a silent slower kernel); PyTorch has one
    for the CPU too, so --smoke runs this path with GPT-2."""
    import contextlib
    if not flash:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION])


def matmul_rate(torch, dev, n, reps=10):
    """The device's bf16 n x n x n matmul rate in TFLOP/s: the best of 5 timings of reps
    back-to-back matmuls into one output, after a warm-up (launch gaps amortized)."""
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    cuda = dev.type == "cuda"
    best = math.inf
    for i in range(6):
        if cuda:
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.matmul(a, b, out=c)
        if cuda:
            torch.cuda.synchronize(dev)
        if i:
            best = min(best, (time.perf_counter() - t0) / reps)
    del a, b, c
    return 2 * n ** 3 / best / 1e12


# ---- gpipe's side ---------------------------------------------------------------------------

def gpipe_precision(bench, asked):
    if asked != "auto":
        return asked
    try:
        text = subprocess.run([bench, "--help"], capture_output=True, text=True).stdout
    except OSError:
        text = ""
    return "bf16-mixed" if "bf16-mixed" in text else "bf16"


def gpipe_run(a, name, c, batch, warmup, steps, raw, tag, shard):
    cmd = [a.bench, os.path.join(ROOT, c["file"]), "--stages", "1", "--micro-batches", "1",
           "--remat", "never", "--schedule", "gpipe", "--batch-size", str(batch),
           "--devices", a.device, "--precision", a.gpipe_prec, "--steps", str(steps),
           "--warmup", str(warmup), "--json", "--quiet"]
    if a.device == "cpu":
        cmd += ["--threads", str(a.threads)]
    if shard:
        cmd += ["--data", "real", "--set", f"data.path={shard}"]
    for key, keys in c["sets"].items():
        if c[key] != MODELS[name][key]:
            cmd += [x for k in keys for x in ("--set", f"{k}={c[key]}")]
    out = os.path.join(raw, f"{name}-{tag}.json")
    with open(out, "w") as f, open(out[:-5] + ".err", "w") as err:
        rc = subprocess.run(cmd, stdout=f, stderr=err, timeout=a.timeout).returncode
    try:
        with open(out) as f:
            doc = json.load(f)
        r = doc["runs"][0]
    except (OSError, ValueError, KeyError, IndexError):
        with open(out[:-5] + ".err") as f:
            raise RuntimeError(f"gpipe-bench exited {rc}: {f.read().strip()[-600:]}\n"
                               f"command: {' '.join(cmd)}")
    return {"fits": bool(r.get("fits", True)), "samples_per_s": r.get("samples_per_s"),
            "memory_bytes": (r.get("memory_bytes") or [None])[0], "params": doc.get("params"),
            "precision": doc.get("precision"), "error": r.get("memory_error"), "cmd": cmd}


# ---- the sitting ----------------------------------------------------------------------------

def search_batch(a, name, c, eager, torch, raw, shard):
    """The largest batch that trains, doubling from the comparison's up to --search-max times
    it: gpipe's (a run that does not fit GPU memory says so) and PyTorch eager's (until
    torch.cuda.OutOfMemoryError)."""
    cap = c["batch"] * a.search_max
    got = {"cap": cap, "gpipe": 0, "torch_eager": 0}
    b = c["batch"]
    while b <= cap:
        try:  # out of GPU memory is "fits": false; anything else ends the search, said
            if not gpipe_run(a, name, c, b, 1, 1, raw, f"search-{b}", shard)["fits"]:
                break
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            got["gpipe_error"] = f"batch {b}: {e}"
            break
        got["gpipe"], b = b, 2 * b
    b = c["batch"]
    while b <= cap:
        try:
            eager.run(b, 1, 1)
        except torch.cuda.OutOfMemoryError:
            break
        finally:
            eager.opt.zero_grad(set_to_none=True)
            if eager.dev.type == "cuda":
                torch.cuda.empty_cache()
        got["torch_eager"], b = b, 2 * b
    return got


def one_model(a, name, torch, dev, raw):
    c = dict(MODELS[name])
    if a.smoke:
        c.update(SMOKE[name])
    c["flash"] = a.sdpa == "flash"
    if name in a.batch:
        c["batch"] = a.batch[name]
    shard = None
    if name == "gpt2-small":  # full rows of real (random) ids; transformer-lm: its synthetic rows
        shard = a.shard or os.path.join(a.out, f"shard-{c['vocab']}-{c['T']}")
        if not os.path.exists(os.path.join(shard, "train.en.ids")):
            make_shard(shard, c["vocab"], c["T"], max(256, 2 * c["batch"]))
    sides = {"eager": TorchSide(c, torch, dev, False, 1)}
    if a.compile:
        sides["compiled"] = TorchSide(c, torch, dev, True, 1, a.compile_backend)
    n = sides["eager"].n_params
    res = {"model": name, "config": {k: v for k, v in c.items() if k != "sets"},
           "params": n, "flops_per_token": flops_per_token(c, n),
           "tokens_per_step": c["batch"] * c["T"], "rounds": {},
           "sdpa": "flash" if c["flash"] and (dev.type == "cuda" or c["p"] == 0) else "default"}
    order = ["gpipe", "eager"] + (["compiled"] if a.compile else [])
    for r in range(a.rounds):
        turn = order[r % len(order):] + order[:r % len(order)]  # each side leads a round
        for side in turn:
            if side == "gpipe":
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
                g = gpipe_run(a, name, c, c["batch"], a.warmup, a.steps, raw, f"round{r}", shard)
                if g["params"] != n:
                    raise RuntimeError(f"{name}: gpipe counts {g['params']} parameters, the "
                                       f"PyTorch model {n}: the two models differ")
                if not g["fits"] or not g["samples_per_s"]:
                    raise RuntimeError(f"{name}: gpipe did not run: {g['error']}")
                step = c["batch"] / g["samples_per_s"]
                entry = {"step_s": step, "peak_bytes": g["memory_bytes"],
                         "precision": g["precision"]}
            else:
                try:  # one PyTorch side failing (a kernel, the compiler) leaves the others
                    step, peak, loss = sides[side].run(c["batch"], a.warmup, a.steps)
                except Exception as e:  # noqa: BLE001: any error of torch's, reported
                    res.setdefault("errors", {})[side] = f"{type(e).__name__}: {e}"[:2000]
                    print(f"gpt2_vs_torch: {name} PyTorch {side} failed: "
                          f"{res['errors'][side][:300]}", file=sys.stderr)
                    order.remove(side)
                    if dev.type == "cuda":
                        torch.cuda.empty_cache()
                    continue
                if not math.isfinite(loss):
                    raise RuntimeError(f"{name}: PyTorch {side}'s loss is {loss}")
                entry = {"step_s": step, "peak_bytes": peak, "loss": loss}
            res["rounds"].setdefault(side, []).append(entry)
            print(f"gpt2_vs_torch: {name} round {r + 1} {side}: {1e3 * entry['step_s']:.2f} ms "
                  f"a step", file=sys.stderr)
    if a.compile:
        res["compile_s"] = sides["compiled"].compile_s
    res["adamw_fused"] = sides["eager"].fused
    if a.search_batch and "eager" in order:
        res["largest_batch"] = search_batch(a, name, c, sides["eager"], torch, raw, shard)
    best = {}
    for side, rs in res["rounds"].items():
        e = dict(min(rs, key=lambda x: x["step_s"]))
        e["tokens_per_s"] = res["tokens_per_step"] / e["step_s"]
        e["tflops"] = e["tokens_per_s"] * res["flops_per_token"] / 1e12
        e["mfu_datasheet"] = e["tflops"] / a.peak if a.peak else None
        e["mfu_matmul"] = e["tflops"] / a.matmul_tflops if a.matmul_tflops else None
        e["round_steps_s"] = [x["step_s"] for x in rs]
        best[side] = e
    res["best"] = best
    if "gpipe" not in best or not ({"eager", "compiled"} & set(best)):
        raise RuntimeError(f"{name}: no comparison: {res.get('errors')}")
    torch_best = max((best[s]["tokens_per_s"] for s in ("eager", "compiled") if s in best))
    res["gpipe_over_torch_best"] = best["gpipe"]["tokens_per_s"] / torch_best
    return res


def table(doc):
    pk = doc["peak_tflops"]
    rows = ["| model | side | tokens/step | tokens/s | ms/step | TFLOP/s | MFU datasheet "
            f"({pk or '-'} TF) | MFU matmul ({doc['matmul_tflops']:.3g} TF) | peak memory MiB |",
            "|---|---|---|---|---|---|---|---|---|"]
    f = lambda x: "-" if x is None else f"{100 * x:.1f}%"
    names = {"gpipe": f"gpipe ({doc['gpipe_precision']})", "eager": "PyTorch eager",
             "compiled": "PyTorch compile" + (f" ({doc['compile_backend']})"
                                               if doc["compile_backend"] != "inductor" else "")}
    for m in doc["models"]:
        for side in ("gpipe", "eager", "compiled"):
            e = m["best"].get(side)
            if not e:
                continue
            mem = "-" if e["peak_bytes"] is None else f"{e['peak_bytes'] / 2 ** 20:.0f}"
            rows.append(f"| {m['model']} | {names[side]} | {m['tokens_per_step']} | "
                        f"{e['tokens_per_s']:.0f} | {1e3 * e['step_s']:.2f} | {e['tflops']:.3g} | "
                        f"{f(e['mfu_datasheet'])} | {f(e['mfu_matmul'])} | {mem} |")
    lines = ["\n".join(rows), ""]
    for m in doc["models"]:
        s = (f"- {m['model']}: {m['params']:,} parameters, {m['flops_per_token'] / 1e9:.3f} "
             f"GFLOP a token; PyTorch's SDPA kernel: {m['sdpa']}; gpipe / PyTorch's best: "
             f"{m['gpipe_over_torch_best']:.3f}x")
        if m.get("compile_s") is not None:
            s += f"; torch.compile's first step {m['compile_s']:.1f} s"
        if m.get("largest_batch"):
            lb = m["largest_batch"]
            s += (f"; largest batch that trains (doubling, up to {lb['cap']}): gpipe "
                  f"{lb['gpipe']}, PyTorch eager {lb['torch_eager']}")
        for side, err in (m.get("errors") or {}).items():
            s += f"; PyTorch {side} FAILED: {err[:200]}"
        lines.append(s)
    lines.append(f"- device: {doc['device_name']}; torch {doc['torch']}; best of "
                 f"{doc['rounds']} alternated rounds, each the median of {doc['steps']} steps "
                 f"after {doc['warmup']} warm-up steps")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "cli"))
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--models", default="gpt2-small,transformer-lm")
    ap.add_argument("--precision", default="auto", help="gpipe's: auto, bf16-mixed, bf16, fp32")
    ap.add_argument("--batch", action="append", default=[], metavar="MODEL=N")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--search-batch", action="store_true")
    ap.add_argument("--search-max", type=int, default=8, help="search up to this x the batch")
    ap.add_argument("--matmul-n", type=int, default=8192)
    ap.add_argument("--peak-tflops", type=float, help="dense bf16 peak (default: datasheet)")
    ap.add_argument("--shard", help="gpt2-small's token-id shard (default: made under --out)")
    ap.add_argument("--sdpa", choices=["flash", "default"], default="flash",
                    help="flash: only the flash kernel; default: PyTorch's choice")
    ap.add_argument("--no-compile", dest="compile", action="store_false")
    ap.add_argument("--compile-backend", default="inductor",
                    help="torch.compile's backend (--smoke: eager, dynamo's tracing alone)")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads of either side")
    ap.add_argument("--timeout", type=int, default=300, help="seconds a gpipe-bench run")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--make-shard", metavar="DIR")
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--lines", type=int, default=256)
    a = ap.parse_args()
    if a.make_shard:
        make_shard(a.make_shard, a.vocab, a.seq, a.lines)
        return 0
    if not a.out:
        ap.error("--out DIR is required")
    a.batch = {k: int(v) for k, v in (x.split("=", 1) for x in a.batch)}
    if a.smoke:
        a.device, a.steps, a.warmup, a.rounds, a.matmul_n = "cpu", 3, 1, 2, 128
        a.compile_backend = "eager"  # inductor's C++ build takes minutes on a busy CPU
    a.out = os.path.abspath(a.out)
    raw = os.path.join(a.out, "raw")
    os.makedirs(raw, exist_ok=True)
    a.bench = os.path.join(a.bin, "gpipe-bench")
    a.gpipe_prec = gpipe_precision(a.bench, a.precision)

    import torch
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"gpt2_vs_torch: {a.device}: torch sees no CUDA device")
    if dev.type == "cpu":
        torch.set_num_threads(a.threads)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"
    if a.peak_tflops is None:
        a.peak = next((p for k, p in PEAKS if k.lower() in name.lower()), None)
    else:
        a.peak = a.peak_tflops
    a.matmul_tflops = matmul_rate(torch, dev, a.matmul_n)
    doc = {"device_name": name, "device": a.device, "torch": torch.__version__,
           "peak_tflops": a.peak, "peak_source": "NVIDIA datasheet, dense bf16"
           if a.peak and a.peak_tflops is None else ("--peak-tflops" if a.peak else None),
           "matmul_n": a.matmul_n, "matmul_tflops": a.matmul_tflops,
           "gpipe_precision": a.gpipe_prec, "torch_precision": "bf16 autocast",
           "compile_backend": a.compile_backend,
           "steps": a.steps, "warmup": a.warmup, "rounds": a.rounds, "smoke": a.smoke,
           "models": []}
    print(f"gpt2_vs_torch: {name}: bf16 {a.matmul_n}^3 matmul {a.matmul_tflops:.3g} TFLOP/s; "
          f"gpipe --precision {a.gpipe_prec}", file=sys.stderr)
    status = 0
    for m in a.models.split(","):
        if m not in MODELS:
            raise SystemExit(f"gpt2_vs_torch: unknown model '{m}' (known: {', '.join(MODELS)})")
    for m in a.models.split(","):
        try:
            doc["models"].append(one_model(a, m, torch, dev, raw))
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"gpt2_vs_torch: {e}", file=sys.stderr)
            doc.setdefault("failed", {})[m] = str(e)
            status = 1
        md = write(a.out, doc)  # after each model: a run cut off by a timeout keeps the first
    print(md)
    return status


def write(out, doc):
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(doc, f, indent=1)
    md = table(doc) if doc["models"] else "no model ran\n"
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(md)
    return md


if __name__ == "__main__":
    sys.exit(main())
