#!/usr/bin/env bash
# gpipe-train --log on synthetic data: what each train event says agrees with the run.
# samples_per_s: inside the first rate window every step's rate is since the start, so the
# logged rates of those steps move (they once all repeated the first step's). epoch: 1-based,
# the number the console prints for the same step (the log's was 0-based).
set -u
train=$1; srcdir=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mlp=$srcdir/models/fashion-mlp.yaml

"$train" "$mlp" --data synthetic --steps 40 --batch-size 16 --threads 1 \
  --set train.log_every=1 --eval-every 1000 --log "$tmp/log.jsonl" >/dev/null 2>"$tmp/err" ||
  fail "training: $(cat "$tmp/err")"
python3 - "$tmp/log.jsonl" "$tmp/err" <<'PY' || fail "the log's train events"
import json, re, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
console = {int(m[1]): int(m[2]) for m in re.finditer(r"^step (\d+)/\d+ epoch (\d+) ",
                                                      open(sys.argv[2]).read(), re.M)}
train = [e for e in ev if e["event"] == "train"]
assert [e["step"] for e in train] == list(range(1, 41)), [e["step"] for e in train]
# 16 batches an epoch of synthetic data: steps 1-16 are epoch 1, 17-32 epoch 2
assert [e["epoch"] for e in train] == [1 + (s - 1) // 16 for s in range(1, 41)], train
assert {e["step"]: e["epoch"] for e in train} == console, (train, console)
evals = [e for e in ev if e["event"] == "eval"]
assert [(e["step"], e["epoch"]) for e in evals] == [(40, 3)], evals
# time_s counts from before the rate's start, so these steps are all in its first window
first = [e["samples_per_s"] for e in train if e["time_s"] < 0.45]
assert len(first) < 3 or len(set(first)) > 1, "first-window rates all equal: %s" % first
print("%d steps in the first window, rates %s" % (len(first), first[:5]))
PY
# a closed stderr is not the --log file's fd: the console's lines stayed out of the log (they
# were written into it, since the log was opened as fd 2)
"$train" "$mlp" --data synthetic --steps 3 --batch-size 16 --threads 1 --set train.log_every=1 \
  --log "$tmp/closed.jsonl" >/dev/null 2>&- || fail "training with stderr closed"
python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$tmp/closed.jsonl" ||
  fail "stderr closed: the log holds more than JSON: $(head -3 "$tmp/closed.jsonl")"
# --resume: the log says so with a "resumed" event, and time_s goes on from the checkpoint's
# (it began again at 0); a checkpoint written before it stored its time resumes from 0
"$train" "$mlp" --data synthetic --steps 3 --batch-size 16 --threads 1 --set train.log_every=1 \
  --checkpoint-dir "$tmp/ck" --log "$tmp/r.jsonl" >/dev/null 2>"$tmp/err" ||
  fail "3 steps: $(cat "$tmp/err")"
python3 - "$tmp/ck/checkpoint.safetensors" "$tmp/old.safetensors" <<'PY' || fail "old checkpoint"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h["__metadata__"].pop("gpipe.elapsed_s", None)
j = json.dumps(h).encode()
j += b" " * (-len(j) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(j)) + j + b[8 + n:])
PY
mkdir -p "$tmp/ckold"
cp "$tmp/old.safetensors" "$tmp/ckold/checkpoint.safetensors"
cp "$tmp/r.jsonl" "$tmp/rold.jsonl"
for d in ck ckold; do
  log=$tmp/r.jsonl; [ $d = ckold ] && log=$tmp/rold.jsonl
  "$train" "$mlp" --data synthetic --steps 6 --batch-size 16 --threads 1 --set train.log_every=1 \
    --checkpoint-dir "$tmp/$d" --resume --log "$log" >/dev/null 2>"$tmp/err" ||
    fail "resumed from $d: $(cat "$tmp/err")"
done
python3 - "$tmp/r.jsonl" "$tmp/rold.jsonl" <<'PY' || fail "the resumed logs"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
kinds = [e["event"] for e in ev]
assert kinds.count("resumed") == 1, kinds
i = kinds.index("resumed")
assert ev[i]["step"] == 3 and [e["step"] for e in ev[i + 1:] if e["event"] == "train"] == [4, 5, 6], ev
before = max(e["time_s"] for e in ev[:i])
after = [e["time_s"] for e in ev[i:]]
assert after[0] >= before and after == sorted(after), (before, after)
old = [json.loads(l) for l in open(sys.argv[2])]
j = [e["event"] for e in old].index("resumed")
assert old[j]["step"] == 3 and old[j]["time_s"] < before, (old[j], before)
print("resumed at %.3f s after %.3f s; from an old checkpoint at %.3f s" % (after[0], before, old[j]["time_s"]))
PY
echo "ok"
