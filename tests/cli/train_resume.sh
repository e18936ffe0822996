#!/usr/bin/env bash
# gpipe-train end to end on real Fashion-MNIST (a slice of it, to stay fast):
# 2N steps in one run == N steps, then --resume for N more (bit for bit); the same seed
# twice gives identical weights; a different seed does not. Skips (77) without the data.
set -u
train=$1; model=$2
data=/usr/share/datasets/fashion-mnist
[ -f $data/train-images-idx3-ubyte.gz ] || { echo "no $data: skipped"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
common=(--quiet --batch-size 32 --threads 1 --set data.train_limit=640 --set data.test_limit=256
        --set train.log_every=5 --set train.optimizer.lr=0.02)
fail() { echo "FAIL: $*"; exit 1; }

"$train" "$model" "${common[@]}" --steps 24 --save "$tmp/full.safetensors" --log "$tmp/full.jsonl" \
  || fail "the 24-step run exited $?"
"$train" "$model" "${common[@]}" --steps 12 --checkpoint-dir "$tmp/ck" || fail "the 12-step run"
[ -f "$tmp/ck/checkpoint.safetensors" ] || fail "no checkpoint written"
"$train" "$model" "${common[@]}" --steps 24 --checkpoint-dir "$tmp/ck" --resume \
  --save "$tmp/resumed.safetensors" || fail "the resumed run"
cmp "$tmp/full.safetensors" "$tmp/resumed.safetensors" || fail "resumed weights differ from one run"

"$train" "$model" "${common[@]}" --steps 24 --save "$tmp/again.safetensors" || fail "the repeat run"
cmp "$tmp/full.safetensors" "$tmp/again.safetensors" || fail "the same seed gave other weights"
"$train" "$model" "${common[@]}" --steps 24 --seed 7 --save "$tmp/seed7.safetensors" || fail "seed 7"
cmp -s "$tmp/full.safetensors" "$tmp/seed7.safetensors" && fail "another seed gave the same weights"

# the log: one JSON object per line, train and eval events
grep -q '"event": "train"' "$tmp/full.jsonl" || fail "no train events in the log"
grep -q '"event": "eval"' "$tmp/full.jsonl" || fail "no eval event in the log"
python3 - "$tmp/full.jsonl" <<'PY' || fail "the log is not JSON lines"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert rows and all("step" in r and "loss" in r for r in rows), rows
PY
# resuming with another optimizer's state, or no checkpoint, is a clear error
"$train" "$model" "${common[@]}" --steps 30 --checkpoint-dir "$tmp/none" --resume 2>"$tmp/err"
[ $? = 1 ] && grep -q "checkpoint.safetensors" "$tmp/err" || fail "resume without a checkpoint: $(cat "$tmp/err")"
echo "1 passed, 0 failed"
