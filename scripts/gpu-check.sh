#!/usr/bin/env bash
# Runs on a GPU machine what cannot run without one, from the pack scripts/gpu-pack.sh made
# (carried as .gpu/), in phases, each logged; writes OUT/summary.txt and OUT/logs.tgz.
# Usage: scripts/gpu-check.sh OUT PHASE...
#   phases: info suite memcheck torch torchseq capacity graph timing trace cores scaling gpt2
#           sdpa memory mpi cgraph bf16store kvdec
#   info      nvidia-smi, the libraries the programs resolve
#   suite     every tests/cuda binary (meson suite `cuda`)
#   memcheck  compute-sanitizer memcheck on a short 2-stage training run
#   torch     scripts/compare-torch.sh: samples/s and MFU against PyTorch eager
#   torchseq  the same for transformer-lm and transformer-nmt
#   capacity  scripts/capacity.sh: the largest model with and without GPipe on one GPU
#             (GP_CAPACITY_ARGS="--capacity 8GiB --batch 8" adds options)
#   graph     which cuDNN API the convolution searches choose (GP_CUDNN_LOG), and ResNet-56
#             with the graph API's engines off and on (GP_CUDNN_GRAPH=0/1), alternating
#   timing    GPU stages timed on their streams: resnet20-cifar over K = 1, 2, 4 and M = 1, 8 on
#             cuda:0, alternated with GP_DEVICE_TIMING=0 (host launch times, no wait at the
#             step's end): the wait's cost, both bubbles, and the trace's device rows
#   trace     issue 5's K = 8 and 4 at M = 32 with a core per stage (8 even CPUs), traced: every
#             action's wall and CPU time in the logs, for scripts/trace-steps.py
#   cores     whether the 8 even CPUs run equal work at equal speed: one one-thread stage of
#             balanced-cnn (M = 32, batch 128) on each at once, then alone on two of them
#   scaling   issue 5's CPU check: gpipe-bench of balanced-cnn over K = 1, 2, 4, 8 at M = 32
#             (GP_SCALING="8:128 16:1024 8:128:0,2,4,6,8,10,12,14 p1:128:0,2,4,6,8,10,12,14"
#             picks threads:batch[:cpus] sweeps, pT meaning --threads-per-stage T: K stages on
#             K x T cores; GP_SCALING_SCHEDULE=gpipe,1f1b adds 1F1B; GP_CPU_PIECES=1 before
#             the command gives whole shares, to compare with the default pieces)
#   schedules issue 50's GPU point: gpipe-bench of resnet20-cifar and transformer-lm on cuda:0
#             at K = 2 and 4, M = 8, remat never, for every schedule gpipe-bench names (and
#             interleaved with V = 2): each one's measured bubble beside its simulated one
#   gpt2      issue 52's comparison: bench/gpt2_vs_torch.py, GPT-2 small (models/gpt2-small.yaml,
#             on the pack's random token-id shard) and transformer-lm, gpipe-bench against
#             PyTorch eager and torch.compile, alternated, one largest-batch search: tokens/s,
#             MFU, peak memory into OUT/gpt2/ (results.md, results.json, raw/, written after
#             each model); estimated 4-8 minutes on an H200, cut at 570 s (GP_GPT2_ARGS adds
#             options, e.g. "--precision bf16" or "--rounds 2")
#   sdpa      issue 52's fused attention: the cuDNN version the programs load, tests/cuda's
#             test_cuda_sdpa (fused against plain, bf16), and bench/models/lm-fused.yaml (GPT-2
#             small's shapes) trained a few steps with GP_SDPA=1 and 0, alternated: samples/s
#             of each and whether the layer said it ran unfused
#   memory    scripts/sdpa-memory.sh: lm-fused's largest batch with fused attention and without
#   bf16store bf16-mixed's 16-bit activation storage: tests/cuda's test_cuda_bf16_store (pack and
#             unpack against the CPU, training bit for bit GP_BF16_STORE=0's), then
#             transformer-lm on cuda:0 (K = 1, M = 1 and 4, remat never) in fp32, bf16-mixed
#             and bf16-mixed with GP_BF16_STORE=0: each one's peak activation bytes per stage
#   mpi       issue 49's GPU side: tests/mpi/gpu.sh (GPU stages of several processes sharing
#             cuda:0 against one process) through the MPI channel (GP_NCCL=0: staged in
#             page-locked memory), then through NCCL with NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL
#             before 2.30 refuses several ranks on one GPU: its line goes to the summary).
#             Open MPI is the machine's, or the pack's Debian packages unpacked under /tmp
#   cgraph    issue 52's CUDA graphs: gpipe-bench of gpt2-small (batch 8) and resnet20-cifar on cuda:0
#             at K = 1, 2 and M = 1, 8 with GP_CUDA_GRAPHS=1 and 0, alternated twice: samples/s
#             with graphs over without (test_cuda_graphs, in suite, checks they change nothing)
#   kvdec     issue 51's decoding with a cache on a GPU: tests/cuda's test_cuda_kvdec (also in
#             suite), then tests/cli/decode_cache.sh with its evaluations and generation on
#             cuda:0 (its training on the CPU): cached translations equal the uncached path's
#             there, at K = 1 and 2, beam 1 equals greedy, beam 4 runs, generation counts on cuda:0
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${1:?usage: scripts/gpu-check.sh OUT PHASE...}
shift
mkdir -p "$out"
root=/tmp/gpipe-gpu
logs=$root/logs
mkdir -p "$root" "$logs"
# always the pack carried with this call: a machine kept warm between calls still has the last one
rm -rf "${root:?}/bin" "${root:?}/lib" "${root:?}/ompi" "${root:?}/ompi-root"
tar -C "$root" -xzf .gpu/pack.tar.gz || { echo "no .gpu/pack.tar.gz (scripts/gpu-pack.sh)"; exit 1; }
bin=$root/bin
# CUDA's libraries: the toolkit's, and the pip wheels' (cuDNN, cuBLAS) where the image has them
nv=$(python3 -c 'import nvidia, os; print(os.pathsep.join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in os.listdir(p) if os.path.isdir(os.path.join(p, d, "lib"))))' 2>/dev/null || true)
export LD_LIBRARY_PATH="$root/lib:${nv}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$bin:$PATH"
# Open MPI: the machine's, else the pack's packages unpacked (no root, no network: dpkg-deb -x
# into a private root, found through OPAL_PREFIX), so that programs linked with MPI load and
# the mpi phase has an mpirun
ompi_from=none
if command -v mpirun >/dev/null && ! ldd "$bin/gpipe-train" 2>/dev/null | grep -q "libmpi.*not found"; then
  ompi_from="this machine's ($(command -v mpirun))"
