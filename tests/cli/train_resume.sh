#!/usr/bin/env bash
# gpipe-train end to end on real Fashion-MNIST (a slice of it, to stay fast):
# 2N steps in one run == N steps, then --resume for N more (bit for bit); --eval-only of the
# weights gives the run's final numbers; the same seed twice gives identical weights; a
# different seed does not. Skips (77) without the data.
set -u
train=$1; model=$2
data=/usr/share/datasets/fashion-mnist
[ -f $data/train-images-idx3-ubyte.gz ] || { echo "no $data: skipped"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
common=(--quiet --batch-size 32 --threads 1 --set data.train_limit=640 --set data.test_limit=256
        --set train.log_every=5 --set train.optimizer.lr=0.02)
fail() { echo "FAIL: $*"; exit 1; }

"$train" "$model" "${common[@]}" --steps 24 --save "$tmp/full.safetensors" --log "$tmp/full.jsonl" \
  > "$tmp/full.out" || fail "the 24-step run exited $?"
"$train" "$model" "${common[@]}" --steps 12 --checkpoint-dir "$tmp/ck" || fail "the 12-step run"
[ -f "$tmp/ck/checkpoint.safetensors" ] || fail "no checkpoint written"
"$train" "$model" "${common[@]}" --steps 24 --checkpoint-dir "$tmp/ck" --resume \
  --save "$tmp/resumed.safetensors" || fail "the resumed run"
cmp "$tmp/full.safetensors" "$tmp/resumed.safetensors" || fail "resumed weights differ from one run"

# --eval-only: the saved weights, or the checkpoint's (its optimizer state left), evaluated
# without training give the numbers the run ended with, on 2 stages as on 1
want=$(sed -n 's/^final: step 24  \(test loss [0-9.]*  test accuracy [0-9.]*\)  .*/\1/p' "$tmp/full.out")
[ -n "$want" ] || fail "no final line: $(cat "$tmp/full.out")"
for w in full.safetensors ck/checkpoint.safetensors; do
  "$train" "$model" "${common[@]}" --eval-only --load "$tmp/$w" --stages 2 --micro-batches 4 \
    --log "$tmp/eval.jsonl" > "$tmp/eval.out" 2> "$tmp/err" || fail "--eval-only $w: $(cat "$tmp/err")"
  got=$(sed -n 's/^final: weights of .*  \(test loss [0-9.]*  test accuracy [0-9.]*\)  .*/\1/p' \
    "$tmp/eval.out")
  [ "$got" = "$want" ] || fail "--eval-only --load $w: '$got', the training run ended with '$want'"
  [ "$(grep -c . "$tmp/eval.jsonl")" = 1 ] && grep -q '"event": "eval"' "$tmp/eval.jsonl" ||
    fail "--eval-only's log is not one eval event: $(cat "$tmp/eval.jsonl")"
done
grep -q "^final: weights of .*ck/checkpoint.safetensors (step 24)" "$tmp/eval.out" ||
  fail "--eval-only of a checkpoint does not name its step: $(cat "$tmp/eval.out")"
"$train" "$model" "${common[@]}" --eval-only --steps 3 2> "$tmp/err"
[ $? = 2 ] && [ "$(wc -l < "$tmp/err")" = 1 ] && grep -q "eval-only trains nothing" "$tmp/err" ||
  fail "--eval-only --steps 3: $(cat "$tmp/err")"

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
# a checkpoint whose metadata was edited, or written for another model or optimizer, is refused
# with one line naming it
meta() { # meta SRC DST KEY VALUE: DST is SRC with one metadata value replaced
  python3 - "$@" <<'PY'
import json, struct, sys
src, dst, key, value = sys.argv[1:]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h["__metadata__"][key] = value
j = json.dumps(h).encode()
j += b" " * (-len(j) % 8)
open(dst, "wb").write(struct.pack("<Q", len(j)) + j + b[8 + n:])
PY
}
refused() { # refused DIR PATTERN [FLAGS...]: resuming from DIR fails with exit 1, one line
  local dir=$1 pat=$2; shift 2
  "$train" "$model" "${common[@]}" --steps 24 --checkpoint-dir "$dir" --resume "$@" 2>"$tmp/err"
  local rc=$?
  [ $rc = 1 ] && [ "$(wc -l <"$tmp/err")" = 1 ] && grep -qE -- "$pat" "$tmp/err" ||
    fail "resume from $dir $*: exit $rc: $(cat "$tmp/err")"
}
for kv in "gpipe.step=-5" "gpipe.optimizer_t=-1" "gpipe.epoch=x" "gpipe.step= 2" "gpipe.elapsed_s=-1"; do
  mkdir -p "$tmp/m-$kv"
  meta "$tmp/ck/checkpoint.safetensors" "$tmp/m-$kv/checkpoint.safetensors" "${kv%%=*}" "${kv#*=}"
  refused "$tmp/m-$kv" "bad ${kv%%=*} '${kv#*=}'"
done
mkdir -p "$tmp/other"
meta "$tmp/ck/checkpoint.safetensors" "$tmp/other/checkpoint.safetensors" gpipe.model other
refused "$tmp/other" "written for model 'other'"
# another batch size: the step count, epochs and data position would disagree
mkdir -p "$tmp/batch" "$tmp/due"
meta "$tmp/ck/checkpoint.safetensors" "$tmp/batch/checkpoint.safetensors" gpipe.batch_size 64
refused "$tmp/batch" "written with batch size 64, this run has 32 \(a resumed run keeps its batch size"
meta "$tmp/ck/checkpoint.safetensors" "$tmp/due/checkpoint.safetensors" gpipe.eval_due 2
refused "$tmp/due" "bad gpipe.eval_due '2' \(expected 0 or 1\)"
mkdir -p "$tmp/index"
meta "$tmp/ck/checkpoint.safetensors" "$tmp/index/checkpoint.safetensors" gpipe.index 99999999
refused "$tmp/index" "index/checkpoint.safetensors: its data position \(gpipe.epoch [0-9]+, gpipe.index 99999999\) is not in this run's training data: cannot resume"
# a checkpoint past the run's steps: a usage error, and the log is left as it was
echo '{"event": "train", "step": 99}' >"$tmp/past.jsonl"
"$train" "$model" "${common[@]}" --steps 5 --checkpoint-dir "$tmp/ck" --resume --log "$tmp/past.jsonl" 2>"$tmp/err"
[ $? = 2 ] && grep -q "ck/checkpoint.safetensors is at step 24, past the 5 steps of this run$" "$tmp/err" &&
  [ "$(cat "$tmp/past.jsonl")" = '{"event": "train", "step": 99}' ] || fail "resume past --steps: $(cat "$tmp/err")"
refused "$tmp/ck" "optimizer state 'optim\..*' is not used by this run's optimizer" \
  --set train.optimizer.momentum=0 --set train.optimizer.nesterov=false
echo "1 passed, 0 failed"
