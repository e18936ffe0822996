#!/bin/bash
# test_pipeline_timing's checks, then the Chrome trace of its first device-timed run (K = 3,
# M = 4, GPipe, re-materialization always, 3 steps): valid trace-event JSON where each stage
# has its host row and, sorted below it, a device row with one span for each action the host
# row shows, in order and not overlapping, and one for each of its layer slices, inside its
# action's; and scripts/trace-layers.py sums the device row's layers.
set -u
exe=$1
trace_layers=$2 # scripts/trace-layers.py
trace_steps=$3  # scripts/trace-steps.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$exe" "$tmp/trace.json" || exit 1
python3 - "$tmp/trace.json" <<'PY' || { echo "FAIL: the trace of device-timed stages"; exit 1; }
import collections, json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["tid"]: e["args"]["name"] for e in ev if e["name"] == "thread_name"}
order = {e["tid"]: e["args"]["sort_index"] for e in ev if e["name"] == "thread_sort_index"}
dev = 1024  # GP_MAX_DEVICES: the device row of stage s is tid 1024 + s
assert sorted(names) == [0, 1, 2, dev, dev + 1, dev + 2], names
for s in range(3):
    assert names[s].startswith(f"stage {s} (units ") and names[s].endswith(", host"), names
    assert names[dev + s] == f"stage {s} on cpu, device time", names
    assert order[s] == 2 * s and order[dev + s] == 2 * s + 1, order
acts = [e for e in ev if e["ph"] == "X" and e["cat"] != "layer"]
for s in range(3):
    host = [(e["name"], e["args"]["step"]) for e in acts if e["tid"] == s]
    spans = [e for e in acts if e["tid"] == dev + s]
    assert [(e["name"], e["args"]["step"]) for e in spans] == host, (s, host, spans)
    n = collections.Counter(e["name"][0] for e in spans)
    assert n["F"] == n["B"] == n["R"] == 12 and n["s"] == 3, n
    assert all(e["dur"] >= 0 for e in spans)
    for a, b in zip(spans, spans[1:]):
        assert a["ts"] + a["dur"] <= b["ts"] + 1e-3, (a, b)
# layer slices: the device row has the host row's, each inside its action's device span
layers = [e for e in ev if e["ph"] == "X" and e["cat"] == "layer"]
kind = {"forward": "F", "recompute": "R", "backward": "B"}
key = lambda e: (e["name"], e["args"]["pass"], e["args"]["micro_batch"], e["args"]["step"])
for s in range(3):
    host = sorted(key(e) for e in layers if e["tid"] == s)
    on_dev = [e for e in layers if e["tid"] == dev + s]
    assert host and sorted(key(e) for e in on_dev) == host, (s, len(host), len(on_dev))
    spans = {(e["name"], e["args"]["step"]): e for e in acts if e["tid"] == dev + s}
    for e in on_dev:
        a = e["args"]
        h = spans[(f'{kind[a["pass"]]}{a["micro_batch"]}', a["step"])]
        assert h["ts"] - 0.01 <= e["ts"] and e["ts"] + e["dur"] <= h["ts"] + h["dur"] + 0.01, (e, h)
print("trace: 3 host rows, 3 device rows, every action and layer on both")
PY
# scripts/trace-layers.py sums the device rows' layer slices when the trace has them
"$trace_layers" "$tmp/trace.json" --stage 1 --steps 3 >"$tmp/layers" ||
  { echo "FAIL: trace-layers.py exited $?"; exit 1; }
python3 - "$tmp/trace.json" "$tmp/layers" <<'PY' || { echo "FAIL: trace-layers.py: $(cat "$tmp/layers")"; exit 1; }
import json, re, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
out = open(sys.argv[2]).read()
head = out.splitlines()[0]
assert ", stage 1, device time:" in head, head
want = sum(e["dur"] for e in ev if e["ph"] == "X" and e["cat"] == "layer" and e["tid"] == 1024 + 1)
got = float(re.search(r"layers ([0-9.]+) ms/step", head).group(1)) * 1e3 * 3
assert abs(got - want) <= 0.01 * want + 30, (got, want, head)
print("trace-layers.py: the device row's layers")
PY
# scripts/trace-steps.py: each step's span and the device rows' busy time per stage, the mean
# idle and the busiest stage's, as the trace's slices add up
"$trace_steps" "$tmp/trace.json" >"$tmp/steps" || { echo "FAIL: trace-steps.py exited $?"; exit 1; }
python3 - "$tmp/trace.json" "$tmp/steps" <<'PY' || { echo "FAIL: trace-steps.py: $(cat "$tmp/steps")"; exit 1; }
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
dev = 1024  # GP_MAX_DEVICES: the device row of stage s is tid 1024 + s
lines = open(sys.argv[2]).read().splitlines()
assert lines[0].endswith("busy ms per stage (device time)"), lines[0]
rows = [l.split() for l in lines[1:]]
assert [r[0] for r in rows] == ["1", "2", "3", "all"], rows
acts = [e for e in ev if e["ph"] == "X" and e["cat"] != "layer" and e["tid"] >= dev]
for r in rows[:3]:
    step = int(r[0])
    sa = [e for e in acts if e["args"]["step"] == step]
    span = max(e["ts"] + e["dur"] for e in sa) - min(e["ts"] for e in sa)
    busy = [sum(e["dur"] for e in sa if e["tid"] == dev + s) for s in range(3)]
    assert abs(float(r[1]) - span / 1e3) < 0.006, (r, span)
    got = [float(b) for b in r[4].split("/")]
    assert all(abs(g - b / 1e3) < 0.06 for g, b in zip(got, busy)), (r, busy)
    assert abs(float(r[2]) - (1 - sum(busy) / (3 * span))) < 6e-4, (r, busy, span)
    assert abs(float(r[3]) - (1 - max(busy) / span)) < 6e-4, (r, busy, span)
    assert float(r[3]) <= float(r[2]), r
assert lines[-1].endswith("GPipe's bubble for K = 3, M = 4: 0.333"), lines[-1]
print("trace-steps.py: each step's stages")
PY
