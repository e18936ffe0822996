#!/usr/bin/env bash
# Checkpoints across processes: one written at (R=2, K=2, W=4) by replica 0's two processes
# (parts committed by one index) resumes at the same layout bit for bit, and at (R=1, K=2,
# W=2) and at W = 1, K = 1 within 1e-5 of the uninterrupted run (batch norm: R = 2 of M = 1
# against M = 2); --save across processes loads in one process; a checkpoint folder that a rank
# cannot see is refused in one line; SIGUSR1 (preemption) stops every process after one step with
# one checkpoint.
set -u
train=$1; srcdir=$2
. "$srcdir/tests/mpi/common.sh"
mpi=(timeout 180 "${mpi[@]}")
diff=(python3 "$srcdir/tests/mpi/st_diff.py")
cnn=$srcdir/models/fashion-cnn.yaml
q=(--data synthetic --batch-size 16 --quiet --threads 1)
r2=(--replicas 2 --stages 2 --micro-batches 1)

run() { local name=$1; shift
  "$@" >"$tmp/$name.log" 2>&1 || bad "$name exited $?: $(grep -v '^ \|^-\|^$' "$tmp/$name.log" | tail -3)"; }
close() { "${diff[@]}" "$tmp/$1.safetensors" "$tmp/$2.safetensors" "$3" >"$tmp/$2.diff" &&
  ok || bad "$2 against $1: $(cat "$tmp/$2.diff")"; }

run full "${mpi[@]}" -np 4 "$train" "$cnn" "${q[@]}" "${r2[@]}" --steps 12 --save "$tmp/full.safetensors"
run half "${mpi[@]}" -np 4 "$train" "$cnn" "${q[@]}" "${r2[@]}" --steps 6 --checkpoint-dir "$tmp/ck"
[ -f "$tmp/ck/checkpoint.safetensors.index.json" ] && ok || bad "no index in $(ls "$tmp/ck")"
# the index records the split the run trained on (gpipe.balance), which --resume keeps
python3 - "$tmp/ck/checkpoint.safetensors.index.json" "$tmp/half.log" <<'PY' && ok || bad "the index's split: $(head -c 600 "$tmp/ck/checkpoint.safetensors.index.json")"
import json, re, sys
bal = json.load(open(sys.argv[1]))["metadata"]["gpipe.balance"]
assert re.fullmatch(r"[1-9][0-9]*,[1-9][0-9]*", bal) and sum(map(int, bal.split(","))) == 7, bal
PY
for d in same w2 w1; do cp -r "$tmp/ck" "$tmp/ck-$d"; done
run same "${mpi[@]}" -np 4 "$train" "$cnn" "${q[@]}" "${r2[@]}" --steps 12 \
  --checkpoint-dir "$tmp/ck-same" --resume --save "$tmp/same.safetensors"
close full same 0
run w2 "${mpi[@]}" -np 2 "$train" "$cnn" "${q[@]}" --stages 2 --micro-batches 2 --steps 12 \
  --checkpoint-dir "$tmp/ck-w2" --resume --save "$tmp/w2.safetensors"
close full w2 1e-5
run w1 "$train" "$cnn" "${q[@]}" --micro-batches 2 --steps 12 --checkpoint-dir "$tmp/ck-w1" \
  --resume --save "$tmp/w1.safetensors"
close full w1 1e-5
# interleaved, K = 2 x V = 2 on 2 processes: chunks 0 and 2 ran on rank 0, 1 and 3 on rank 1,
# both parts hold tensors (the commit checks each is in the part of the process holding its
# chunk), and the run resumes bit for bit
iv=(--stages 2 --virtual-stages 2 --schedule interleaved --remat never --micro-batches 2)
run ifull "${mpi[@]}" -np 2 "$train" "$cnn" "${q[@]}" "${iv[@]}" --steps 6 \
  --save "$tmp/ifull.safetensors"
run ihalf "${mpi[@]}" -np 2 "$train" "$cnn" "${q[@]}" "${iv[@]}" --steps 3 \
  --checkpoint-dir "$tmp/ick" --trace "$tmp/ick.json"
