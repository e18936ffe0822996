#!/usr/bin/env bash
# The largest batch that trains bench/models/lm-fused.yaml (GPT-2-small's shapes, T = 1024) in
# bf16 on one GPU with cuDNN's fused attention (GP_SDPA=1) and with the plain path (GP_SDPA=0,
# the [B, H, T, T] probabilities kept per layer): doubling from --start, then bisecting to
# within a quarter. A trial is one gpipe-bench run of 2 steps (one warm-up); it fits when
# gpipe-bench reports it did. Prints one line per mode and writes DIR/trials.tsv.
# Usage: scripts/sdpa-memory.sh --out DIR [--bin DIR] [--device cuda:0] [--start 16]
#        [--max 2048] [--trial-timeout 180] [--model FILE]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="" bin="$root/build/cli" device=cuda:0 start=16 max=2048 tmo=180
model="$root/bench/models/lm-fused.yaml"
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || { echo "sdpa-memory.sh: $1 needs a value" >&2; exit 2; }
  case $1 in
    --out) out=$2 ;;
    --bin) bin=$2 ;;
    --device) device=$2 ;;
    --start) start=$2 ;;
    --max) max=$2 ;;
    --trial-timeout) tmo=$2 ;;
    --model) model=$2 ;;
    *) echo "sdpa-memory.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
[ -n "$out" ] || { echo "usage: scripts/sdpa-memory.sh --out DIR [options]" >&2; exit 2; }
mkdir -p "$out/logs"
printf 'mode\tbatch\tfits\tsamples_per_s\tpeak_bytes\n' >"$out/trials.tsv"

# trial MODE BATCH: 0 when it fits; appends its row to trials.tsv
trial() {
  local log=$out/logs/sdpa$1-b$2
  GP_SDPA=$1 timeout "$tmo" "$bin/gpipe-bench" "$model" --data synthetic --stages 1 \
    --micro-batches 1 --remat never --devices "$device" --precision bf16 --batch-size "$2" \
    --steps 2 --warmup 1 --json --quiet >"$log.json" 2>"$log.err"
  python3 - "$log.json" "$1" "$2" "$out/trials.tsv" <<'PY'
import json, sys
f, mode, batch, tsv = sys.argv[1:]
try:
    r = json.load(open(f))["runs"][0]
    fits = bool(r.get("fits")) and (r.get("samples_per_s") or 0) > 0
    sps, peak = r.get("samples_per_s") or 0, (r.get("peak_bytes") or [0])[0]
except Exception:
    fits, sps, peak = False, 0, 0
open(tsv, "a").write(f"{mode}\t{batch}\t{int(fits)}\t{sps:.2f}\t{peak}\n")
sys.exit(0 if fits else 1)
PY
}

for mode in 1 0; do
  lo=0 hi=0 b=$start
  while [ "$b" -le "$max" ]; do
    if trial $mode "$b"; then lo=$b; b=$((b * 2)); else hi=$b; break; fi
  done
  if [ "$lo" = 0 ]; then
    echo "sdpa-memory: GP_SDPA=$mode: batch $start does not fit (see $out/logs)"
    continue
  fi
  [ "$hi" = 0 ] && { echo "sdpa-memory: GP_SDPA=$mode: fits up to --max $max"; continue; }
  while [ $((hi - lo)) -gt $(((lo + 3) / 4)) ]; do
    b=$(((lo + hi) / 2))
    if trial $mode "$b"; then lo=$b; else hi=$b; fi
  done
  peak=$(awk -F'\t' -v m="$mode" -v b="$lo" '$1 == m && $2 == b {print $5}' "$out/trials.tsv" | tail -1)
  echo "sdpa-memory: GP_SDPA=$mode ($([ $mode = 1 ] && echo fused || echo plain) attention):" \
    "largest batch $lo (batch $hi does not fit), peak $((peak / 1048576)) MiB at $lo"
done
