#!/usr/bin/env bash
# gpipe-train over several processes (mpirun, every byte through TCP as between hosts) against
# one process: the weights after 3 steps within 1e-5 of K = 1 for every layout, schedule and
# re-materialization (zb-h1 too, alone and at R = 2; interleaved, a process holding every K-th
# chunk, alone and at R = 2, plain and with tied copies); stages placed by a plan file's
# processes:; tied copies in three processes with a skip tensor crossing two process
# boundaries, clipping that triggers; batch norm at
# R = 2, M = 1 against R = 1, M = 2 with its running statistics; the replicas' shares disjoint
# and whole; the negative control: with the all-reduce off the check fails (schedule auto
# across processes: auto.sh); on real data, a process decodes only the images it reads. GP_TEST_STAGED=1
# runs the GPU stages' paths on CPU stages: hand-offs staged in page-locked host buffers by
# queued copies, sends started once a copy has passed, the all-reduce's buckets copied out,
# summed and copied back.
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
# zero-bubble (W deferred): its input half's gradients cross processes, its W adds the weight
# gradients later; at R = 2 each stage's all-reduce buckets start during its last W
same mlp 2 k2-zb-h1 "$mlp" "${q[@]}" --stages 2 --micro-batches 2 --schedule zb-h1
# (fc2 widened to 512: the second stage's gradients fill a bucket, whose sum must wait for
# the W that follows the stage's last B)
ref wide "$mlp" "${q[@]}" --micro-batches 4 --set layers.4.out_features=512
same wide 4 r2k2-zb-h1 "$mlp" "${q[@]}" --set layers.4.out_features=512 --replicas 2 \
  --stages 2 --micro-batches 4 --schedule zb-h1
# interleaved, K = 2 processes x V = 2 chunks: process 0 holds chunks 0 and 2, process 1 holds
# 1 and 3, so every chunk boundary crosses processes (3 -> 0's way back included); at R = 2 each
# chunk's gradients are summed over its replicas on the chunk's own communicator
iv=(--schedule interleaved --virtual-stages 2 --remat never --stages 2)
same mlp 2 k2v2 "$mlp" "${q[@]}" "${iv[@]}" --micro-batches 4 --trace "$tmp/k2v2.json"
python3 - "$tmp/k2v2.json" <<'PY' && ok || bad "interleaved chunks' processes: $(head -c 400 "$tmp/k2v2.json")"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
where = {(e["tid"], e["pid"]) for e in ev if e.get("cat") == "forward"}
assert where == {(0, 0), (1, 1), (2, 0), (3, 1)}, where
PY
same wide 4 r2k2v2 "$mlp" "${q[@]}" --set layers.4.out_features=512 --replicas 2 "${iv[@]}" \
  --micro-batches 4
GP_TEST_STAGED=1 same mlp 2 staged-k2v2 "$mlp" "${q[@]}" "${iv[@]}" --micro-batches 2
# K = 3 stages on 2 processes: process 0 holds stages 0 and 1 (chunks 0, 1, 3, 4: two device
# threads), process 1 stage 2 (chunks 2, 5)
same mlp 2 k3v2-w2 "$mlp" "${q[@]}" --schedule interleaved --virtual-stages 2 --remat never \
  --stages 3 --micro-batches 3 --trace "$tmp/k3v2.json"
python3 - "$tmp/k3v2.json" <<'PY' && ok || bad "K = 3 on 2 processes: $(head -c 400 "$tmp/k3v2.json")"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
where = {(e["tid"], e["pid"]) for e in ev if e.get("cat") == "forward"}
assert where == {(0, 0), (1, 0), (2, 1), (3, 0), (4, 0), (5, 1)}, where
PY
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

