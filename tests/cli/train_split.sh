#!/usr/bin/env bash
# The split a run trains on: gpipe-train's automatic split by measured unit times (cached in
# --cache-dir, so a second run times nothing), recorded in its checkpoints and kept by --resume
# even when the cache would now split otherwise, so the resumed run is bit for bit the run it
# continues; a checkpoint written before the record resumes on a fresh split; another K is
# said; a damaged record is refused in one line. The split runs pin 1f1b: auto, choosing on
# measured times, may take interleaved's K V chunks one run and not the next. Schedule auto's
# interleaved (chosen on FLOPs) is recorded with its chunks and resumed bit for bit.
set -u
train=$1; model=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
base=(--data synthetic --batch-size 32 --threads 2 --micro-batches 4 --cache-dir "$tmp/cache"
      --set train.optimizer.lr=0.02)
auto=("${base[@]}" --stages 2)
common=("${auto[@]}" --schedule 1f1b)
fail() { echo "FAIL: $*"; exit 1; }
split_of() { sed -n 's/^pipeline: [0-9]* stages of \([0-9,]*\) units, .*/\1/p' "$1"; }
meta() { # meta FILE: the checkpoint's metadata as KEY=VALUE lines
  python3 - "$1" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
for k, v in sorted(json.loads(b[8:8 + n]).get("__metadata__", {}).items()):
    print(f"{k}={v}")
PY
}
set_meta() { # set_meta SRC DST KEY [VALUE]: DST is SRC with KEY set to VALUE (no VALUE: removed)
  python3 - "$@" <<'PY'
import json, struct, sys
src, dst, key = sys.argv[1:4]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
if len(sys.argv) > 4: h["__metadata__"][key] = sys.argv[4]
else: del h["__metadata__"][key]
j = json.dumps(h).encode()
j += b" " * (-len(j) % 8)
open(dst, "wb").write(struct.pack("<Q", len(j)) + j + b[8 + n:])
PY
}

"$train" "$model" "${common[@]}" --steps 8 --save "$tmp/full.safetensors" >"$tmp/full.out" \
  2>&1 || fail "the 8-step run exited $?: $(cat "$tmp/full.out")"
grep -q "^gpipe-train: timing [0-9]* units for the split (micro-batch 8, 1 thread a stage" "$tmp/full.out" ||
  fail "no progress line while timing: $(cat "$tmp/full.out")"
grep -qx "split: by measured time" "$tmp/full.out" ||
  fail "the split is not by measured time: $(grep pipeline "$tmp/full.out")"
ls "$tmp"/cache/unit-*.txt >/dev/null 2>&1 || fail "nothing cached in --cache-dir"
b1=$(split_of "$tmp/full.out")
[ -n "$b1" ] || fail "no split in: $(cat "$tmp/full.out")"

"$train" "$model" "${common[@]}" --steps 4 --checkpoint-dir "$tmp/ck" >"$tmp/half.out" \
  2>&1 || fail "the 4-step run: $(cat "$tmp/half.out")"
grep -q "timing" "$tmp/half.out" && fail "the second run timed units again: $(cat "$tmp/half.out")"
[ "$(split_of "$tmp/half.out")" = "$b1" ] || fail "the cached split differs: $(split_of "$tmp/half.out") vs $b1"
meta "$tmp/ck/checkpoint.safetensors" >"$tmp/meta"
grep -qx "gpipe.balance=$b1" "$tmp/meta" ||
  fail "the checkpoint does not record the split $b1: $(cat "$tmp/meta")"
ran=$(sed -n 's/^pipeline: 2 stages .* micro-batches, \([a-z0-9-]*\) schedule, re-materialization \([a-z_]*\).*/\1 \2/p' \
  "$tmp/half.out")
[ -n "$ran" ] && grep -qx "gpipe.schedule=${ran% *}" "$tmp/meta" &&
  grep -qx "gpipe.remat=${ran#* }" "$tmp/meta" ||
  fail "the checkpoint does not record the schedule it ran ($ran): $(cat "$tmp/meta")"

# the cache now says fc1 is slow: a fresh run splits around it
for f in "$tmp"/cache/unit-*.txt; do
  grep -qx "unit fc1" "$f" && sed -i 's/^fwd .*/fwd 5/; s/^bwd .*/bwd 5/' "$f"
done
"$train" "$model" "${common[@]}" --steps 1 >"$tmp/fresh.out" 2>&1 || fail "the fresh run: $(cat "$tmp/fresh.out")"
b2=$(split_of "$tmp/fresh.out")
[ -n "$b2" ] && [ "$b2" != "$b1" ] || fail "the edited cache did not change the split ($b1, now '$b2')"

# --resume keeps the recorded split and ends bit for bit where the one run ended
"$train" "$model" "${common[@]}" --steps 8 --checkpoint-dir "$tmp/ck" --resume \
  --save "$tmp/resumed.safetensors" >"$tmp/res.out" 2>&1 ||
  fail "the resumed run: $(cat "$tmp/res.out")"
[ "$(split_of "$tmp/res.out")" = "$b1" ] || fail "--resume ran on $(split_of "$tmp/res.out"), the checkpoint's is $b1"
grep -qx "split: the checkpoint's" "$tmp/res.out" || fail "the pipeline line does not say the split is the checkpoint's"
cmp "$tmp/full.safetensors" "$tmp/resumed.safetensors" || fail "resumed weights differ from one run"

