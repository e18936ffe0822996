#!/usr/bin/env bash
# Issue 50's acceptance for the zero-bubble schedules: balanced-cnn at K = 2, M = 8, --remat
# never, gpipe-bench's measured bubble (bubble_measured: the stages' mean idle share of the
# step) for 1f1b, zb-h1 and zb-h2, each beside its simulated bubble (the schedule with the
# stage times measured in the same run), its ratio to 1f1b's and its peak activation memory;
# then the cost of the optimizer step's barrier (the clipping norm summed over the stages):
# samples/s without and with it, 1f1b and zb-h1, the two sweeps alternated REPS times (the
# best of each kept).
# Usage: bench/schedules.sh [BUILD_DIR] (STEPS, REPS from the environment; default 10, 3)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
model=$root/bench/models/balanced-cnn.yaml
steps=${STEPS:-10}; reps=${REPS:-3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
run=("$build/cli/gpipe-bench" "$model" --stages 2 --micro-batches 8 --remat never
     --steps "$steps" --json --quiet)
"${run[@]}" --reps "$reps" --schedule 1f1b,zb-h1,zb-h2 >"$tmp/schedules.json"
for i in $(seq "$reps"); do
  "${run[@]}" --reps 1 --schedule 1f1b,zb-h1 >"$tmp/plain.$i.json"
  "${run[@]}" --reps 1 --schedule 1f1b,zb-h1 --set train.clip_grad_norm=1e9 >"$tmp/clip.$i.json"
done
python3 - "$tmp/schedules.json" "$reps" "$tmp" <<'PY'
import json, sys
want = {"zb-h1": 0.5, "zb-h2": 0.25}
def runs(path):
    return {r["schedule"]: r for r in json.load(open(path))["runs"]
            if r["stages"] == 2 and r["micro_batches"] == 8}
s = runs(sys.argv[1])
base = s["1f1b"]["bubble_measured"]
print("balanced-cnn, K=2, M=8, --remat never")
print(f"{'schedule':9} {'bubble':>7} {'vs 1f1b':>8} {'target':>7} {'simulated':>9} "
      f"{'replayed':>8} {'samples/s':>9}  peak MiB per stage")
for name in ("1f1b", "zb-h1", "zb-h2"):
    r = s[name]
    ratio = r["bubble_measured"] / base if base > 0 else float("nan")
    t = want.get(name)
    mark = "-" if t is None else f"<={t:.2f}{'' if ratio <= t else ' !'}"
    peak = "/".join(f"{b / 2**20:.1f}" for b in r["peak_bytes"])
    print(f"{name:9} {r['bubble_measured']:7.3f} {ratio:7.2f}x {mark:>7} "
          f"{r['bubble_simulated']:9.3f} {r['bubble_replayed']:8.3f} {r['samples_per_s']:9.1f}  "
          f"{peak}")
reps, tmp = int(sys.argv[2]), sys.argv[3]
def best(kind, name):
    return max(runs(f"{tmp}/{kind}.{i}.json")[name]["samples_per_s"] for i in range(1, reps + 1))
print("\nthe step's barrier (clip_grad_norm 1e9: the norm summed over the stages, nothing clipped)")
for name in ("1f1b", "zb-h1"):
    a, b = best("plain", name), best("clip", name)
    print(f"{name:9} samples/s without {a:7.1f}, with {b:7.1f}: {100 * (a / b - 1):+.1f}% time")
PY
