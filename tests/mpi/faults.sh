#!/usr/bin/env bash
# Faults across processes end the run without a hang, with one gpipe line that names the
# rank: a rank killed with SIGKILL mid-step and a rank stopped with SIGSTOP (every process gone
# well within 60 s), a NaN injected on one stage (exit 1, the line naming rank, host, stage and
# micro-batch), and a setup error every process shares (reported once, no MPI abort).
set -u
train=$1; srcdir=$2
. "$srcdir/tests/mpi/common.sh"
mlp=$srcdir/models/fashion-mlp.yaml
long=(--data synthetic --steps 1000000 --quiet --threads 1 --stages 2 --micro-batches 2)

# The pid of rank R among mpirun's children (the ranks of this host are its children).
rank_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
  done
}

# SIG: rank 1 gets it once a long run has trained a step; everything must be gone within 60 s, one gpipe line
# naming rank 1
for sig in KILL STOP; do
  "${mpi[@]}" -np 2 "$train" "$mlp" "${long[@]}" --liveness-timeout 10 --log "$tmp/$sig.jsonl" \
    --set train.log_every=1 >"$tmp/$sig.out" 2>&1 &
  run=$!
  for _ in $(seq 1 600); do grep -q '"train"' "$tmp/$sig.jsonl" 2>/dev/null && break; sleep 0.1; done
  victim=$(rank_pid "$run" 1)
  if [ -z "$victim" ]; then bad "$sig: no rank 1 under mpirun $run"; kill -9 "$run"; continue; fi
  kill -"$sig" "$victim"
  t0=$(date +%s)
  for _ in $(seq 1 120); do kill -0 "$run" 2>/dev/null || break; sleep 0.5; done
  took=$(( $(date +%s) - t0 ))
  if kill -0 "$run" 2>/dev/null; then
    bad "$sig: still running after $took s"; kill -9 "$run" "$victim" 2>/dev/null
  fi
  wait "$run"; rc=$?
  lines=$(grep -c "^gpipe-train: " "$tmp/$sig.out")
  if [ "$rc" != 0 ] && [ "$took" -le 60 ] && [ "$lines" = 1 ] &&
     grep -Eq "^gpipe-train: rank 0 \([^)]*\): (lost rank 1 \(|rank 1 stopped answering)" "$tmp/$sig.out"; then
    ok
  else
    bad "SIG$sig: exit $rc after $took s, $lines gpipe lines: $(grep -v '^ \|^-\|^$' "$tmp/$sig.out" | head -5)"
  fi
  kill -9 "$victim" 2>/dev/null
done

# a NaN on stage 0 in the second step: the loss on stage 1 (rank 1) is NaN
GP_TEST_NAN_STAGE=0 timeout 60 "${mpi[@]}" -np 2 "$train" "$mlp" "${long[@]}" >"$tmp/nan.out" 2>&1
rc=$?
if [ "$rc" = 1 ] && [ "$(grep -c '^gpipe-train: ' "$tmp/nan.out")" = 1 ] &&
   grep -Eq "^gpipe-train: rank 1 \([^)]+\): stage 1, micro-batch 0: the loss is NaN at step 2" "$tmp/nan.out"; then
  ok
else
  bad "NaN: exit $rc: $(grep -v '^ \|^-\|^$' "$tmp/nan.out" | head -5)"
fi

# a bad flag every process meets: one line, from rank 0, exit 2, no abort
timeout 60 "${mpi[@]}" -np 2 "$train" "$mlp" --data synthetic --steps 1 --replicas 3 \
  >"$tmp/usage.out" 2>&1
rc=$?
if [ "$rc" = 2 ] && [ "$(grep -c '^gpipe-train: ' "$tmp/usage.out")" = 1 ] &&
   grep -q "^gpipe-train: rank 0 ([^)]*): --replicas 3 with 2 processes" "$tmp/usage.out" &&
   ! grep -q MPI_ABORT "$tmp/usage.out"; then
  ok
else
  bad "usage: exit $rc: $(cat "$tmp/usage.out" | head -5)"
fi
finish
