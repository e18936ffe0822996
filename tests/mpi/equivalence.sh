#!/usr/bin/env bash
# gpipe-train over several processes (mpirun, every byte through TCP as between hosts) against
# one process: the weights after 3 steps within 1e-5 of K = 1 for every layout, schedule and
# re-materialization; tied copies in three processes with a skip tensor crossing two process
# boundaries, clipping that triggers; batch norm at R = 2, M = 1 against R = 1, M = 2 with its
# running statistics; the replicas' shares disjoint and whole; and the negative control: with
# the all-reduce off the check fails. GP_TEST_STAGED=1 runs the GPU stages' paths on CPU stages:
# hand-offs staged in page-locked host buffers by queued copies, sends started once a copy has
# passed, the all-reduce's buckets copied out, summed and copied back.
set -u
train=$1; srcdir=$2
. "$srcdir/tests/mpi/common.sh"
mpi=(timeout 120 "${mpi[@]}")
diff=(python3 "$srcdir/tests/mpi/st_diff.py")

# one process, K = 1: the reference; REF NAME MODEL ARGS...
ref() { local out=$1 model=$2; shift 2
  "$train" "$model" "$@" --save "$tmp/$out.safetensors" >"$tmp/$out.log" 2>&1 ||
    bad "reference $out: $(tail -3 "$tmp/$out.log")"; }
# W processes; the weights within 1e-5 of the reference: SAME REF W NAME MODEL ARGS...
same() { local r=$1 w=$2 name=$3 model=$4; shift 4
  if ! "${mpi[@]}" -np "$w" "$train" "$model" "$@" --save "$tmp/$name.safetensors" \
      >"$tmp/$name.log" 2>&1; then
    bad "$name exited $?: $(tail -3 "$tmp/$name.log")"; return; fi
  "${diff[@]}" "$tmp/$r.safetensors" "$tmp/$name.safetensors" 1e-5 >"$tmp/$name.diff" &&
    ok || bad "$name: $(cat "$tmp/$name.diff")"; }

mlp=$srcdir/models/fashion-mlp.yaml
q=(--data synthetic --steps 3 --batch-size 16 --quiet --threads 1)
ref mlp "$mlp" "${q[@]}" --micro-batches 2
for sched in gpipe 1f1b; do
  for remat in never except_last always; do
    same mlp 2 "k2-$sched-$remat" "$mlp" "${q[@]}" --stages 2 --micro-batches 2 \
      --schedule "$sched" --remat "$remat"
  done
done
GP_TEST_SHARES=$tmp/shares same mlp 2 r2k1 "$mlp" "${q[@]}" --replicas 2 --micro-batches 1
same mlp 4 r2k2 "$mlp" "${q[@]}" --replicas 2 --stages 2 --micro-batches 2 --schedule 1f1b
GP_TEST_STAGED=1 same mlp 2 staged-k2 "$mlp" "${q[@]}" --stages 2 --micro-batches 2 --remat never
GP_TEST_STAGED=1 same mlp 4 staged-r2k2 "$mlp" "${q[@]}" --replicas 2 --stages 2 \
  --micro-batches 2 --schedule 1f1b
# each replica took its contiguous half of every step's batch of 16: disjoint, and whole
python3 - "$tmp"/shares.* <<'PY' && ok || bad "replica shares: $(cat "$tmp"/shares.*)"
import sys
steps = {}
for path in sys.argv[1:]:
    for line in open(path):
        r, step, first, n = map(int, line.split())
        steps.setdefault(step, set()).add((r, first, n))
assert sorted(steps) == [1, 2, 3], steps
for step, shares in steps.items():
    assert sorted(shares) == [(0, 0, 8), (1, 8, 8)], (step, shares)
