#!/usr/bin/env bash
# --remat auto, the default: each stage recomputes only what its memory limit makes it drop,
# its cheap layers' activations first (selective; GP_REMAT_SELECTIVE=0: whole micro-batches
# alone). gpipe-partition shows each stage's choice and estimate, gpipe-train's memory line says what
# was chosen, and a limit that even dropping everything cannot meet is refused in one line
# saying what would fit.
set -u
train=$1; part=$2; srcdir=$3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { echo "FAIL: $*"; failed=$((failed+1)); }
resnet=$srcdir/models/resnet56-cifar.yaml
cnn=$srcdir/models/fashion-cnn.yaml
fast=(--data synthetic --steps 1 --threads 1 --quiet)

# ---- the default, when neither the file nor a flag names one
sed '/^pipeline:/d' "$cnn" >"$tmp/plain.yaml"
if "$part" "$tmp/plain.yaml" --stages 2 --schedule 1f1b --json >"$tmp/out" 2>"$tmp/err" &&
   python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["remat"] == "auto"' "$tmp/out"
then ok; else bad "the default is not auto: $(cat "$tmp/err")"; fi

# ---- gpipe-partition: a limit between never's and always's estimates binds on stage 0 alone
A=(--stages 2 --micro-batches 8 --schedule gpipe --balance 16,16)
"$part" "$resnet" "${A[@]}" --remat auto --memory-limit 300MiB --json >"$tmp/auto.json" 2>"$tmp/err" &&
"$part" "$resnet" "${A[@]}" --remat never --json >"$tmp/never.json" 2>>"$tmp/err" &&
"$part" "$resnet" "${A[@]}" --remat always --json >"$tmp/always.json" 2>>"$tmp/err" ||
  bad "gpipe-partition: $(cat "$tmp/err")"
python3 - "$tmp/auto.json" "$tmp/never.json" "$tmp/always.json" <<'PY' && ok || bad "partition's choice"
import json, sys
a, n, w = (json.load(open(f))["partition"] for f in sys.argv[1:])
lim = 300 * 2**20
assert w[0]["memory_bytes"] < lim < n[0]["memory_bytes"], (w[0], n[0])
assert 0 < a[0]["selective_micro_batches"], a[0]
assert a[0]["recomputed_micro_batches"] + a[0]["selective_micro_batches"] <= 8, a[0]
assert a[0]["recomputed_micro_batches"] < 8, a[0]
assert a[0]["memory_bytes"] <= lim, a[0]
assert a[1]["selective_micro_batches"] == 0, a[1]
assert a[1]["recomputed_micro_batches"] == 0 and a[1]["memory_bytes"] == n[1]["memory_bytes"], a[1]
assert all(s["recomputed_micro_batches"] == 8 for s in w), w
PY
GP_REMAT_SELECTIVE=0 "$part" "$resnet" "${A[@]}" --remat auto --memory-limit 300MiB --json \
  >"$tmp/whole.json" 2>"$tmp/err" || bad "gpipe-partition, whole: $(cat "$tmp/err")"
python3 - "$tmp/whole.json" "$tmp/auto.json" <<'PY' && ok || bad "partition's whole-only choice"
import json, sys
w, a = (json.load(open(f))["partition"] for f in sys.argv[1:])
assert 0 < w[0]["recomputed_micro_batches"] < 8 and w[0]["selective_micro_batches"] == 0, w[0]
assert w[0]["memory_bytes"] <= 300 * 2**20, w[0]
# selective drops fewer whole micro-batches than whole drops alone
assert a[0]["recomputed_micro_batches"] < w[0]["recomputed_micro_batches"], (a[0], w[0])
PY
"$part" "$resnet" "${A[@]}" --remat auto --memory-limit 300MiB >"$tmp/table" 2>&1
grep -Eq "memory MiB +recompute" "$tmp/table" && grep -Eq "^ +0 .* [0-7]\+[1-8]s of 8 " "$tmp/table" &&
  grep -Eq "^ +1 .* 0 of 8 " "$tmp/table" &&
  grep -Eq "^remat +stage 0: [1-8]s: .*\(selective\): [0-9]+ layers \(batchnorm, relu, add" "$tmp/table" &&
  ok || bad "the table's recompute column: $(cat "$tmp/table")"

# ---- gpipe-train: the memory line says what was chosen, and the run stays in its limit
if "$train" "$cnn" --data synthetic --steps 1 --batch-size 64 --threads 1 --stages 2 \
     --micro-batches 4 --schedule gpipe --remat auto --balance 3,4 --memory-limit 28MiB \
     >"$tmp/out" 2>&1 &&
   grep -Eq "^memory: .*; remat auto: stage 0 recomputes the cheap layers of [1-4] of 4 micro-batches \(estimated [0-9.]+ MiB\), stage 1 none" "$tmp/out"
then ok; else bad "gpipe-train's memory line: $(cat "$tmp/out")"; fi
if GP_REMAT_SELECTIVE=0 "$train" "$cnn" --data synthetic --steps 1 --batch-size 64 --threads 1 \
     --stages 2 --micro-batches 4 --schedule gpipe --remat auto --balance 3,4 --memory-limit 28MiB \
     >"$tmp/out" 2>&1 &&
   grep -Eq "^memory: .*; remat auto: stage 0 recomputes [1-3] of 4 micro-batches \(estimated [0-9.]+ MiB\), stage 1 none" "$tmp/out"
then ok; else bad "gpipe-train's memory line, whole: $(cat "$tmp/out")"; fi

# ---- a plan file keeps remat: auto; the run that reads it chooses under its own limit
if "$part" "$cnn" --stages 2 --micro-batches 4 --batch-size 64 --schedule gpipe --remat auto --balance 3,4 \
     -o "$tmp/plan.yaml" >/dev/null 2>"$tmp/err" && grep -qx "remat: auto" "$tmp/plan.yaml" &&
   "$train" "$cnn" --data synthetic --steps 1 --batch-size 64 --threads 1 \
     --partition "$tmp/plan.yaml" --memory-limit 28MiB >"$tmp/out" 2>&1 &&
   grep -Eq "^memory: .*; remat auto: stage 0 recomputes the cheap layers of [1-4] of 4 micro-batches" "$tmp/out"
then ok; else bad "a plan with remat: auto: $(cat "$tmp/err" "$tmp/plan.yaml" "$tmp/out")"; fi

# ---- a limit nothing fits: one line, exit 2, saying what would
R=(--stages 2 --micro-batches 8 --schedule gpipe --remat auto --memory-limit 100MiB)
"$train" "$resnet" "${fast[@]}" "${R[@]}" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] && [ ! -s "$tmp/out" ] &&
  grep -q "^gpipe-train: no split of 32 units into 2 stages fits .*; 3 stages fit 100.00 MiB per device (re-materializing what it must); or a smaller micro-batch" "$tmp/err" &&
  ok || bad "an impossible limit, automatic split (rc $rc): $(cat "$tmp/err")"
"$train" "$resnet" "${fast[@]}" "${R[@]}" --balance 16,16 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
  grep -q "^gpipe-train: stage 0 needs an estimated 144.28 MiB even with every micro-batch re-materialized, more than its limit of 100.00 MiB: no split of 32 units into 2 stages fits .*; 3 stages fit 100.00 MiB per device (re-materializing what it must); or a smaller micro-batch" "$tmp/err" &&
  ok || bad "an impossible limit, given split (rc $rc): $(cat "$tmp/err")"

echo "$passed passed, $failed failed"
[ $failed = 0 ]