python3 - "$tmp/ick/checkpoint.safetensors.index.json" "$tmp/ick.json" <<'PY' && ok || bad "interleaved parts: $(head -c 900 "$tmp/ick/checkpoint.safetensors.index.json")"
import json, re, sys
wm = json.load(open(sys.argv[1]))["weight_map"]
# the trace's rows: units of each chunk, which rank ran it
ev = json.load(open(sys.argv[2]))["traceEvents"]
units = {}
for e in ev:
    if e["name"] == "thread_name":
        m = re.match(r"chunk (\d+) on stage (\d+) \(units (\d+)\.\.(\d+)", e["args"]["name"])
        if m:
            units[int(m[1])] = (e["pid"], int(m[3]), int(m[4]))
assert sorted(units) == [0, 1, 2, 3] and all(units[c][0] == c % 2 for c in units), units
parts = {re.match(r"checkpoint-s3-p(\d)-", f)[1] for f in wm.values()}
assert parts == {"0", "1"}, parts
PY
run isame "${mpi[@]}" -np 2 "$train" "$cnn" "${q[@]}" "${iv[@]}" --steps 6 \
  --checkpoint-dir "$tmp/ick" --resume --save "$tmp/isame.safetensors"
close ifull isame 0

# the weights 4 processes saved (parts and an index) load in one: its evaluation is theirs
strip() { sed -n 's/^final: .*  \(test loss .*\)  ([0-9.]* s)$/\1/p' "$1"; }
run eval "$train" "$cnn" "${q[@]}" --eval-only --load "$tmp/full.safetensors"
[ -n "$(strip "$tmp/full.log")" ] && [ "$(strip "$tmp/eval.log")" = "$(strip "$tmp/full.log")" ] &&
  ok || bad "--eval-only of the saved parts: $(cat "$tmp/eval.log") against $(cat "$tmp/full.log")"

# a folder rank 1 sees differently (each process its own, as on hosts without a shared one)
cat >"$tmp/own-dir.sh" <<'SH'
#!/bin/sh
d=$1; shift
[ "$OMPI_COMM_WORLD_RANK" = 0 ] || d=$d.rank$OMPI_COMM_WORLD_RANK
mkdir -p "$d"; exec "$@" --checkpoint-dir "$d"
SH
"${mpi[@]}" -np 2 sh "$tmp/own-dir.sh" "$tmp/apart" "$train" "$cnn" "${q[@]}" --stages 2 \
  --steps 2 >"$tmp/apart.log" 2>&1
rc=$?
[ "$rc" = 2 ] && [ "$(grep -c '^gpipe-train: ' "$tmp/apart.log")" = 1 ] &&
  grep -q "^gpipe-train: rank 0 ([^)]*): --checkpoint-dir .*: rank 1 does not see the files rank 0 writes there" "$tmp/apart.log" &&
  ok || bad "a folder not shared: exit $rc: $(grep -v '^ \|^-\|^$' "$tmp/apart.log" | head -3)"
# preemption: SIGUSR1 to mpirun (which forwards it to every rank) stops every process after
# the same step with one checkpoint, rank 0's line, exit 128 + 10; the run resumes from it
mpirun --oversubscribe --mca btl tcp,self -np 2 "$train" "$cnn" "${q[@]}" --stages 2 \
  --steps 1000000 --checkpoint-dir "$tmp/pre" --log "$tmp/pre.jsonl" --set train.log_every=1 \
  >"$tmp/pre.log" 2>&1 &
run=$!
for _ in $(seq 1 600); do grep -q '"train"' "$tmp/pre.jsonl" 2>/dev/null && break; sleep 0.1; done
kill -USR1 "$run"
wait "$run"; rc=$?
step=$(sed -n 's/^gpipe-train: SIGUSR1 received: stopped after step \([0-9]*\) of 1000000; .*checkpoint.safetensors.index.json holds step \1: --resume goes on$/\1/p' "$tmp/pre.log")
if [ "$rc" = 138 ] && [ -n "$step" ] && [ "$(grep -c 'stopped after step' "$tmp/pre.log")" = 1 ]; then
  ok
  run again "${mpi[@]}" -np 2 "$train" "$cnn" "${q[@]}" --stages 2 --steps $((step + 2)) \
    --checkpoint-dir "$tmp/pre" --resume
  grep -q "^final: step $((step + 2)) " "$tmp/again.log" && ok || bad "resumed after SIGUSR1: $(tail -3 "$tmp/again.log")"
else
  bad "SIGUSR1: exit $rc: $(grep -v '^ \|^-\|^$' "$tmp/pre.log" | tail -4)"
fi
finish