# schedule auto: a resumed run runs the checkpoint's schedule and re-materialization, not a
# choice made on today's costs (here: a record edited to gpipe, always, which auto never picks)
mkdir "$tmp/auto"
set_meta "$tmp/ck/checkpoint.safetensors" "$tmp/auto/a.safetensors" gpipe.schedule gpipe
set_meta "$tmp/auto/a.safetensors" "$tmp/auto/checkpoint.safetensors" gpipe.remat always
rm "$tmp/auto/a.safetensors"
"$train" "$model" "${auto[@]}" --schedule auto --steps 9 --checkpoint-dir "$tmp/auto" --resume \
  >"$tmp/auto.out" 2>&1 || fail "resuming under schedule auto: $(cat "$tmp/auto.out")"
grep -q "^pipeline: 2 stages of $b1 units, 4 micro-batches, gpipe schedule, re-materialization always$" "$tmp/auto.out" ||
  fail "schedule auto on --resume: $(grep '^pipeline: 2' "$tmp/auto.out")"

# schedule auto took interleaved (on FLOPs, K = 2, M = 6: V = 2): the checkpoint records the
# schedule and its K V chunks, and --resume runs them, ending bit for bit where one run ends
iv=(--data synthetic --batch-size 36 --threads 2 --micro-batches 6 --stages 2 --by flops
    --set train.optimizer.lr=0.02)
ipipe="^pipeline: 2 stages x 2 chunks (chunk c on stage c mod 2) of \([0-9,]*\) units, 6 micro-batches, interleaved schedule, re-materialization never$"
"$train" "$model" "${iv[@]}" --steps 4 --save "$tmp/ifull.safetensors" >"$tmp/ifull.out" 2>&1 ||
  fail "the interleaved run: $(cat "$tmp/ifull.out")"
ib=$(sed -n "s/$ipipe/\1/p" "$tmp/ifull.out")
[ -n "$ib" ] && grep -q "^schedule auto: interleaved V=2 (simulated step 1.00; " "$tmp/ifull.out" ||
  fail "auto did not take interleaved V=2: $(cat "$tmp/ifull.out")"
"$train" "$model" "${iv[@]}" --steps 2 --checkpoint-dir "$tmp/ick" >"$tmp/ihalf.out" 2>&1 ||
  fail "the interleaved 2-step run: $(cat "$tmp/ihalf.out")"
meta "$tmp/ick/checkpoint.safetensors" >"$tmp/imeta"
grep -qx "gpipe.balance=$ib" "$tmp/imeta" && grep -qx "gpipe.schedule=interleaved" "$tmp/imeta" &&
  grep -qx "gpipe.remat=never" "$tmp/imeta" || fail "the interleaved record: $(cat "$tmp/imeta")"
"$train" "$model" "${iv[@]}" --steps 4 --checkpoint-dir "$tmp/ick" --resume \
  --save "$tmp/ires.safetensors" >"$tmp/ires.out" 2>&1 || fail "the interleaved resume: $(cat "$tmp/ires.out")"
[ "$(sed -n "s/$ipipe/\1/p" "$tmp/ires.out")" = "$ib" ] && grep -qx "split: the checkpoint's" "$tmp/ires.out" ||
  fail "--resume did not run the recorded chunks $ib: $(cat "$tmp/ires.out")"
cmp "$tmp/ifull.safetensors" "$tmp/ires.safetensors" || fail "resumed interleaved weights differ from one run"

# a checkpoint written before the record: the split is made afresh
mkdir "$tmp/old"
set_meta "$tmp/ck/checkpoint.safetensors" "$tmp/old/checkpoint.safetensors" gpipe.balance
"$train" "$model" "${common[@]}" --steps 9 --checkpoint-dir "$tmp/old" --resume >"$tmp/old.out" \
  2>&1 || fail "resuming a checkpoint without the record: $(cat "$tmp/old.out")"
[ "$(split_of "$tmp/old.out")" = "$b2" ] || fail "without a record: split $(split_of "$tmp/old.out"), want $b2"

# another K: the run goes on, and says it is not the run it continues
rm -rf "$tmp/old"; mkdir "$tmp/old"
cp "$tmp/ck/checkpoint.safetensors" "$tmp/old/"
"$train" "$model" "${base[@]}" --stages 3 --steps 9 --checkpoint-dir "$tmp/old" --resume \
  >"$tmp/k3.out" 2>"$tmp/k3.err" || fail "resuming on 3 stages: $(cat "$tmp/k3.err")"
grep -q "the checkpoint was trained on 2 stages of $b1 units; this run has another number of stages" "$tmp/k3.err" ||
  fail "another K is not said: $(cat "$tmp/k3.err")"

# a damaged record: one line
for kv in "gpipe.balance=3,x" "gpipe.balance=0,7" "gpipe.balance=" "gpipe.balance=3,,4" \
          "gpipe.schedule=gpipe2" "gpipe.remat=sometimes"; do
  k=${kv%%=*} v=${kv#*=}
  rm -rf "$tmp/bad"; mkdir "$tmp/bad"
  set_meta "$tmp/ck/checkpoint.safetensors" "$tmp/bad/checkpoint.safetensors" "$k" "$v"
  "$train" "$model" "${common[@]}" --steps 9 --checkpoint-dir "$tmp/bad" --resume >/dev/null 2>"$tmp/err"
  rc=$?
  [ $rc != 0 ] && [ "$(wc -l <"$tmp/err")" = 1 ] && grep -q "bad $k '$v'" "$tmp/err" ||
    fail "$k '$v': exit $rc: $(cat "$tmp/err")"
done
# a bad --by: one line, exit 2, on one stage too (where nothing is split)
"$train" "$model" --data synthetic --steps 1 --by flop >/dev/null 2>"$tmp/err"
rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
  grep -q "^gpipe-train: --by: unknown value 'flop'; did you mean 'flops'?" "$tmp/err" ||
  fail "--by flop: exit $rc: $(cat "$tmp/err")"
echo "ok"
