#!/usr/bin/env bash
# gpipe-train --precision bf16: the loss goes down; the weights differ from fp32 by bf16
# rounding, not more; every stage of a pipeline computes in bf16 (K = 2, M = 4 gives the
# weights of K = 1 up to summation order); runs repeat bit for bit; other values are one
# clear line and exit 2.
set -u
train=$1; srcdir=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
model=$srcdir/models/fashion-mlp.yaml
# 256 synthetic samples (random labels the MLP learns by heart), 16 steps an epoch
common=(--data synthetic --batch-size 16 --threads 2 --set train.schedule.warmup_steps=0)

"$train" "$model" "${common[@]}" --steps 48 --precision bf16 --set train.optimizer.lr=0.003 \
  --set train.log_every=1 --log "$tmp/bf16.jsonl" >"$tmp/out" 2>"$tmp/err" ||
  fail "bf16 training: $(cat "$tmp/err")"
cat "$tmp/out" "$tmp/err" | grep -q "^training 48 steps.*, precision bf16" ||
  fail "the setup line does not name bf16: $(cat "$tmp/err")"
python3 - "$tmp/bf16.jsonl" <<'PY' || fail "the bf16 loss did not go down"
import json, sys
loss = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"train"' in l]
first, last = sum(loss[:16]) / 16, sum(loss[-16:]) / 16
assert len(loss) == 48 and last < 0.75 * first, (first, last)
PY

# SGD (Adam's normalized steps would magnify tiny gradient differences into lr-sized ones)
sgd=("${common[@]}" --quiet --steps 8 --set train.optimizer.type=sgd --set train.optimizer.lr=0.1)
"$train" "$model" "${sgd[@]}" --save "$tmp/fp32.st" >/dev/null || fail "fp32 (default)"
"$train" "$model" "${sgd[@]}" --precision fp32 --save "$tmp/fp32b.st" >/dev/null || fail "fp32"
"$train" "$model" "${sgd[@]}" --precision bf16 --save "$tmp/bf16.st" >/dev/null || fail "bf16"
"$train" "$model" "${sgd[@]}" --precision bf16 --save "$tmp/bf16b.st" >/dev/null || fail "bf16 again"
"$train" "$model" "${sgd[@]}" --precision bf16 --stages 2 --micro-batches 4 \
  --save "$tmp/bf16k2.st" >/dev/null || fail "bf16, 2 stages"
cmp -s "$tmp/fp32.st" "$tmp/fp32b.st" || fail "--precision fp32 is not the default"
cmp -s "$tmp/bf16.st" "$tmp/bf16b.st" || fail "bf16 runs differ"
python3 - "$tmp/fp32.st" "$tmp/bf16.st" "$tmp/bf16k2.st" <<'PY' || fail "bf16 weights"
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); d = b[8 + n:]
    return {k: struct.unpack("<%df" % ((v["data_offsets"][1] - v["data_offsets"][0]) // 4),
                             d[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in h.items() if k != "__metadata__"}
def rel(a, b):
    return max(abs(x - y) for x, y in zip(a, b)) / max(max(abs(x) for x in a), 1e-30)
f32, b16, k2 = (load(p) for p in sys.argv[1:])
for k in ("fc1.weight", "fc2.weight", "logits.weight"):
    # bf16 keeps 8 significant bits (relative rounding 2^-9): after 8 steps the weights are
    # off by about that, far more than fp32 summation order (1e-7) and far less than a bug
    assert 1e-4 < rel(f32[k], b16[k]) < 0.05, (k, rel(f32[k], b16[k]))
for k in f32:
    # the same bf16 products in another summation order (the micro-batches' gradients)
    assert rel(b16[k], k2[k]) <= 1e-5, (k, rel(b16[k], k2[k]))
PY

for bad in "fp16:unknown value 'fp16' \(fp32, bf16 or bf16-mixed\)" "BF16:unknown value 'BF16'" ":empty"; do
  "$train" "$model" --data synthetic --steps 1 --precision "${bad%%:*}" >/dev/null 2>"$tmp/err"
  rc=$?
  [ $rc = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] && grep -qE -- "--precision: ${bad#*:}" "$tmp/err" ||
    fail "--precision '${bad%%:*}' -> exit $rc: $(cat "$tmp/err")"
done
echo "ok: bf16 training, weights against fp32 and across stages, bad values refused"
