#!/usr/bin/env bash
# gpipe-train --log on synthetic data: what each train event says agrees with the run.
# samples_per_s: inside the first rate window every step's rate is since the start, so the
# logged rates of those steps move (they once all repeated the first step's).
set -u
train=$1; srcdir=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mlp=$srcdir/models/fashion-mlp.yaml

"$train" "$mlp" --data synthetic --steps 40 --batch-size 16 --threads 1 --quiet \
  --set train.log_every=1 --eval-every 1000 --log "$tmp/log.jsonl" >/dev/null 2>"$tmp/err" ||
  fail "training: $(cat "$tmp/err")"
python3 - "$tmp/log.jsonl" <<'PY' || fail "samples_per_s in the log"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
train = [e for e in ev if e["event"] == "train"]
assert [e["step"] for e in train] == list(range(1, 41)), [e["step"] for e in train]
# time_s counts from before the rate's start, so these steps are all in its first window
first = [e["samples_per_s"] for e in train if e["time_s"] < 0.45]
assert len(first) < 3 or len(set(first)) > 1, "first-window rates all equal: %s" % first
print("%d steps in the first window, rates %s" % (len(first), first[:5]))
PY
echo "ok"
