#!/usr/bin/env bash
# Issue 7's speed comparison against PyTorch eager, in one command: for each model and
# precision, gpipe-bench (one stage, one micro-batch) and scripts/torch_compare.py train the
# same model, batch, precision and optimizer on the same device, alternating, R times; then a
# markdown table of samples/s, the ratio and the model-FLOP utilization of each side.
#
#   scripts/compare-torch.sh OUT_DIR [--device cuda:0|cpu] [--build DIR | --bin DIR] [--reps R]
#       [--steps S] [--warmup W] [--models a,b] [--precisions fp32,bf16] [--batch MODEL=N ...]
#       [--threads C] [--peak-tflops FP32,BF16] [--timeout SEC] [--python PY]
#       [--torch-arg ARG ...] [--gpipe-arg ARG ...] [--keep-raw]
#
# OUT_DIR gets results.md (the table), results.json, env.txt (machine, versions), log.txt
# and raw.tar.gz (every run's output). docs/torch-compare.md explains all of it.
set -euo pipefail
caller=$PWD
self=$(realpath "$0")
cd "$(dirname "$self")/.."

usage() {
  sed -n '2,13p' "$self" | sed 's/^# \{0,1\}//'
  exit "${1:-2}"
}

[ $# -ge 1 ] || usage
case "$1" in -h | --help) usage 0 ;; -*) usage ;; esac
out=$1
case "$out" in /*) ;; *) out=$caller/$out ;; esac
shift
device=""
build=build
bin=""
reps=3
steps=""
warmup=""
models=fashion-cnn,resnet56-cifar
precisions=fp32,bf16
threads=$(nproc)
peak=""
run_timeout=180
python=${PYTHON:-python3}
keep_raw=0
declare -A batch_of=()
torch_args=()
gpipe_args=()
while [ $# -gt 0 ]; do
  case "$1" in
  --device) device=$2; shift ;;
  --build) build=$2; shift ;;
  --bin) bin=$2; shift ;;
  --reps) reps=$2; shift ;;
  --steps) steps=$2; shift ;;
  --warmup) warmup=$2; shift ;;
  --models) models=$2; shift ;;
  --precisions) precisions=$2; shift ;;
  --batch) batch_of[${2%%=*}]=${2#*=}; shift ;;
  --threads) threads=$2; shift ;;
  --peak-tflops) peak=$2; shift ;;
  --timeout) run_timeout=$2; shift ;;
  --python) python=$2; shift ;;
  --torch-arg) torch_args+=("$2"); shift ;;
  --gpipe-arg) gpipe_args+=("$2"); shift ;;
  --keep-raw) keep_raw=1 ;;
  -h | --help) usage 0 ;;
  *) echo "compare-torch: unknown flag '$1' (--help)" >&2; exit 2 ;;
  esac
  shift
done

# nvidia-smi and CUDA number devices the same way only in PCI order.
export CUDA_DEVICE_ORDER=PCI_BUS_ID
if [ -z "$device" ]; then
  if nvidia-smi -L >/dev/null 2>&1; then device=cuda:0; else device=cpu; fi
fi
case "$device" in cpu | cuda:[0-9]*) ;; *) echo "compare-torch: --device cpu or cuda:N, not '$device'" >&2; exit 2 ;; esac
# Defaults: enough timed steps for a stable median on a GPU (a step is milliseconds there);
# few on a CPU, where a step of resnet56 at batch 128 takes seconds.
if [ "$device" = cpu ]; then
  steps=${steps:-10} warmup=${warmup:-2}
else
  steps=${steps:-50} warmup=${warmup:-10}
fi
windows=5
window_steps=$(((steps + windows - 1) / windows))

mkdir -p "$out"
raw=$out/raw
rm -rf "$raw"
mkdir -p "$raw"
log=$out/log.txt
: >"$log"
say() { echo "compare-torch: $*" | tee -a "$log" >&2; }

# ---- build and pre-flight checks: fail before the long part, not during it ----
if [ -n "$bin" ]; then # prebuilt programs (scripts/gpu-pack.sh): no build here
  bench=$bin/gpipe-bench
  train=$bin/gpipe-train
  [ -x "$bench" ] && [ -x "$train" ] || { say "no gpipe-bench and gpipe-train in $bin"; exit 1; }
else
  if [ ! -f "$build/build.ninja" ]; then
    say "configuring $build"
    meson setup "$build" >>"$log" 2>&1 || { say "meson setup $build failed (see $log)"; exit 1; }
  fi
  say "building gpipe-bench and gpipe-train in $build"
  ninja -C "$build" cli/gpipe-bench cli/gpipe-train >>"$log" 2>&1 ||
    { say "ninja -C $build failed (see $log)"; exit 1; }
  bench=$build/cli/gpipe-bench
  train=$build/cli/gpipe-train
fi
if [ -z "$bin" ] && [ "$device" != cpu ] && ! grep -q 'GP_HAVE_CUDA 1' "$build/gp_config.h"; then
  say "$build was configured without CUDA; run: meson setup --reconfigure $build -Dcuda=enabled"
  exit 1
fi
has_precision=0
help=$("$bench" --help)
[[ $help == *--precision* ]] && has_precision=1
[ $has_precision = 1 ] || say "this gpipe-bench has no --precision flag: gpipe's bf16 runs are skipped"

if ! "$python" -c 'import torch, yaml' 2>>"$log"; then
  say "$python cannot import torch and yaml"
  exit 1
fi
if [ "$device" != cpu ] &&
  ! "$python" -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() and torch.cuda.device_count() > ${device#cuda:} else 1)"; then
  say "torch sees no $device"
  exit 1
fi

gpu=cpu
if [ "$device" != cpu ]; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i "${device#cuda:}" 2>/dev/null | head -1 || true)
  [ -n "$gpu" ] || gpu=$("$python" -c "import torch; print(torch.cuda.get_device_name('$device'))")
fi
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  if rev=$(git rev-parse HEAD 2>/dev/null); then
    echo "commit: $rev$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
  fi
  echo "device: $device ($gpu)"
  echo "gpipe-bench: $("$bench" --version)"
  echo "torch: $("$python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())')"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores, threads $threads"
  echo "extra arguments: gpipe-bench ${gpipe_args[*]:-(none)}; torch_compare.py ${torch_args[*]:-(none)}"
  echo "steps: $steps timed after $warmup (torch: $windows windows of $window_steps), reps $reps"
  if [ "$device" != cpu ]; then
    nvidia-smi 2>&1 || true
    nvidia-smi -q -d CLOCK,PERFORMANCE,POWER -i "${device#cuda:}" 2>&1 || true
  fi
} >"$out/env.txt"

# The same model on both sides: gpipe's parameter count (gpipe-train prints it exactly) must
# be the one torch builds; the torch runs are also told to refuse any other.
declare -A params_of=()
IFS=, read -r -a model_list <<<"$models"
IFS=, read -r -a prec_list <<<"$precisions"
for m in "${model_list[@]}"; do
  f=models/$m.yaml
  [ -f "$f" ] || { say "no model file $f"; exit 2; }
  n=$("$train" "$f" --data synthetic --steps 1 --batch-size 2 --devices cpu --eval-every 1000000 2>&1 |
    sed -n 's/.*parameters (\([0-9]*\)).*/\1/p' | head -1)
  t=$("$python" scripts/torch_compare.py "$f" --count-only 2>>"$log" | sed -n 's/^parameters: //p')
  say "$m: gpipe ${n:-?} parameters, torch ${t:-?}"
  if [ -z "$n" ] || [ "$n" != "$t" ]; then
    say "$m: the parameter counts differ (or one side failed): not the same model"
    exit 1
  fi
  params_of[$m]=$n