elif ls "$root"/ompi/*.deb >/dev/null 2>&1 && command -v dpkg-deb >/dev/null; then
  for d in "$root"/ompi/*.deb; do dpkg-deb -x "$d" "$root/ompi-root"; done
  x=$root/ompi-root/usr
  ln -sf orterun "$x/bin/mpirun"
  export OPAL_PREFIX=$x PATH="$x/bin:$PATH"
  export LD_LIBRARY_PATH="$x/lib/x86_64-linux-gnu:$x/lib/x86_64-linux-gnu/openmpi/lib:$LD_LIBRARY_PATH"
  ompi_from="the pack's Debian packages ($("$x/bin/orterun" --version 2>&1 | head -1))"
fi
summary=$out/summary.txt
say() { echo "$*" | tee -a "$summary"; }

phase_info() {
  nvidia-smi >"$logs/info.log" 2>&1
  { echo; nproc; lscpu; lscpu -e; ldd "$bin/gpipe-train"; } >>"$logs/info.log" 2>&1
  say "info: $(nproc) CPUs, $(lscpu | grep -E '^(Thread\(s\) per core|NUMA node\(s\))' | tr -s ' ' | tr '\n' ' ')"
  say "info: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
  grep -q "=> not found" "$logs/info.log" && say "info: MISSING LIBRARIES: $(grep "=> not found" "$logs/info.log" | tr -s " \t" " ")"
}

phase_suite() {
  for t in "$bin"/test_cuda_*; do
    name=$(basename "$t")
    timeout 300 "$t" >"$logs/$name.log" 2>&1
    rc=$?
    say "suite: $name rc=$rc: $(grep -E 'passed|skip' "$logs/$name.log" | tail -1)"
    [ $rc = 0 ] || grep -m 15 FAIL "$logs/$name.log" | tee -a "$summary"
  done
  grep -h "on the device" "$logs/test_cuda_pipeline.log" | sed 's/^/suite: /' | tee -a "$summary"
  grep -h "graphs recorded" "$logs/test_cuda_graphs.log" | sed 's/^/suite: /' | tee -a "$summary"
  # the convolutions again with cuDNN's legacy algorithms alone (meson's cuda_dnn_legacy)
  GP_CUDNN_GRAPH=0 timeout 300 "$bin/test_cuda_dnn" >"$logs/test_cuda_dnn_legacy.log" 2>&1
  rc=$?
  say "suite: test_cuda_dnn with GP_CUDNN_GRAPH=0 rc=$rc: $(grep -E 'passed|skip' "$logs/test_cuda_dnn_legacy.log" | tail -1)"
  [ $rc = 0 ] || grep -m 15 FAIL "$logs/test_cuda_dnn_legacy.log" | tee -a "$summary"
}

phase_memcheck() {
  timeout 500 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
    "$bin/gpipe-train" models/fashion-cnn.yaml --data synthetic --steps 2 --stages 2 \
    --micro-batches 2 --devices cuda:0,cuda:0 --set train.batch_size=16 >"$logs/memcheck.log" 2>&1
  say "memcheck: rc=$? $(grep -E 'ERROR SUMMARY|LEAK SUMMARY' "$logs/memcheck.log" | tr '\n' ' ')"
}

phase_torch() {
  timeout 570 scripts/compare-torch.sh "$logs/torch" --bin "$bin" --device cuda:0 --reps 2 \
    >"$logs/torch.log" 2>&1
  say "torch: rc=$?"
  sed -n '/^|/p' "$logs/torch/results.md" 2>/dev/null | tee -a "$summary"
}

phase_torchseq() {
  timeout 570 scripts/compare-torch.sh "$logs/torchseq" --bin "$bin" --device cuda:0 --reps 2 \
    --models transformer-lm,transformer-nmt >"$logs/torchseq.log" 2>&1
  say "torchseq: rc=$?"
  sed -n '/^|/p' "$logs/torchseq/results.md" 2>/dev/null | tee -a "$summary"
}

phase_capacity() {
  # shellcheck disable=SC2086 # GP_CAPACITY_ARGS: more options for capacity.sh, split on spaces
  timeout 570 scripts/capacity.sh --out "$logs/capacity" --bin "$bin" --device cuda:0 \
    --budget 540 ${GP_CAPACITY_ARGS:-} >"$logs/capacity.log" 2>&1
  say "capacity: rc=$?"
  sed -n '/^|/p' "$logs/capacity/results.md" 2>/dev/null | tee -a "$summary"
}

phase_graph() {
  GP_CUDNN_LOG=1 timeout 200 "$bin/gpipe-train" models/resnet56-cifar.yaml --data synthetic \
    --steps 1 --devices cuda:0 >"$logs/graph-choices.log" 2>&1
  say "graph: rc=$? choices: $(grep -c 'chosen: graph' "$logs/graph-choices.log") graph engine," \
    "$(grep -c 'chosen: legacy' "$logs/graph-choices.log") legacy"
  for prec in fp32 bf16; do
    for r in 1 2 3; do
      for g in 0 1; do
        GP_CUDNN_GRAPH=$g timeout 150 "$bin/gpipe-bench" models/resnet56-cifar.yaml --stages 1 \
          --micro-batches 1 --remat never --devices cuda:0 --precision $prec --steps 40 \
          --warmup 5 --json --quiet >"$logs/graph-$prec-$g-$r.json" 2>>"$logs/graph.log"
      done
    done
  done
  python3 - "$logs" <<'PY' | tee -a "$summary"
import json, sys, glob
for prec in ("fp32", "bf16"):
    best = {}
    for g in ("0", "1"):
        v = []
        for f in glob.glob(f"{sys.argv[1]}/graph-{prec}-{g}-*.json"):
            try:
                v.append(json.load(open(f))["runs"][0]["samples_per_s"])
            except Exception:
                pass
        best[g] = max(v) if v else 0.0
    ratio = best["1"] / best["0"] if best["0"] else 0.0
    print(f"graph: resnet56 {prec} samples/s, legacy only {best['0']:.1f}, with graph engines {best['1']:.1f}: {ratio:.3f}x")
PY
}

phase_timing() {
  for r in 1 2; do
    for dt in 1 0; do
      local tr=()
      [ "$r$dt" = 11 ] && tr=(--trace "$logs/timing.trace.json")
      GP_DEVICE_TIMING=$dt timeout 150 "$bin/gpipe-bench" models/resnet20-cifar.yaml \
        --stages 1,2,4 --micro-batches 1,8 --remat never --devices cuda:0 --steps 10 \
        --warmup 2 --json --quiet "${tr[@]}" >"$logs/timing-$dt-$r.json" 2>>"$logs/timing.log"
      say "timing: GP_DEVICE_TIMING=$dt, repetition $r: rc=$?"
    done
  done
  python3 - "$logs" <<'PY' | tee -a "$summary"
import glob, json, sys
d = sys.argv[1]
best = {}
for dt in ("1", "0"):
    for f in glob.glob(f"{d}/timing-{dt}-*.json"):
        try:
            runs = json.load(open(f))["runs"]
        except Exception as e:
            print(f"timing: {f}: {e}")
            continue
        for r in runs:
            k = (dt, r["stages"], r["micro_batches"])
            if r["samples_per_s"] and r["samples_per_s"] > best.get(k, {}).get("samples_per_s", 0):
                best[k] = r
for (dt, K, M), r in sorted(best.items()):
    if dt != "1":
        continue
    o = best.get(("0", K, M), {})
    ratio = r["samples_per_s"] / o["samples_per_s"] if o.get("samples_per_s") else float("nan")
    f = lambda x: "-" if x is None else f"{x:.3f}"
    print(f"timing: K={K} M={M}: {r['samples_per_s']:.0f} samples/s timed on the device, "
          f"{ratio:.3f}x of host timing; bubble {f(r['bubble_measured'])} replay "
          f"{f(r['bubble_replayed'])} sim {f(r.get('bubble_simulated'))} theory "
          f"{f(r['bubble_theory'])} (host timing: {f(o.get('bubble_measured'))})")
try:
    ev = json.load(open(f"{d}/timing.trace.json"))["traceEvents"]
    rows = sorted({e["args"]["name"] for e in ev if e.get("name") == "thread_name"})
    dev = sum(1 for e in ev if e.get("ph") == "X" and e.get("tid", 0) >= 64)
    print(f"timing: trace rows {rows}; {dev} device spans")
except Exception as e:
    print(f"timing: trace: {e}")
PY
}

# One sweep per "THREADS:BATCH[:CPUS]" of GP_SCALING (default: 8 threads on every other CPU,
# which on the 16-vCPU machine behaved like one per physical core (docs/bench.md), at batch 128
# and 512), each pipeline-K's speed-up over naive-K as a share of the ideal K*M/(M+K-1) in the
# summary; the tables and JSON are in the logs (scaling-N-...: the N-th sweep, so a repeated
# configuration keeps each sweep's files).
phase_scaling() {
  local even=0,2,4,6,8,10,12,14 i=0
  for cfg in ${GP_SCALING:-8:128:$even p1:128:$even 8:512:$even}; do
    i=$((i + 1))
    # threads:batch[:cpus]: cpus (a taskset list, e.g. 0,2,4,6,8,10,12,14) restricts the CPUs
    # the stages are pinned to, in order
    IFS=: read -r th batch cpus <<<"$cfg"
    local log=$logs/scaling-$i-$th-$batch${cpus:+-cpus-${cpus//,/_}} run=() threads
    [ -n "$cpus" ] && run=(taskset -c "$cpus")
    threads=(--threads "$th")
    [ "${th#p}" != "$th" ] && threads=(--threads-per-stage "${th#p}")
    timeout 300 "${run[@]}" "$bin/gpipe-bench" bench/models/balanced-cnn.yaml --stages 1,2,4,8 \
      --micro-batches 32 --remat never "${threads[@]}" --batch-size "$batch" \
      --schedule "${GP_SCALING_SCHEDULE:-gpipe}" \
      --steps "${GP_SCALING_STEPS:-10}" --reps "${GP_SCALING_REPS:-3}" --json \
      >"$log.json" 2>"$log.err"
    local rc=$?
    say "scaling: ${threads[*]}${cpus:+ on CPUs $cpus}, batch $batch: rc=$rc $(scripts/bench-ideal.py "$log.json" 2>&1)"
  done
}

phase_trace() {
  local k
  for k in 8 4; do
    timeout 150 taskset -c 0,2,4,6,8,10,12,14 "$bin/gpipe-bench" bench/models/balanced-cnn.yaml \
      --stages $k --micro-batches 32 --remat never --threads-per-stage 1 --batch-size 128 \
      --steps 10 --json --trace "$logs/trace-k$k.json" >"$logs/trace-k$k.bench.json" \
      2>"$logs/trace-k$k.err"
    say "trace: K=$k rc=$? $(scripts/bench-ideal.py "$logs/trace-k$k.bench.json" 2>&1)"
    say "trace: K=$k per step: $(scripts/trace-steps.py "$logs/trace-k$k.json" 2>&1 | tail -1)"
  done
}

phase_cores() {
  local c r run=(bench/models/balanced-cnn.yaml --stages 1 --micro-batches 32 --remat never
    --threads 1 --batch-size 128 --steps 20 --warmup 2 --json --quiet)
  for r in 1 2; do
    for c in 0 2 4 6 8 10 12 14; do
      timeout 150 taskset -c $c "$bin/gpipe-bench" "${run[@]}" >"$logs/cores-all-$r-$c.json" \
        2>>"$logs/cores.log" &
    done
    wait
    for c in 0 8; do
      timeout 150 taskset -c $c "$bin/gpipe-bench" "${run[@]}" >"$logs/cores-alone-$r-$c.json" \
        2>>"$logs/cores.log"
    done
  done
  python3 - "$logs" <<'PY' | tee -a "$summary"
import glob, json, re, sys
for mode in ("all", "alone"):
    for r in ("1", "2"):
        got = {}
        for f in glob.glob(f"{sys.argv[1]}/cores-{mode}-{r}-*.json"):
            try:
                runs = json.load(open(f))["runs"]
                got[int(re.search(r"-(\d+)\.json$", f)[1])] = next(
                    x["samples_per_s"] for x in runs if x["micro_batches"] == 32)
            except Exception as e:
                print(f"cores: {f}: {e}")
        if got:
            v = [got[c] for c in sorted(got)]
            how = "all 8 at once" if mode == "all" else "one at a time"
            print(f"cores: {how}, round {r}, samples/s on CPUs {sorted(got)}: "
                  f"{' '.join(f'{x:.0f}' for x in v)} (fastest / slowest {max(v) / min(v):.2f})")
PY
}

phase_schedules() {
  local names=gpipe,1f1b,zb-h1,zb-h2 model
  for model in resnet20-cifar transformer-lm; do
    timeout 200 "$bin/gpipe-bench" "models/$model.yaml" --stages 2,4 --micro-batches 8 \
      --remat never --devices cuda:0 --schedule "$names" --steps 10 --warmup 3 \
      --json --quiet >"$logs/sched-$model.json" 2>"$logs/sched-$model.log"
    say "schedules: $model rc=$?"
    timeout 120 "$bin/gpipe-bench" "models/$model.yaml" --stages 2,4 --micro-batches 8 \
      --remat never --devices cuda:0 --schedule interleaved --virtual-stages 2 --steps 10 \
      --warmup 3 --json --quiet >"$logs/sched-$model-il.json" 2>>"$logs/sched-$model.log"
    say "schedules: $model interleaved rc=$? $(tail -1 "$logs/sched-$model.log")"
  done
  python3 - "$logs" <<'PY' | tee -a "$summary"
import glob, json, sys
for f in sorted(glob.glob(f"{sys.argv[1]}/sched-*.json")):
    try:
        runs = json.load(open(f))["runs"]
    except Exception as e:
        print(f"schedules: {f}: {e}")
        continue
    for r in runs:
        g = lambda k: "-" if r.get(k) is None else f"{r[k]:.3f}"
        print(f"schedules: {f.split('/')[-1]} K={r['stages']} M={r['micro_batches']} "
              f"{r.get('schedule')} V={r.get('virtual_stages', 1)}: "
              f"{r.get('samples_per_s') or 0:.0f} samples/s, bubble measured {g('bubble_measured')} "
              f"simulated {g('bubble_simulated')} theory {g('bubble_theory')}")
PY
}

phase_gpt2() {
  local shard=()
  [ -f "$root/shard/gpt2/train.en.ids" ] && shard=(--shard "$root/shard/gpt2")
  # shellcheck disable=SC2086 # GP_GPT2_ARGS: more options, split on spaces
  timeout 570 python3 bench/gpt2_vs_torch.py --out "$out/gpt2" --bin "$bin" --device cuda:0 \
    --search-batch "${shard[@]}" ${GP_GPT2_ARGS:-} >"$logs/gpt2.log" 2>&1
  say "gpt2: rc=$? $(grep -m 3 -E '^gpt2_vs_torch: .*(TFLOP|differ|failed|Error|error)' "$logs/gpt2.log" | tr '\n' ' ')"
  sed -n '/^[|-]/p' "$out/gpt2/results.md" 2>/dev/null | tee -a "$summary"
}

phase_sdpa() {
  local lib
  lib=$(ldd "$bin/test_cuda_sdpa" | grep -o "libcudnn\.so[^ ]* => [^ ]*" | sed 's/.*=> //')
  say "sdpa: cuDNN $(python3 -c 'import ctypes, sys
print(ctypes.CDLL(sys.argv[1]).cudnnGetVersion())' "$lib" 2>&1 | tail -1) ($lib)"
  timeout 300 "$bin/test_cuda_sdpa" >"$logs/sdpa-test.log" 2>&1
  local rc=$?
  say "sdpa: test_cuda_sdpa rc=$rc: $(grep -E 'passed|skip' "$logs/sdpa-test.log" | tail -1)"
  grep -m 20 -E "FAIL|unfused" "$logs/sdpa-test.log" | sed 's/^/sdpa: /' | tee -a "$summary"
  local r g
  for r in 1 2; do
    for g in 1 0; do
      GP_SDPA=$g timeout 200 "$bin/gpipe-bench" bench/models/lm-fused.yaml --data synthetic \
        --stages 1 --micro-batches 1 --remat never --devices cuda:0 --precision bf16 \
        --batch-size 8 --steps 10 --warmup 3 --json --quiet >"$logs/sdpa-lm-$g-$r.json" \
        2>"$logs/sdpa-lm-$g-$r.err"
      say "sdpa: lm-fused GP_SDPA=$g run $r rc=$?: $(grep -c unfused "$logs/sdpa-lm-$g-$r.err") 'unfused' lines $(grep -m 1 unfused "$logs/sdpa-lm-$g-$r.err")"
    done
  done
  python3 - "$logs" <<'PY' | tee -a "$summary"
import glob, json, sys
best = {}
for g in ("1", "0"):
    for f in glob.glob(f"{sys.argv[1]}/sdpa-lm-{g}-*.json"):
        try:
            r = json.load(open(f))["runs"][0]
            best[g] = max(best.get(g, 0), r.get("samples_per_s") or 0)
        except Exception as e:
            print(f"sdpa: {f}: {e}")
if best.get("0"):
    print(f"sdpa: lm-fused bf16 batch 8, samples/s fused {best.get('1', 0):.2f}, plain "
          f"{best['0']:.2f}: {best.get('1', 0) / best['0']:.3f}x (best of 2, alternated)")
PY
}

phase_memory() {
  timeout 570 scripts/sdpa-memory.sh --out "$logs/memory" --bin "$bin" --device cuda:0 \
    >"$logs/memory.log" 2>&1
  say "memory: rc=$?"
  grep "^sdpa-memory" "$logs/memory.log" | sed 's/^sdpa-memory/memory/' | tee -a "$summary"
}

phase_bf16store() {
  timeout 120 "$bin/test_cuda_bf16_store" >"$logs/bf16store-test.log" 2>&1
  say "bf16store: test_cuda_bf16_store rc=$?: $(grep -E 'passed|skip' "$logs/bf16store-test.log" | tail -1)"
  grep -E "FAIL|peak" "$logs/bf16store-test.log" | sed 's/^/bf16store: /' | tee -a "$summary"
  local run prec store
  for run in fp32:1 bf16-mixed:1 bf16-mixed:0; do
    prec=${run%:*} store=${run#*:}
    GP_BF16_STORE=$store timeout 200 "$bin/gpipe-bench" models/transformer-lm.yaml \
      --data synthetic --stages 1 --micro-batches 1,4 --remat never --schedule gpipe \
      --devices cuda:0 --precision "$prec" --steps 3 --warmup 1 --json --quiet \
      >"$logs/bf16store-$prec-$store.json" 2>"$logs/bf16store-$prec-$store.err"
    say "bf16store: $prec GP_BF16_STORE=$store rc=$?: peak MiB per stage (M = 1; M = 4): $(python3 -c '
import json, sys
print("; ".join("/".join(f"{b / 2**20:.1f}" for b in r["peak_bytes"])
                for r in json.load(open(sys.argv[1]))["runs"] if r.get("peak_bytes")))' \
      "$logs/bf16store-$prec-$store.json" 2>&1 | tail -1)"
  done
}

phase_mpi() {
  local nccl
  nccl=$(ldd "$bin/gpipe-train" | grep -o "libnccl[^ ]* => [^ ]*" | sed 's/.*=> //')
  say "mpi: Open MPI: $ompi_from; NCCL: $nccl, version code $(python3 -c 'import ctypes, sys
v = ctypes.c_int(); ctypes.CDLL(sys.argv[1]).ncclGetVersion(ctypes.byref(v)); print(v.value)' "$nccl" 2>&1 | tail -1) (several ranks on one GPU need 23000 or more)"
  if ! command -v mpirun >/dev/null; then
    say "mpi: NOT RUN: no mpirun here and none in the pack (scripts/gpu-pack.sh packs Open MPI's Debian packages when the build links MPI)"
    return
  fi
  local mode
  for mode in mpi nccl; do
    if [ $mode = mpi ]; then
      GP_NCCL=0 timeout 110 tests/mpi/gpu.sh "$bin/gpipe-train" . >"$logs/mpi-$mode.log" 2>&1
    else
      NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_DEBUG=WARN timeout 110 tests/mpi/gpu.sh "$bin/gpipe-train" . \
        >"$logs/mpi-$mode.log" 2>&1
    fi
    say "mpi: $mode rc=$?: $(tail -1 "$logs/mpi-$mode.log")"
    grep -m 8 -E "^(FAIL|refused)" "$logs/mpi-$mode.log" | sed "s/^/mpi: $mode: /" | tee -a "$summary"
  done
}

phase_cgraph() {
  for r in 1 2; do
    for g in 1 0; do
      for m in gpt2-small resnet20-cifar; do
        local set=()
        [ $m = gpt2-small ] && set=(--set train.batch_size=8) # small steps: launches matter
        GP_CUDA_GRAPHS=$g timeout 150 "$bin/gpipe-bench" "models/$m.yaml" "${set[@]}" --stages 1,2 \
          --micro-batches 1,8 --remat never --devices cuda:0 --steps 10 --warmup 3 --json \
          --quiet >"$logs/cgraph-$m-$g-$r.json" 2>>"$logs/cgraph.log"
        say "cgraph: $m GP_CUDA_GRAPHS=$g, repetition $r: rc=$?"
      done
    done
  done
  grep -m 10 "CUDA graphs" "$logs/cgraph.log" | sort -u | sed 's/^/cgraph: /' | tee -a "$summary"
  python3 - "$logs" <<'PY' | tee -a "$summary"
import glob, json, sys
best = {}
for f in glob.glob(f"{sys.argv[1]}/cgraph-*.json"):
    m, g = f.rsplit("/", 1)[1].split("-")[1:-2], f.rsplit("-", 2)[1]
    try:
        runs = json.load(open(f))["runs"]
    except Exception as e:
        print(f"cgraph: {f}: {e}")
        continue
    for r in runs:
        k = ("-".join(m), g, r["stages"], r["micro_batches"])
        best[k] = max(best.get(k, 0), r["samples_per_s"] or 0)
for (m, g, K, M), v in sorted(best.items()):
    if g == "1":
        o = best.get((m, "0", K, M), 0)
        print(f"cgraph: {m} K={K} M={M}: {v:.0f} samples/s with graphs, {o:.0f} without: "
              f"{v / o if o else float('nan'):.3f}x (best of 2)")
PY
}

phase_kvdec() {
  timeout 300 "$bin/test_cuda_kvdec" models >"$logs/kvdec-test.log" 2>&1
  say "kvdec: test_cuda_kvdec rc=$?: $(grep -E 'passed|skip' "$logs/kvdec-test.log" | tail -1)"
  grep -E "^(FAIL|translation|llama)" "$logs/kvdec-test.log" | head -20 | sed 's/^/kvdec: /' |
    tee -a "$summary"
  GP_DECODE_DEVICES=cuda:0 timeout 300 bash tests/cli/decode_cache.sh "$bin/gpipe-train" . \
    >"$logs/kvdec-cli.log" 2>&1
  say "kvdec: decode_cache.sh on cuda:0 rc=$?: $(tail -2 "$logs/kvdec-cli.log" | tr '\n' ' ')"
}

for p in "$@"; do
  case "$p" in
  info | suite | memcheck | torch | torchseq | capacity | graph | timing | trace | cores | scaling | schedules | gpt2 | sdpa | memory | mpi | cgraph | bf16store | kvdec) "phase_$p" ;;
  *) echo "unknown phase '$p'"; exit 2 ;;
  esac
done
tar -C "$root" -czf "$out/logs.tgz" logs
