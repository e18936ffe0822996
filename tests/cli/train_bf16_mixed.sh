#!/usr/bin/env bash
# --precision bf16-mixed (bf16 activations between layers): gpipe-train and gpipe-bench take
# it and say so; its weights differ from bf16's (operands only) by the activations' rounding;
# K = 2, M = 4 gives K = 1's weights up to summation order; --bf16 and --amp point at it; a
# bad value is one line and exit 2.
set -u
train=$1; bench=$2; srcdir=$3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
model=$srcdir/models/fashion-mlp.yaml
sgd=(--data synthetic --batch-size 16 --threads 2 --set train.schedule.warmup_steps=0 --steps 6
     --set train.optimizer.type=sgd --set train.optimizer.lr=0.1)

"$train" "$model" "${sgd[@]}" --precision bf16-mixed --save "$tmp/mixed.st" >"$tmp/out" \
  2>"$tmp/err" || fail "bf16-mixed training: $(cat "$tmp/err")"
cat "$tmp/out" "$tmp/err" | grep -q "^training 6 steps.*, precision bf16-mixed" ||
  fail "the setup line does not name bf16-mixed: $(cat "$tmp/out" "$tmp/err")"
"$train" "$model" "${sgd[@]}" --quiet --precision bf16 --save "$tmp/bf16.st" >/dev/null ||
  fail "bf16"
"$train" "$model" "${sgd[@]}" --quiet --precision bf16-mixed --stages 2 --micro-batches 4 \
  --save "$tmp/k2.st" >/dev/null || fail "bf16-mixed, 2 stages"
python3 - "$tmp/bf16.st" "$tmp/mixed.st" "$tmp/k2.st" <<'PY' || fail "bf16-mixed weights"
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
b16, mixed, k2 = (load(p) for p in sys.argv[1:])
# the activations' rounding (2^-9 relative) on top of bf16's operands: far above summation
# order (1e-7), far below a bug
d = max(rel(b16[k], mixed[k]) for k in b16)
assert 1e-5 < d < 0.05, d
for k in mixed:
    assert rel(mixed[k], k2[k]) <= 1e-5, (k, rel(mixed[k], k2[k]))
PY

"$bench" "$model" --stages 1 --micro-batches 1 --batch-size 8 --steps 1 --warmup 0 --reps 1 \
  --data synthetic --threads 1 --precision bf16-mixed >"$tmp/out" 2>"$tmp/err" ||
  fail "gpipe-bench --precision bf16-mixed: $(cat "$tmp/err")"
grep -q "bf16-mixed" "$tmp/out" || fail "gpipe-bench does not name bf16-mixed: $(cat "$tmp/out")"

for f in --bf16 --amp --mixed_precision; do
  "$train" "$model" --data synthetic --steps 1 "$f" >/dev/null 2>"$tmp/err"
  rc=$?
  [ $rc = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
    grep -q "^gpipe-train: unknown flag '$f'; use --precision bf16-mixed" "$tmp/err" ||
    fail "$f -> exit $rc: $(cat "$tmp/err")"
done
for prog in "$train" "$bench"; do
  "$prog" "$model" --data synthetic --steps 1 --precision bf16mixed >/dev/null 2>"$tmp/err"
  rc=$?
  [ $rc = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
    grep -q -- "--precision: unknown value 'bf16mixed' (fp32, bf16 or bf16-mixed)" "$tmp/err" ||
    fail "$prog --precision bf16mixed -> exit $rc: $(cat "$tmp/err")"
done
echo "ok: bf16-mixed in gpipe-train and gpipe-bench, weights against bf16 and across stages, hints"