done

# ---- the runs: per repetition, every (model, precision), gpipe and torch back to back; the
# side that goes first alternates between repetitions, so drift (clocks, temperature) does not
# always favour the same one ----
run_gpipe() { # model precision rep
  local m=$1 p=$2 r=$3 b=${batch_of[$1]:-}
  local base=$raw/gpipe.$m.$p.r$r
  local args=("models/$m.yaml" --stages 1 --micro-batches 1 --schedule gpipe --remat never
    --devices "$device" --steps "$steps" --warmup "$warmup" --threads "$threads" --json --quiet)
  [ -n "$b" ] && args+=(--batch-size "$b")
  args+=("${gpipe_args[@]}")
  if [ $has_precision = 1 ]; then
    args+=(--precision "$p")
  elif [ "$p" != fp32 ]; then
    echo "this gpipe-bench has no --precision flag" >"$base.err"
    return 0
  fi
  echo "$bench ${args[*]}" >"$base.cmd"
  if ! timeout "$run_timeout" "$bench" "${args[@]}" >"$base.out" 2>"$base.err"; then
    say "gpipe $m $p rep $r failed: $(tail -1 "$base.err")"
    return 0
  fi
  mv "$base.out" "$base.json"
  say "gpipe $m $p rep $r: $("$python" -c "import json,sys; print('%.1f samples/s' % json.load(open(sys.argv[1]))['runs'][0]['samples_per_s'])" "$base.json")"
}