PY
# negative control: the replicas' gradients left apart, the weights are not the reference's
if GP_TEST_NO_ALLREDUCE=1 "${mpi[@]}" -np 2 "$train" "$mlp" "${q[@]}" --replicas 2 \
    --save "$tmp/apart.safetensors" >"$tmp/apart.log" 2>&1; then
  "${diff[@]}" "$tmp/mlp.safetensors" "$tmp/apart.safetensors" 1e-5 >"$tmp/apart.diff" &&
    bad "without the all-reduce the weights still matched: $(cat "$tmp/apart.diff")" || ok
else
  bad "negative control exited $?: $(tail -3 "$tmp/apart.log")"
fi

# a small translation Transformer with the three embeddings tied: balance 4,2,3 puts the source
# embedding and encoder on process 0, the target embedding and a decoder layer on 1, the rest
# and the logits (the third copy) on 2, so the encoder's output crosses two boundaries to 2;
# clipping at 0.01 always triggers (Adam with eps 1 is not blind to the scale: the run without
# it differs)
nmt=$srcdir/models/transformer-nmt.yaml
small=(--set blocks.embed.params.d=32 --set blocks.enc.params.d=32 --set blocks.dec.params.d=32
       --set blocks.enc.params.ff=64 --set blocks.dec.params.ff=64
       --set blocks.embed.params.vocab=500 --set layers.4.out_features=500
       --set tied.embeddings.enabled=true --set train.optimizer.eps=1
       --set train.schedule.warmup_steps=0 --set train.optimizer.lr=0.01)
qn=(--data synthetic --steps 3 --batch-size 8 --quiet --threads 1)
ref nmt "$nmt" "${qn[@]}" "${small[@]}" --set train.clip_grad_norm=0.01
ref noclip "$nmt" "${qn[@]}" "${small[@]}" --set train.clip_grad_norm=0
"${diff[@]}" "$tmp/nmt.safetensors" "$tmp/noclip.safetensors" 1e-5 >/dev/null &&
  bad "clipping at 0.01 changed nothing" || ok
same nmt 3 k3-tied "$nmt" "${qn[@]}" "${small[@]}" --set train.clip_grad_norm=0.01 \
  --stages 3 --balance 4,2,3 --micro-batches 2 --trace "$tmp/k3.json"
# one Chrome trace, a process row per rank; clocks aligned: each micro-batch's forward on a
# stage starts after it ended on the stage before (within 20 ms: the start's barrier, and
# sanitizers)
python3 - "$tmp/k3.json" <<'PY' && ok || bad "trace across processes: $(head -c 600 "$tmp/k3.json")"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
assert names == {r: f"rank {r}: replica 0, position {r}" for r in range(3)}, names
fwd = {}
for e in ev:
    if e.get("cat") == "forward":
        assert e["tid"] == e["pid"], e  # stage s in rank s
        fwd[(e["args"]["step"], e["tid"], e["args"]["micro_batch"])] = (e["ts"], e["ts"] + e["dur"])
assert len(fwd) == 3 * 3 * 2, len(fwd)
for (step, s, m), (t0, t1) in fwd.items():
    if s > 0:
        assert t0 >= fwd[(step, s - 1, m)][1] - 20000, (step, s, m, t0, fwd[(step, s - 1, m)])
assert not [f for f in __import__("os").listdir(__import__("os").path.dirname(sys.argv[1])) if ".rank" in f]
PY
GP_TEST_STAGED=1 same nmt 3 staged-k3 "$nmt" "${qn[@]}" "${small[@]}" \
  --set train.clip_grad_norm=0.01 --stages 3 --balance 4,2,3 --micro-batches 2
same nmt 2 k5-w2 "$nmt" "${qn[@]}" "${small[@]}" --set train.clip_grad_norm=0.01 \
  --stages 5 --micro-batches 2 --schedule 1f1b --remat always

# batch norm: R = 2 of M = 1 cuts the micro-batches of R = 1, M = 2; running statistics too
cnn=$srcdir/models/fashion-cnn.yaml
ref cnn "$cnn" "${q[@]}" --micro-batches 2
same cnn 2 cnn-r2 "$cnn" "${q[@]}" --replicas 2 --micro-batches 1

finish
