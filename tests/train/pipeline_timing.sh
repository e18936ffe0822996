#!/bin/bash
# test_pipeline_timing's checks, then the Chrome trace of its first device-timed run (K = 3,
# M = 4, GPipe, re-materialization always, 3 steps): valid trace-event JSON where each stage
# has its host row and, sorted below it, a device row with one span for each action the host
# row shows, in order and not overlapping.
set -u
exe=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$exe" "$tmp/trace.json" || exit 1
python3 - "$tmp/trace.json" <<'PY' || { echo "FAIL: the trace of device-timed stages"; exit 1; }
import collections, json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["tid"]: e["args"]["name"] for e in ev if e["name"] == "thread_name"}
order = {e["tid"]: e["args"]["sort_index"] for e in ev if e["name"] == "thread_sort_index"}
dev = 64  # GP_MAX_DEVICES: the device row of stage s is tid 64 + s
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
assert not [e for e in ev if e["ph"] == "X" and e["cat"] == "layer" and e["tid"] >= dev]
print("trace: 3 host rows, 3 device rows, every action on both")
PY