run_torch() { # model precision rep
  local m=$1 p=$2 r=$3 b=${batch_of[$1]:-}
  local base=$raw/torch.$m.$p.r$r
  local args=(scripts/torch_compare.py "models/$m.yaml" --device "$device" --precision "$p"
    --warmup "$warmup" --windows "$windows" --window-steps "$window_steps"
    --expect-params "${params_of[$m]}" --input host)
  [ -n "$b" ] && args+=(--batch-size "$b")
  [ "$device" = cpu ] && args+=(--threads "$threads")
  args+=("${torch_args[@]}")
  echo "$python ${args[*]}" >"$base.cmd"
  if ! timeout "$run_timeout" "$python" "${args[@]}" >"$base.out" 2>"$base.err"; then
    say "torch $m $p rep $r failed: $(tail -1 "$base.err")"
    return 0
  fi
  tail -1 "$base.out" >"$base.json"
  say "torch $m $p rep $r: $("$python" -c "import json,sys; print('%.1f samples/s' % json.load(open(sys.argv[1]))['samples_per_s'])" "$base.json")"
}

for ((r = 1; r <= reps; r++)); do
  for m in "${model_list[@]}"; do
    for p in "${prec_list[@]}"; do
      if ((r % 2)); then
        run_gpipe "$m" "$p" "$r"
        run_torch "$m" "$p" "$r"
      else
        run_torch "$m" "$p" "$r"
        run_gpipe "$m" "$p" "$r"
      fi
    done
  done
done

# ---- the table ----
report=(scripts/torch_compare.py --report "$raw" --gpu "$gpu" --md "$out/results.md"
  --summary "$out/results.json")
[ -n "$peak" ] && report+=(--peak-tflops "$peak")
if [ "$device" = cpu ]; then
  # no datasheet for a CPU: its fp32 peak is gpipe-bench's measured sgemm x the cores used
  js=("$raw"/gpipe.*.json)
  j=${js[0]}
  if [ -f "$j" ]; then
    cpu_peak=$("$python" -c "import json,sys; j=json.load(open(sys.argv[1])); print(j['machine']['sgemm_gflops_per_core'] * j['runs'][0]['cores_used'])" "$j")
    report+=(--cpu-peak-gflops "$cpu_peak")
  fi
fi
status=0
"$python" "${report[@]}" || status=$?
cat "$out/results.md" >>"$log" 2>/dev/null || true

# few files come back from a device machine: the raw outputs travel as one archive
tar -czf "$out/raw.tar.gz" -C "$out" raw
[ $keep_raw = 1 ] || rm -rf "$raw"
say "wrote $out/results.md, results.json, env.txt, log.txt, raw.tar.gz"
exit $status
