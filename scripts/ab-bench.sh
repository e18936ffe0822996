#!/usr/bin/env bash
# A/B timing of two builds on one machine: runs `gpipe-bench ARGS --json` with each build's
# binary, alternating A, B, A, B ... REPS times, and prints per run configuration the best
# samples/s of each and the ratio B/A, and the median of the pairs' ratios (run the same build
# as A and B for the A/A spread). Alternating in one run is what makes a ratio
# meaningful on a shared, noisy machine.
#   scripts/ab-bench.sh [--reps N] BUILD_A BUILD_B -- MODEL.yaml [gpipe-bench flags]
# e.g. scripts/ab-bench.sh /tmp/before/build build -- models/resnet56-cifar.yaml --stages 1
set -euo pipefail
reps=3
if [[ ${1:-} == --reps ]]; then reps=$2; shift 2; fi
if [[ $# -lt 4 || $3 != -- ]]; then
  echo "usage: scripts/ab-bench.sh [--reps N] BUILD_A BUILD_B -- MODEL.yaml [gpipe-bench flags]" >&2
  exit 2
fi
a=$1 b=$2
shift 3
for d in "$a" "$b"; do
  [[ -x $d/cli/gpipe-bench ]] || { echo "ab-bench: no $d/cli/gpipe-bench" >&2; exit 2; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((r = 0; r < reps; r++)); do
  for side in a b; do
    dir=$a; [[ $side == b ]] && dir=$b
    "$dir/cli/gpipe-bench" "$@" --json --quiet >"$out/$side.$r.json"
  done
done
python3 - "$out" "$reps" "$a" "$b" <<'PY'
import json, statistics, sys
out, reps, a, b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
# per run configuration and repetition: samples/s of each side (builds before the rename of
# re-materialization write "checkpoint" where later ones write "remat")
runs = {}
for side in "ab":
    for r in range(reps):
        for run in json.load(open(f"{out}/{side}.{r}.json"))["runs"]:
            remat = run.get("remat", run.get("checkpoint"))
            key = (run["stages"], run["micro_batches"], run["schedule"], remat)
            runs.setdefault(key, {}).setdefault(side, {})[r] = run["samples_per_s"]
print(f"A = {a}, B = {b}: {reps} alternating runs each; best samples/s, and B/A of each "
      f"pair (A then B) as median [min, max]")
print(f"{'K':>3} {'M':>3} {'schedule':>8} {'remat':>11} {'A':>10} {'B':>10} {'B/A':>6}"
      f" {'paired B/A':>22}")
for key, v in runs.items():
    k, m, s, c = key
    ba, bb = max(v["a"].values()), max(v["b"].values())
    pairs = [v["b"][r] / v["a"][r] for r in v["a"] if r in v["b"] and v["a"][r] > 0]
    paired = (f"{statistics.median(pairs):.3f} [{min(pairs):.3f}, {max(pairs):.3f}]"
              if pairs else "-")
    print(f"{k:>3} {m:>3} {s:>8} {c:>11} {ba:>10.1f} {bb:>10.1f} {bb / ba:>6.2f} {paired:>22}")
PY
