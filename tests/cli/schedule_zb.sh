#!/usr/bin/env bash
# The zero-bubble schedules by name in the three programs: --schedule zb-h1|zb-h2, the model
# file's pipeline.schedule and a plan's schedule:; they re-materialize nothing, so a run without
# --remat takes never and one that asks for more is refused in one line naming the flag or the
# file position; gpipe-train's trace has W actions, gpipe-partition's timeline draws them and
# gpipe-bench reports the schedule by name.
set -u
train=$1; part=$2; bench=$3; srcdir=$4
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { echo "FAIL: $*"; failed=$((failed+1)); }
mlp=$srcdir/models/fashion-mlp.yaml
fast=(--data synthetic --steps 2 --batch-size 8 --threads 1 --quiet)

# refused combinations: one line each, exit 2
"$train" "$mlp" "${fast[@]}" --stages 2 --micro-batches 2 --schedule zb-h1 --remat always \
  >/dev/null 2>"$tmp/err"; rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
  grep -qx "gpipe-train: --remat always: the zb-h1 schedule re-materializes nothing; use --remat never" \
    "$tmp/err" && ok || bad "--schedule zb-h1 --remat always: rc $rc: $(cat "$tmp/err")"
"$bench" "$mlp" --stages 2 --micro-batches 2 --schedule zb-h1 --remat always --quiet \
  >/dev/null 2>"$tmp/err"; rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
  grep -qx "gpipe-bench: nothing to run: the zero-bubble schedules re-materialize nothing; give --remat never" \
    "$tmp/err" && ok || bad "gpipe-bench --schedule zb-h1 --remat always: rc $rc: $(cat "$tmp/err")"
sed 's/^pipeline:.*$/pipeline: {stages: 2, micro_batches: 2, schedule: zb-h2, remat: always}/' \
  "$mlp" >"$tmp/zb.yaml"
line=$(grep -n '^pipeline:' "$tmp/zb.yaml" | cut -d: -f1)
"$train" "$tmp/zb.yaml" "${fast[@]}" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc != 0 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
  grep -q "^gpipe-train: $tmp/zb.yaml:$line:[0-9]*: remat: always with schedule zb-h2: it re-materializes nothing (use never)$" \
    "$tmp/err" && ok || bad "pipeline.remat: always with zb-h2: rc $rc: $(cat "$tmp/err")"
"$part" "$mlp" --stages 2 --batch-size 8 --schedule zb-h1 -o "$tmp/plan.yaml" >/dev/null \
  2>"$tmp/err" && grep -qx "schedule: zb-h1" "$tmp/plan.yaml" && grep -qx "remat: never" \
  "$tmp/plan.yaml" && ok || bad "a zb-h1 plan: $(cat "$tmp/err" "$tmp/plan.yaml")"
sed 's/^remat: never$/remat: except_last/' "$tmp/plan.yaml" >"$tmp/bad.yaml"
"$train" "$mlp" "${fast[@]}" --partition "$tmp/bad.yaml" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc != 0 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
  grep -q "bad.yaml:[0-9]*:[0-9]*: remat: except_last with schedule zb-h1: the zero-bubble" \
    "$tmp/err" && ok || bad "a zb-h1 plan with except_last: rc $rc: $(cat "$tmp/err")"

# they run: the plan (and the file's schedule without remat:) train; the trace has W actions
"$train" "$mlp" "${fast[@]}" --partition "$tmp/plan.yaml" --trace "$tmp/t.json" \
  >/dev/null 2>"$tmp/err" && python3 - "$tmp/t.json" <<'PY' && ok || bad "zb-h1 trace: $(cat "$tmp/err")"
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
w = [e for e in ev if e.get("cat") == "weight"]
assert w and all(e["name"].startswith("W") for e in w), "no W actions"
PY
sed 's/^pipeline:.*$/pipeline: {stages: 2, micro_batches: 4, schedule: zb-h2}/' "$mlp" \
  >"$tmp/h2.yaml"
"$train" "$tmp/h2.yaml" "${fast[@]}" >/dev/null 2>"$tmp/err" && ok ||
  bad "pipeline.schedule: zb-h2 without remat: $(cat "$tmp/err")"

# the timeline draws W; the bench names the schedule
"$part" "$mlp" --stages 2 --micro-batches 4 --schedule zb-h2 --timeline >"$tmp/out" 2>&1 &&
  grep -q "^    0 |.*W" "$tmp/out" && grep -q "W weight gradients" "$tmp/out" && ok ||
  bad "--timeline with zb-h2: $(cat "$tmp/out")"
"$bench" "$mlp" --stages 2 --micro-batches 2 --schedule 1f1b,zb-h1 --batch-size 8 --steps 1 \
  --warmup 0 --threads 1 --json --quiet >"$tmp/b.json" 2>"$tmp/err" &&
  python3 - "$tmp/b.json" <<'PY' && ok || bad "gpipe-bench zb-h1: $(cat "$tmp/err" "$tmp/b.json")"
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
zb = [r for r in runs if r["schedule"] == "zb-h1"]
assert len(zb) == 1 and zb[0]["remat"] == "never" and zb[0]["bubble_measured"] is not None, runs
PY

# memory: what W keeps beyond 1F1B's, measured (gpipe-train's memory line) against
# gpipe-partition's estimate of it, per stage. B's gradients that W does not read, and its
# temporaries, are freed at B's end; when they stayed in the slot until W, zb-h1 on
# balanced-cnn held 12.5 / 17.3 MiB beyond 1f1b against 8.0 / 12.5 estimated.
cnn=$srcdir/bench/models/balanced-cnn.yaml
M=(--stages 2 --micro-batches 8 --remat never --by flops)
for s in 1f1b zb-h1; do
  "$part" "$cnn" "${M[@]}" --schedule $s --json >"$tmp/est-$s.json" 2>"$tmp/err" &&
  "$train" "$cnn" --data synthetic --steps 1 --threads 1 "${M[@]}" --schedule $s \
    >"$tmp/run-$s.txt" 2>>"$tmp/err" || bad "memory, $s: $(cat "$tmp/err")"
done
python3 - "$tmp" <<'PY' && ok || bad "zb-h1's memory beyond 1f1b, measured against estimated"
import json, re, sys
t = sys.argv[1]
est = {s: [p["memory_bytes"] / 2**20 for p in json.load(open(f"{t}/est-{s}.json"))["partition"]]
       for s in ("1f1b", "zb-h1")}
run = {}
for s in ("1f1b", "zb-h1"):
    line = next(l for l in open(f"{t}/run-{s}.txt") if l.startswith("memory:"))
    run[s] = [float(x) for x in re.search(r"stages: ([0-9., ]+) MiB", line).group(1).split(",")]
for k in range(2):
    got, want = run["zb-h1"][k] - run["1f1b"][k], est["zb-h1"][k] - est["1f1b"][k]
    assert got <= want + 0.5, (k, got, want, run, est)
PY

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
