#!/usr/bin/env bash
# Issue 50's acceptance for the zero-bubble schedules: balanced-cnn at K = 2, M = 8, --remat
# never, gpipe-bench's measured bubble (bubble_measured: the stages' mean idle share of the
# step) for 1f1b, zb-h1 and zb-h2, each beside its simulated bubble (the schedule with the
# stage times measured in the same run), its ratio to 1f1b's and its peak activation memory;
# then the cost of the optimizer step's barrier: with clipping on (clip_grad_norm 1e9: the
# norm is summed over the stages, nothing is clipped), gpipe-train's trace of 1f1b and zb-h1
# gives, per stage, how long its step action waits at that sum (its wall time less its
# compute) against the step's span; a stage would idle that long anyway until the next step,
# which starts once every stage is done, so what the barrier adds to a step is at most the
# update that then runs after it (the step's compute).
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
for sched in 1f1b zb-h1; do
  "$build/cli/gpipe-train" "$model" --data synthetic --steps "$((steps / 2 + 2))" --stages 2 \
    --micro-batches 8 --remat never --schedule "$sched" --set train.clip_grad_norm=1e9 \
    --trace "$tmp/$sched.trace.json" --quiet >/dev/null
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
tmp = sys.argv[3]
print("\nthe step's barrier (clip_grad_norm 1e9: the norm summed over the stages, nothing clipped;"
      " steps after the first)")
for name in ("1f1b", "zb-h1"):
    ev = [e for e in json.load(open(f"{tmp}/{name}.trace.json"))["traceEvents"]
          if e.get("ph") == "X" and e.get("cat") != "layer" and e["args"]["step"] > 1]
    steps = sorted({e["args"]["step"] for e in ev})
    span = sum(max(e["ts"] + e["dur"] for e in ev if e["args"]["step"] == t) -
               min(e["ts"] for e in ev if e["args"]["step"] == t) for t in steps) / len(steps)
    opt = [e for e in ev if e.get("cat") == "optimizer"]
    waits, comp = [], []
    for tid in sorted({e["tid"] for e in opt}):
        mine = [e for e in opt if e["tid"] == tid]
        waits.append(sum(e["dur"] - e["args"]["compute_us"] for e in mine) / len(mine) / 1e3)
        comp.append(sum(e["args"]["compute_us"] for e in mine) / len(mine) / 1e3)
    print(f"{name:9} step {span / 1e3:7.1f} ms; waits at the sum per stage "
          f"{'/'.join(f'{w:.2f}' for w in waits)} ms; the update after it "
          f"{max(comp):.3f} ms ({100 * max(comp) * 1e3 / span:.3f}% of the step)")
PY
