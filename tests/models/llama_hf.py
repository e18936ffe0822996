"""gpipe against Hugging Face transformers on a small random LlamaForCausalLM (the fixture of
tests/models/make_llama_fixture.py; no torch here): scripts/hf_llama.py converts the checkpoint,
llama_hf_dump runs it at K = 1 and at K = 3, M = 4, and its logits, loss and one step's
gradients must equal transformers' within TOL (max |a - b| / max |b| per tensor). Also: the
converter reads bf16 shards with an index and a transformers-4 config (top-level rope_theta)
to the same model file and the bf16-rounded weights; refuses what it cannot represent in one
line naming the key; and converts back to the checkpoint's tensors bit for bit (tied too).
The converted model file evaluates token-id text (--eval-only) and trains further.
Usage: python3 llama_hf.py LLAMA_HF_DUMP SOURCE_ROOT GPIPE_TRAIN"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

DUMP, ROOT, TRAIN = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import hf_llama  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures", "llama")
CONVERT = [sys.executable, os.path.join(ROOT, "scripts", "hf_llama.py")]
# f32 sums in other orders (blocked GEMMs, per-micro-batch partial sums, K stages): observed
# about 1e-6; the bar is 1e-4.
TOL = 1e-4
failures = 0


def check(ok, what):
    global failures
    print(("ok   " if ok else "FAIL ") + what)
    failures += not ok


def rel(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def run(args):
    return subprocess.run(args, capture_output=True, text=True)


def compare(out, fx, cfg, label):
    g = hf_llama.read_safetensors(out)
    r = rel(g["logits"], fx["logits"])
    check(g["logits"].shape == fx["logits"].shape and r <= TOL,
          f"{label}: logits {list(g['logits'].shape)} rel diff {r:.2e} <= {TOL}")
    r = abs(float(g["loss"][0]) - float(fx["loss"][0])) / abs(float(fx["loss"][0]))
    check(r <= TOL, f"{label}: loss {g['loss'][0]:.6f} vs transformers' {fx['loss'][0]:.6f}")
    shapes = hf_llama.hf_shapes(cfg)
    worst, n = 0.0, 0
    for gname, hs in hf_llama.gpipe_names(cfg):
        parts = np.split(g["grad." + gname], np.cumsum([shapes[h][0] for h in hs])[:-1], 0)
        for h, part in zip(hs, parts):
            r = rel(part, fx["grad." + h])
            n += 1
            if r > TOL:
                check(False, f"{label}: gradient of {h}: rel diff {r:.2e}")
            worst = max(worst, r)
    check(n == len(shapes) and worst <= TOL,
          f"{label}: {n} gradients, worst rel diff {worst:.2e} <= {TOL}")


def bf16_bits(x):
    """x rounded to bf16 (to nearest, ties to even): the high halves, u16."""
    u = x.astype("<f4").view("<u4").astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


def bf16_sharded(src, dst, v4):
    """src's checkpoint as bf16 in two shards with an index; v4: transformers 4's config."""
    os.makedirs(dst)
    t = hf_llama.read_safetensors(os.path.join(src, "model.safetensors"))
    names = sorted(t)
    shards = [names[:len(names) // 2], names[len(names) // 2:]]
    wmap = {}
    for i, part in enumerate(shards):
        fn = f"model-0000{i + 1}-of-00002.safetensors"
        header, chunks, off = {}, [], 0
        for n in part:
            b = bf16_bits(t[n]).tobytes()
            header[n] = {"dtype": "BF16", "shape": list(t[n].shape),
                         "data_offsets": [off, off + len(b)]}
            chunks.append(b)
            off += len(b)
            wmap[n] = fn
        h = json.dumps(header).encode()
        with open(os.path.join(dst, fn), "wb") as f:
            f.write(len(h).to_bytes(8, "little") + h + b"".join(chunks))
    with open(os.path.join(dst, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wmap}, f)
    with open(os.path.join(src, "config.json")) as f:
        c = json.load(f)
    if v4:
        c["rope_theta"] = c.pop("rope_parameters")["rope_theta"]
        c["rope_scaling"] = None
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(c, f)
    return {n: bf16_bits(x).astype("<u4") << 16 for n, x in t.items()}


def main():
    tmp = tempfile.mkdtemp(prefix="llama_hf.")
    try:
        hf = os.path.join(FIX, "hf")
        cfg = hf_llama.Cfg(os.path.join(hf, "config.json"))
        fx = hf_llama.read_safetensors(os.path.join(FIX, "step.safetensors"))
        model, w = os.path.join(tmp, "m.yaml"), os.path.join(tmp, "w.safetensors")
        r = run(CONVERT + ["to-gpipe", hf, model, w, "--seq-len", "8"])
        check(r.returncode == 0, "to-gpipe converts the fixture " + r.stderr.strip())
        if r.returncode:
            return
        for k, m in ((1, 1), (3, 4)):
            out = os.path.join(tmp, f"k{k}m{m}.safetensors")
            r = run([DUMP, model, w, os.path.join(FIX, "step.safetensors"), str(k), str(m), out])
            check(r.returncode == 0, f"K={k} M={m}: llama_hf_dump runs {r.stdout.strip()} "
                  + r.stderr.strip())
            if r.returncode == 0:
                compare(out, fx, cfg, f"K={k} M={m}")

        # Token-id text (ids of the checkpoint's vocabulary, a vocabulary file of its size):
        # --eval-only with the weights, then a few steps of further training.
        tok = os.path.join(tmp, "tok")
        os.makedirs(tok)
        for split, n in (("train", 24), ("valid", 4), ("test", 4)):
            with open(os.path.join(tok, split + ".x.ids"), "w") as f:
                for i in range(n):
                    f.write(" ".join(str(3 + (7 * i + 5 * j) % 98) for j in range(2 + i % 6)) + "\n")
        with open(os.path.join(tok, "spm.vocab"), "w") as f:
            f.write("".join(f"p{i}\t0\n" for i in range(cfg.vocab)))
        data = ["--set", "data.path=" + tok, "--set", "data.target=x"]
        r = run([TRAIN, model, "--load", w, "--eval-only"] + data)
        last = [ln for ln in (r.stdout + r.stderr).split("\n") if ln.startswith("final:")]
        check(r.returncode == 0 and len(last) == 1 and last[0].startswith("final: weights of")
              and "test loss" in last[0], "--eval-only on token-id text: " + " ".join(last))
        r = run([TRAIN, model, "--load", w, "--steps", "3", "--save",
                 os.path.join(tmp, "w-more.safetensors")] + data)
        last = (r.stdout + r.stderr).strip().split("\n")[-1]
        moved = r.returncode == 0 and not np.array_equal(
            hf_llama.read_safetensors(os.path.join(tmp, "w-more.safetensors"))["norm.weight"],
            hf_llama.read_safetensors(w)["norm.weight"])
        check(moved, "trains further (3 steps, the weights move): " + last)

        # bf16 shards and a transformers-4 config: the same model file, bf16-rounded weights.
        bf = os.path.join(tmp, "bf16")
        want = bf16_sharded(hf, bf, v4=True)
        m2, w2 = os.path.join(tmp, "m2.yaml"), os.path.join(tmp, "w2.safetensors")
        r = run(CONVERT + ["to-gpipe", bf, m2, w2, "--seq-len", "8"])
        check(r.returncode == 0, "to-gpipe reads bf16 shards and rope_theta at the top "
              + r.stderr.strip())
        if r.returncode == 0:
            body = [open(p).read().split("\n", 3)[3] for p in (model, m2)]
            check(body[0] == body[1], "the same model file from a transformers-4 config")
            got = hf_llama.read_safetensors(w2)
            ok = all(np.array_equal(got[g].view("<u4"),
                                    np.concatenate([want[h] for h in hs], 0).astype("<u4"))
                     for g, hs in hf_llama.gpipe_names(cfg))
            check(ok, "bf16 weights widened exactly")

        # Settings gpipe cannot represent: one line naming the key, exit 1.
        base = json.load(open(os.path.join(hf, "config.json")))
        bad = [("rope_parameters.rope_type", {"rope_parameters": {
                    "rope_theta": 5e5, "rope_type": "llama3", "factor": 8.0}}),
               ("rope_scaling", {"rope_parameters": None, "rope_theta": 5e5,
                                 "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}),
               ("attention_bias", {"attention_bias": True}), ("mlp_bias", {"mlp_bias": True}),
               ("head_dim", {"head_dim": 32})]
        for key, change in bad:
            d = os.path.join(tmp, "bad-" + key)
            shutil.copytree(hf, d)
            c = dict(base, **change)
            if c.get("rope_parameters") is None:
                c.pop("rope_parameters", None)
            json.dump(c, open(os.path.join(d, "config.json"), "w"))
            r = run(CONVERT + ["to-gpipe", d, os.path.join(tmp, "x.yaml"),
                               os.path.join(tmp, "x.safetensors")])
            lines = r.stderr.strip().split("\n")
            check(r.returncode == 1 and len(lines) == 1 and key + ":" in lines[0],
                  f"refuses {key}: {r.stderr.strip()}")

        # Back: gpipe weights -> the checkpoint's tensors, bit for bit.
        back = os.path.join(tmp, "back")
        r = run(CONVERT + ["to-hf", w, os.path.join(hf, "config.json"), back])
        check(r.returncode == 0, "to-hf converts back " + r.stderr.strip())
        if r.returncode == 0:
            a = hf_llama.read_safetensors(os.path.join(hf, "model.safetensors"))
            b = hf_llama.read_safetensors(os.path.join(back, "model.safetensors"))
            check(sorted(a) == sorted(b) and all(np.array_equal(a[n], b[n]) for n in a),
                  f"to-hf gives the checkpoint's {len(a)} tensors bit for bit")
            c2 = hf_llama.Cfg(os.path.join(back, "config.json"))
            same = {k: v for k, v in vars(c2).items() if k != "raw"} == \
                {k: v for k, v in vars(cfg).items() if k != "raw"}
            check(same, "to-hf writes a config of the same settings")
        # Tied: no lm_head.weight in the checkpoint; the model file ties, and back drops it.
        td = os.path.join(tmp, "tied")
        os.makedirs(td)
        t = hf_llama.read_safetensors(os.path.join(hf, "model.safetensors"))
        del t["lm_head.weight"]
        hf_llama.write_safetensors(os.path.join(td, "model.safetensors"), t)
        json.dump(dict(base, tie_word_embeddings=True), open(os.path.join(td, "config.json"), "w"))
        m3, w3 = os.path.join(tmp, "m3.yaml"), os.path.join(tmp, "w3.safetensors")
        r = run(CONVERT + ["to-gpipe", td, m3, w3])
        g3 = hf_llama.read_safetensors(w3) if r.returncode == 0 else {}
        check(r.returncode == 0 and "enabled: true" in open(m3).read()
              and np.array_equal(g3["lm_head.weight"], t["model.embed_tokens.weight"]),
              "tied: lm_head.weight is embed_tokens.weight, the group enabled " + r.stderr.strip())
        r = run(CONVERT + ["to-hf", w3, os.path.join(td, "config.json"), os.path.join(tmp, "tb")])
        b = hf_llama.read_safetensors(os.path.join(tmp, "tb", "model.safetensors")) \
            if r.returncode == 0 else {}
        check(sorted(b) == sorted(t), "tied: to-hf writes no lm_head.weight " + r.stderr.strip())
    finally:
        shutil.rmtree(tmp)


main()
print(f"{failures} failed")
sys.exit(1 if failures else 0)