# a plan file puts stages 1 and 2 on process 1 (even would put 0 and 1 on process 0): the
# trace's rows say where each stage ran, the weights are the reference's; a launch of another
# size is refused in one line naming the plan
cat >"$tmp/plan.yaml" <<'YAML'
model: fashion-mlp
stages: 3
micro_batches: 2
balance: [2, 3, 2]
processes: [0, 1, 1]
batch_size: 16
YAML
same mlp 2 plan "$mlp" "${q[@]}" --partition "$tmp/plan.yaml" --trace "$tmp/plan.json"
python3 - "$tmp/plan.json" <<'PY' && ok || bad "plan's processes: $(head -c 400 "$tmp/plan.json")"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
where = {(e["tid"], e["pid"]) for e in ev if e.get("cat") == "forward"}
assert where == {(0, 0), (1, 1), (2, 1)}, where
PY
"${mpi[@]}" -np 3 "$train" "$mlp" "${q[@]}" --partition "$tmp/plan.yaml" >"$tmp/p3.out" \
  2>"$tmp/p3.err"; rc=$?
[ $rc = 2 ] && [ "$(grep -c '^gpipe-train: ' "$tmp/p3.err")" = 1 ] &&
  grep -q "^gpipe-train: rank 0 (.*): --partition .*plan.yaml: the plan's processes: put a replica's stages on 2 processes, this launch has 3" \
    "$tmp/p3.err" && ok || bad "plan for 2 processes on 3: rc $rc: $(cat "$tmp/p3.err")"

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
# interleaved, balance 3,3,1,2: the tied copies in chunk 0 (the source embedding) on process 0,
# in chunks 1 (the target embedding) and 3 (the logits) on process 1
same nmt 2 k2v2-tied "$nmt" "${qn[@]}" "${small[@]}" --set train.clip_grad_norm=0.01 "${iv[@]}" \
  --balance 3,3,1,2 --micro-batches 2
same nmt 4 r2k2v2-tied "$nmt" "${qn[@]}" "${small[@]}" --set train.clip_grad_norm=0.01 \
  --replicas 2 "${iv[@]}" --balance 3,3,1,2 --micro-batches 2
same nmt 2 k5-w2 "$nmt" "${qn[@]}" "${small[@]}" --set train.clip_grad_norm=0.01 \
  --stages 5 --micro-batches 2 --schedule 1f1b --remat always

# batch norm: R = 2 of M = 1 cuts the micro-batches of R = 1, M = 2; running statistics too
cnn=$srcdir/models/fashion-cnn.yaml
ref cnn "$cnn" "${q[@]}" --micro-batches 2
same cnn 2 cnn-r2 "$cnn" "${q[@]}" --replicas 2 --micro-batches 1

# real data (Debian's Fashion-MNIST): each process decodes only the images its stages read, of
# its replica's share (decoding on the caller's thread, so the counts are exact: 3 batches of
# 16); the weights are still the one process's
fm=/usr/share/datasets/fashion-mnist
if [ -f "$fm/train-images-idx3-ubyte.gz" ]; then
  qr=(--steps 3 --batch-size 16 --quiet --threads 1 --set data.workers=0
      --set data.train_limit=512 --set data.test_limit=64)
  decoded() { sed -n 's/^decoded \([0-9]*\) .*/\1/p' "$tmp/$1.$2"; }
  GP_TEST_DATA=$tmp/real1 ref real "$cnn" "${qr[@]}" --micro-batches 2
  [ "$(decoded real1 0)" = 48 ] && ok || bad "one process decoded $(decoded real1 0), not 48"
  GP_TEST_DATA=$tmp/realk2 same real 2 real-k2 "$cnn" "${qr[@]}" --stages 2 --micro-batches 2
  [ "$(decoded realk2 0)" = 48 ] && [ "$(decoded realk2 1)" = 0 ] && ok ||
    bad "K=2: rank 0 decoded $(decoded realk2 0) images (48 expected), rank 1 (the last" \
      "stage's) $(decoded realk2 1) (0 expected)"
  GP_TEST_DATA=$tmp/realr2 same real 2 real-r2 "$cnn" "${qr[@]}" --replicas 2 --micro-batches 1
  [ "$(decoded realr2 0)" = 24 ] && [ "$(decoded realr2 1)" = 24 ] && ok ||
    bad "R=2: ranks decoded $(decoded realr2 0) and $(decoded realr2 1) images, not 24 each"
else
  echo "no $fm: the real-data checks skipped"
fi

finish
