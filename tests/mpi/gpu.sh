#!/usr/bin/env bash
# GPU stages in several processes sharing one GPU (mpirun, TCP between them), against one
# process on that GPU: the weights after 3 steps within GPU_TOL (1e-5) of K = 1 for W = 2 K = 2
# (both schedules), R = 2 K = 1, R = 2 K = 2 W = 4, and K = 3 with tied copies in three
# processes and a skip tensor crossing two boundaries; with the all-reduce off the check fails.
# What crosses: GP_NCCL=0 (the caller's) the MPI channel staged in page-locked host memory and
# the staged MPI all-reduce, else NCCL where the NCCL there takes several ranks on one GPU
# (2.30 and later with NCCL_MULTI_RANK_GPU_ENABLE=1; older ones refuse, which ends every run
# with one line: printed as "refused"). Needs a GPU: run by scripts/gpu-check.sh's mpi phase;
# skipped (77) without mpirun or a GPU; GPU_DEVICE=cpu runs the same checks on CPU stages (the
# script's own check where no GPU is). Usage: tests/mpi/gpu.sh GPIPE_TRAIN SRCDIR
set -u
train=$1; srcdir=$2
. "$srcdir/tests/mpi/common.sh"
dev=${GPU_DEVICE:-cuda:0}
[ "$dev" = cpu ] || nvidia-smi -L >/dev/null 2>&1 || { echo "no GPU: skipped"; exit 77; }
mpi=(timeout 45 "${mpi[@]}") # a refusal or a hang must not eat the phase
diff=(python3 "$srcdir/tests/mpi/st_diff.py")
tol=${GPU_TOL:-1e-5}

ref() { local out=$1 model=$2; shift 2
  "$train" "$model" "$@" --devices "$dev" --save "$tmp/$out.safetensors" >"$tmp/$out.log" 2>&1 ||
    bad "reference $out: $(tail -3 "$tmp/$out.log")"; }
same() { local r=$1 w=$2 name=$3 model=$4; shift 4
  if ! "${mpi[@]}" -np "$w" "$train" "$model" "$@" --save "$tmp/$name.safetensors" \
      >"$tmp/$name.log" 2>&1; then
    if grep -q "NCCL refused" "$tmp/$name.log"; then
      echo "refused: $name: $(grep -m1 "NCCL refused" "$tmp/$name.log")"
    fi
    bad "$name exited: $(grep -v "^$" "$tmp/$name.log" | tail -2 | tr '\n' ' ')"; return; fi
  "${diff[@]}" "$tmp/$r.safetensors" "$tmp/$name.safetensors" "$tol" >"$tmp/$name.diff" &&
    ok || bad "$name: $(cat "$tmp/$name.diff")"; }

mlp=$srcdir/models/fashion-mlp.yaml
q=(--data synthetic --steps 3 --batch-size 16 --quiet --threads 1)
ref mlp "$mlp" "${q[@]}" --micro-batches 2
for sched in gpipe 1f1b; do
  same mlp 2 "k2-$sched" "$mlp" "${q[@]}" --stages 2 --micro-batches 2 --schedule "$sched" \
    --devices "$dev,$dev"
done
same mlp 2 r2k1 "$mlp" "${q[@]}" --replicas 2 --micro-batches 1 --devices "$dev"
same mlp 4 r2k2 "$mlp" "${q[@]}" --replicas 2 --stages 2 --micro-batches 2 --schedule 1f1b \
  --devices "$dev,$dev"
# negative control: the replicas' gradients left apart
if GP_TEST_NO_ALLREDUCE=1 "${mpi[@]}" -np 2 "$train" "$mlp" "${q[@]}" --replicas 2 \
    --devices "$dev" --save "$tmp/apart.safetensors" >"$tmp/apart.log" 2>&1; then
  "${diff[@]}" "$tmp/mlp.safetensors" "$tmp/apart.safetensors" "$tol" >/dev/null &&
    bad "without the all-reduce the weights still matched" || ok
else
  bad "negative control exited: $(tail -2 "$tmp/apart.log" | tr '\n' ' ')"
fi

nmt=$srcdir/models/transformer-nmt.yaml
small=(--set blocks.embed.params.d=32 --set blocks.enc.params.d=32 --set blocks.dec.params.d=32
       --set blocks.enc.params.ff=64 --set blocks.dec.params.ff=64
       --set blocks.embed.params.vocab=500 --set layers.4.out_features=500
       --set tied.embeddings.enabled=true --set train.optimizer.eps=1
       --set train.schedule.warmup_steps=0 --set train.optimizer.lr=0.01
       --set train.clip_grad_norm=0.01)
qn=(--data synthetic --steps 3 --batch-size 8 --quiet --threads 1)
ref nmt "$nmt" "${qn[@]}" "${small[@]}"
same nmt 3 k3-tied "$nmt" "${qn[@]}" "${small[@]}" --stages 3 --balance 4,2,3 --micro-batches 2 \
  --devices "$dev,$dev,$dev"

finish
