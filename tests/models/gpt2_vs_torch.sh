#!/usr/bin/env bash
# bench/gpt2_vs_torch.py --smoke: GPT-2's and transformer-lm's comparison with PyTorch at tiny
# shapes on the CPU (gpipe-bench against a plain PyTorch model, eager and through
# torch.compile's tracing), so that the GPU script's whole path runs in the suite: both sides
# train, count the same parameters, the batch search doubles the batch (--search-max 2: on the
# CPU everything fits), and results.json and results.md hold every side. Needs a
# python with torch: $GP_TORCH_PYTHON, /work/torchenv/bin/python or python3, the first that
# imports it; skipped (77) without one.
set -u
bindir=$1; srcdir=$2
py=""
for p in "${GP_TORCH_PYTHON:-}" /work/torchenv/bin/python python3; do
  [ -n "$p" ] && "$p" -c "import torch" >/dev/null 2>&1 && { py=$p; break; }
done
[ -n "$py" ] || { echo "SKIP: no python with torch (set GP_TORCH_PYTHON)"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if ! "$py" "$srcdir/bench/gpt2_vs_torch.py" --smoke --search-batch --search-max 2 \
    --bin "$bindir" --out "$out" >"$out/log" 2>&1; then
  echo "FAIL: bench/gpt2_vs_torch.py --smoke exited non-zero:"; tail -20 "$out/log"; exit 1
fi
"$py" - "$out" <<'PY'
import json, math, os, sys
d = sys.argv[1]
doc = json.load(open(os.path.join(d, "results.json")))
md = open(os.path.join(d, "results.md")).read()
bad = []
names = [m["model"] for m in doc["models"]]
if names != ["gpt2-small", "transformer-lm"]:
    bad.append(f"models {names}")
for m in doc["models"]:
    for side in ("gpipe", "eager", "compiled"):
        e = m["best"].get(side)
        if not e or not e["tokens_per_s"] > 0 or not math.isfinite(e["tokens_per_s"]):
            bad.append(f"{m['model']} {side}: {e}")
        elif len(e["round_steps_s"]) != doc["rounds"]:
            bad.append(f"{m['model']} {side}: {len(e['round_steps_s'])} rounds")
    c = m["config"]
    want = 6 * m["params"] + 12 * c["layers"] * c["d"] * c["T"]
    if m["flops_per_token"] != want:
        bad.append(f"{m['model']}: {m['flops_per_token']} FLOPs a token, not {want}")
    if m["best"]["gpipe"]["peak_bytes"] is None or m["best"]["gpipe"]["peak_bytes"] <= 0:
        bad.append(f"{m['model']}: gpipe's peak memory {m['best']['gpipe']['peak_bytes']}")
    lb, b = m.get("largest_batch") or {}, c["batch"]
    if lb.get("gpipe") != 2 * b or lb.get("torch_eager") != 2 * b:  # on the CPU all fit
        bad.append(f"{m['model']}: the batch search found {lb}, not {2 * b} on both sides")
    if f"| {m['model']} | gpipe" not in md:
        bad.append(f"{m['model']}: no gpipe row in results.md")
if not doc["matmul_tflops"] > 0:
    bad.append(f"matmul rate {doc['matmul_tflops']}")
for b in bad:
    print("FAIL:", b)
print(md)
sys.exit(1 if bad else 0)
PY
