#!/usr/bin/env bash
# gpipe-partition past one process: layouts that cannot work are refused in one line; memory
# per process is the single-process estimate at W = 1 and its stages' sum (plus received
# inputs) at W > 1; hand-off, all-reduce and traffic figures match the formulas worked by hand
# on a tiny model; the 6B-parameter example plans in bounded memory and time; bad cluster
# files get file:line:col errors.
set -u
part=$1; srcdir=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { echo "FAIL: $*"; failed=$((failed+1)); }
resnet=$srcdir/models/resnet56-cifar.yaml

# ---- refusals: one line, exit 2, saying what would work
refuse() { # expected-substring, then the arguments
  local want=$1; shift
  "$part" "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qF -- "$want" "$tmp/err" &&
     [ ! -s "$tmp/out" ]; then ok; else bad "$* -> rc $rc: $(cat "$tmp/err" "$tmp/out")"; fi
}
refuse "--replicas 2 does not divide 3 processes" "$resnet" --stages 4 --processes 3 --replicas 2
refuse "8 processes a replica" "$resnet" --stages 4 --processes 8
refuse "use --stages 8 or more" "$resnet" --stages 4 --processes 8
refuse "4 processes do not fit 1 host of 2 processes" "$resnet" --stages 4 --processes 4 \
  --hosts 1 --procs-per-host 2
refuse "cannot be shared by 200 replicas" "$resnet" --stages 1 --processes 200 --replicas 200
refuse "use --micro-batches 16 or fewer" "$resnet" --stages 2 --processes 16 --replicas 8 \
  --micro-batches 32
refuse "--link-local: expected GB/s[,latency in microseconds]" "$resnet" --stages 2 \
  --link-local 0
refuse "--link-remote: expected GB/s" "$resnet" --stages 2 --link-remote 5,x
refuse "--device-tflops: expected TFLOP/s" "$resnet" --stages 2 --device-tflops -1
refuse "give their rate with --device-tflops" "$resnet" --stages 2 --devices cuda --processes 2

# ---- memory: W = 1 is the single-process estimate; W = 2 sums each process's stages, plus
# the inputs a process receives where its first stage keeps no copy (remat never)
for remat in always never; do
  for w in 1 2; do
    if "$part" "$resnet" --stages 4 --micro-batches 4 --remat $remat --processes $w --json \
        >"$tmp/m.json" 2>"$tmp/err"; then
      python3 - "$tmp/m.json" $w $remat <<'PY' && ok || bad "memory W=$w remat $remat"
import json, sys
j = json.load(open(sys.argv[1])); w = int(sys.argv[2]); remat = sys.argv[3]
stage = [s["memory_bytes"] for s in j["partition"]]
pos = j["distributed"]["positions"]
assert len(pos) == w, pos
M = j["micro_batches"]
for p in pos:
    own = sum(stage[p["first_stage"]:p["last_stage"] + 1])
    first_unit = j["partition"][p["first_stage"]]["first_unit"]
    recv = 0
    if remat == "never" and p["position"] > 0:  # GPipe: all M micro-batches' inputs held
        recv = M * j["units"][first_unit]["cut_bytes_before"]
    assert p["memory_handoff_bytes"] == recv, (p, recv)
    assert abs(p["memory_bytes"] - (own + recv)) <= 1e-9 * own, (p["memory_bytes"], own, recv)
if w == 1:
    assert pos[0]["memory_bytes"] == sum(stage), (pos[0]["memory_bytes"], sum(stage))
if remat == "never" and w == 2:
    assert pos[1]["memory_handoff_bytes"] > 0
PY
    else
      bad "memory W=$w remat $remat exited: $(cat "$tmp/err")"
    fi
  done
done

# ---- a tiny model worked by hand: x[8] -> linear 4 (36 parameters) | linear 2 (10) -> loss.
# Batch 8 over R = 2 replicas is 4 rows each, M = 2 micro-batches of 2 rows. The cut between
# the units carries the 4 floats of fc1 and the i32 label: (16 + 4) x 2 = 40 bytes.
cat >"$tmp/tiny.yaml" <<'Y'
name: tiny
inputs: {x: [8], label: {shape: [], dtype: i32}}
layers:
  - {type: linear, out_features: 4, from: x, name: fc1}
  - {type: linear, out_features: 2, name: fc2}
loss: {type: softmax_cross_entropy}
train: {batch_size: 8, optimizer: {type: sgd, lr: 0.1}}
pipeline: {stages: 2, micro_batches: 2}
Y
# W = 4 on 2 hosts of 2: replica 0 is host 0, replica 1 host 1, so each pipeline's hand-off is
# local (1 GB/s, 10 us) and every all-reduce ring edge crosses hosts (2 GB/s, 20 us)
if "$part" "$tmp/tiny.yaml" --processes 4 --replicas 2 --hosts 2 --link-local 1,10 \
    --link-remote 2,20 --device-tflops 1 --json >"$tmp/t.json" 2>"$tmp/err"; then
  python3 - "$tmp/t.json" <<'PY' && ok || bad "tiny by hand: $(cat "$tmp/t.json")"
import json, sys
d = json.load(open(sys.argv[1]))["distributed"]
close = lambda a, b: abs(a - b) <= 1e-12 + 1e-9 * abs(b)
p0, p1 = d["positions"]
assert (d["processes"], d["replicas"], d["procs_per_replica"], d["hosts"], d["procs_per_host"]) \
    == (4, 2, 2, 2, 2), d
assert d["micro_batch_size"] == 2 and d["replica_batch"] == 4, d
assert p0["params"] == 36 and p1["params"] == 10
assert p0["send_bytes"] == 40 and p0["send_remote_replicas"] == 0
assert close(p0["send_s"], 10e-6 + 40 / 1e9), p0["send_s"]
# ring all-reduce, R = 2: 2(R-1)/R x bytes sent; 2(R-1)/R x bytes / bw + 2(R-1) x latency
for p, n in ((p0, 36), (p1, 10)):
    b = 4 * n
    assert p["allreduce_bytes"] == b and p["allreduce_buckets"] == 1, p
    assert close(p["allreduce_sent_bytes"], 2 * 1 / 2 * b), p
    assert close(p["allreduce_s"], 2 * 1 / 2 * b / 2e9 + 2 * 1 * 20e-6), p
    assert p["allreduce_remote_edges"] == 2, p
# a step: each replica's pair sends M x 40 forward and M x 40 back, locally; each ring edge
# (2 a position) carries what one process sends, across hosts
assert close(d["bytes_local_per_step"], 2 * (2 * 2 * 40)), d["bytes_local_per_step"]
assert close(d["bytes_remote_per_step"], 2 * 144 + 2 * 40), d["bytes_remote_per_step"]
assert d["step_s"] >= d["pipeline_s"] > 0 and 0 <= d["allreduce_hidden_share"] <= 1, d
assert d["link_local"]["source"].startswith("--link-local"), d["link_local"]
PY
else
  bad "tiny W=4 exited: $(cat "$tmp/err")"
fi
# R = 4 on one host (the default): 2(R-1)/R = 1.5, 2(R-1) = 6 latencies, on the local link
if "$part" "$tmp/tiny.yaml" --stages 1 --micro-batches 1 --processes 4 --replicas 4 \
    --link-local 1,10 --device-tflops 1 --json >"$tmp/t4.json" 2>"$tmp/err"; then
  python3 - "$tmp/t4.json" <<'PY' && ok || bad "tiny R=4: $(cat "$tmp/t4.json")"
import json, sys
d = json.load(open(sys.argv[1]))["distributed"]
close = lambda a, b: abs(a - b) <= 1e-12 + 1e-9 * abs(b)
(p,) = d["positions"]
b = 4 * 46
assert close(p["allreduce_sent_bytes"], 1.5 * b), p
assert close(p["allreduce_s"], 1.5 * b / 1e9 + 6 * 10e-6), p
assert p["allreduce_remote_edges"] == 0 and d["bytes_remote_per_step"] == 0, d
assert close(d["bytes_local_per_step"], 4 * 1.5 * b), d
assert d["hosts"] == 1 and "default" in d["link_remote"]["source"], d
PY
else
  bad "tiny R=4 exited: $(cat "$tmp/err")"
fi

# ---- 4 processes on one host of 1 device: the device holds all four processes' memory
printf 'hosts: 1\nprocs_per_host: 4\ndevices_per_host: 1\ndevice_memory_gib: 0.1\n' >"$tmp/share.yaml"
if "$part" "$resnet" --stages 4 --cluster "$tmp/share.yaml" --json >"$tmp/s.json" 2>"$tmp/err"; then
  python3 - "$tmp/s.json" <<'PY' && ok || bad "shared device: $(cat "$tmp/s.json")"
import json, sys
d = json.load(open(sys.argv[1]))["distributed"]
total = sum(p["memory_bytes"] for p in d["positions"])
assert d["processes_per_device"] == 4 and d["processes"] == 4, d
assert abs(d["device_memory_max_bytes"] - total) <= 1e-9 * total, (d["device_memory_max_bytes"], total)
assert d["device_memory_max_bytes"] > d["memory_max_bytes"]
PY
  "$part" "$resnet" --stages 4 --cluster "$tmp/share.yaml" | grep -q "; EXCEEDS the 102.4 MiB a device" &&
    ok || bad "shared device: no EXCEEDS"
else bad "shared device exited: $(cat "$tmp/err")"; fi

# ---- --balance predicts the split given instead of searching (K from its length)
if "$part" "$resnet" --balance 20,12 --json >"$tmp/b.json" 2>"$tmp/err"; then
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert [s["first_unit"] for s in j["partition"]] == [0, 20], j["partition"]' "$tmp/b.json" && ok || bad "--balance 20,12"
else bad "--balance 20,12 exited: $(cat "$tmp/err")"; fi
refuse "balance has 3 entries for 4 stages" "$resnet" --stages 4 --balance 8,8,16

# ---- scripts/partition-vs-run.py: a "measured" run equal to the prediction passes, one 30%
# slower fails (the JSON a gpipe-bench would write, made from the prediction itself)
if "$part" "$tmp/tiny.yaml" --by time --threads 1 --cache-dir "$tmp/cache" --processes 1 \
    --json >"$tmp/p.json" 2>"$tmp/err"; then
  for f in 1.0 1.3; do
    python3 - "$tmp/p.json" "$f" "$tmp/tiny.yaml" >"$tmp/run$f.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); f = float(sys.argv[2]); d = p["distributed"]
peaks = [s["memory_bytes"] - 4 * s["params"] * (2 + p["optimizer_slots"]) for s in p["partition"]]
run = {"stages": 2, "micro_batches": 2, "schedule": p["schedule"], "remat": p["remat"],
       "batch_size": 8, "balance": "1,1", "samples_per_s": 8 / (d["step_s"] * f),
       "peak_bytes": peaks, "fits": True, "baseline": False}
print(json.dumps({"machine": {"threads": 1}, "model_file": sys.argv[3], "runs": [run]}))
PY
  done
  compare=$srcdir/scripts/partition-vs-run.py
  python3 "$compare" "$part" "$tmp/run1.0.json" -- --cache-dir "$tmp/cache" >"$tmp/c1" 2>&1 &&
    grep -q "within the tolerance of 15%" "$tmp/c1" && ok || bad "compare, equal: $(cat "$tmp/c1")"
  python3 "$compare" "$part" "$tmp/run1.3.json" -- --cache-dir "$tmp/cache" >"$tmp/c2" 2>&1
  [ $? -eq 1 ] && grep -q "OUTSIDE the tolerance" "$tmp/c2" && ok || bad "compare, 30% off: $(cat "$tmp/c2")"
else
  bad "tiny --by time exited: $(cat "$tmp/err")"
fi

# ---- the model file's pipeline.replicas is the default R, and W defaults to a process a replica
if "$part" "$tmp/tiny.yaml" --set pipeline.replicas=4 --stages 1 --micro-batches 1 \
    --device-tflops 1 --json >"$tmp/r.json" 2>"$tmp/err"; then
  python3 - "$tmp/r.json" <<'PY' && ok || bad "pipeline.replicas: $(cat "$tmp/r.json")"
import json, sys
d = json.load(open(sys.argv[1]))["distributed"]
assert (d["replicas"], d["processes"], d["replica_batch"]) == (4, 4, 2), d
assert d["replicas_source"] == "the model file's pipeline.replicas", d["replicas_source"]
assert d["processes_source"] == "default: one a replica", d["processes_source"]
PY
else bad "pipeline.replicas exited: $(cat "$tmp/err")"; fi
"$part" "$tmp/tiny.yaml" --set pipeline.replicas=2 --replicas 1 --stages 1 --micro-batches 1 \
  --device-tflops 1 --json 2>&1 | python3 -c 'import json,sys; assert json.load(sys.stdin)["distributed"]["replicas"] == 1' &&
  ok || bad "--replicas 1 over pipeline.replicas 2"

# ---- the 6B example (docs/partition.md): a plan for 128 processes in seconds, without
# allocating its 21 GB of f32 weights: peak RSS within 100 MiB of the program doing nothing
six=$srcdir/bench/models/transformer-6b.yaml
cluster=$srcdir/bench/models/cluster-16x8.yaml
if [ -x /usr/bin/time ]; then
  /usr/bin/time -f '%M' "$part" --version >/dev/null 2>"$tmp/base"
  start=$(date +%s)
  if /usr/bin/time -f '%M' "$part" "$six" --cluster "$cluster" --replicas 8 --json \
      >"$tmp/6b.json" 2>"$tmp/rss"; then
    secs=$(( $(date +%s) - start ))
    base=$(tail -1 "$tmp/base"); rss=$(tail -1 "$tmp/rss")
    if [ "$rss" -lt $((base + 102400)) ] && [ "$secs" -lt 20 ]; then ok
    else bad "6B: peak RSS $rss KiB against $base doing nothing, $secs s"; fi
    python3 - "$tmp/6b.json" <<'PY' && ok || bad "6B json: $(head -c 600 "$tmp/6b.json")"
import json, sys
j = json.load(open(sys.argv[1])); d = j["distributed"]
assert 5e9 < j["params"] < 7e9, j["params"]
assert (d["processes"], d["replicas"], d["procs_per_replica"], d["hosts"]) == (128, 8, 16, 16)
assert len(d["positions"]) == 16 and j["stages"] == 16
# each process holds a 16th of the model: weights, gradients and AdamW state 16 B a parameter
for p in d["positions"]:
    assert p["memory_state_bytes"] == 16 * p["params"], p
    assert p["memory_bytes"] < d["device_memory_bytes"], p
# every ring crosses hosts (replica r is hosts 2r and 2r + 1)
assert all(p["allreduce_remote_edges"] == 8 for p in d["positions"])
assert d["step_s"] > d["pipeline_s"] > 0 and 0 < d["allreduce_hidden_share"] < 1, d
PY
  else
    bad "6B exited: $(cat "$tmp/rss")"
  fi
  "$part" "$six" --cluster "$cluster" --replicas 8 >"$tmp/6b.txt" 2>&1
  grep -q "^step time .* predicted" "$tmp/6b.txt" && grep -q "^assumptions compute 100 TFLOP/s" \
    "$tmp/6b.txt" && ok || bad "6B table: $(cat "$tmp/6b.txt")"
fi

# ---- bad cluster files: path:line:col and what is wrong, exit 2
badfile() { # name, contents, expected line
  printf '%b' "$2" >"$tmp/$1.yaml"
  "$part" "$tmp/tiny.yaml" --cluster "$tmp/$1.yaml" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  if [ $rc -eq 2 ] && grep -qxF -- "gpipe-partition: $tmp/$1.yaml:$3" "$tmp/err"; then ok
  else bad "cluster $1 -> rc $rc: $(cat "$tmp/err")"; fi
}
badfile typo 'hosts: 2\nprocs_per_hots: 4\n' \
  "2:17: unknown key 'procs_per_hots' for a cluster file; did you mean 'procs_per_host'?"
badfile word 'hosts: 2\nlink_local: [fast, 3]\n' "2:14: link_local: expected a number, got 'fast'"
badfile nested 'link_local: {bw: 3}\n' "1:18: link_local: expected a scalar or a list, not a mapping"
badfile zero 'hosts: 2\nlink_remote: [0, 3]\n' \
  "2:15: link_remote: bandwidth 0 GB/s is out of range (0, 100000]"
badfile hosts 'hosts: 0\n' "1:8: hosts: 0 is out of range [1, 4096]"
badfile syntax 'hosts: [2\n' "2:1: did not find expected ',' or ']'"
badfile empty '' \
  "1:1: expected a mapping of hosts, procs_per_host, device_tflops, link_local, link_remote (docs/partition.md)"

# every number of the example cluster file replaced by awkward values, every line deleted or
# doubled: a prediction (exit 0) or one line (exit 2), never a crash or more
python3 - "$cluster" "$tmp/fz" <<'PY'
import os, re, sys
lines = open(sys.argv[1]).read().split("\n")
os.makedirs(sys.argv[2])
n = 0
def put(ls):
    global n
    open(os.path.join(sys.argv[2], "%03d.yaml" % n), "w").write("\n".join(ls)); n += 1
for i, line in enumerate(lines):
    put(lines[:i] + lines[i + 1:])
    put(lines[:i + 1] + lines[i:])
    for m in re.finditer(r"(?<![\w.])\d+(\.\d+)?(?![\w.])", line.split("#")[0]):
        for v in ("0", "-1", "1e400", "x", "99999999999", "[]", "{a: 1}", "[1, 2, 3]", "''"):
            put(lines[:i] + [line[:m.start()] + v + line[m.end():]] + lines[i + 1:])
PY
fuzzbad=0
for f in "$tmp"/fz/*.yaml; do
  "$part" "$tmp/tiny.yaml" --cluster "$f" --device-tflops 1 >/dev/null 2>"$tmp/err"; rc=$?
  if { [ $rc -ne 0 ] && [ $rc -ne 2 ]; } || [ "$(wc -l <"$tmp/err")" -gt 1 ] ||
     { [ $rc -eq 2 ] && ! grep -q "^gpipe-partition: " "$tmp/err"; }; then
    fuzzbad=$((fuzzbad+1)); echo "cluster fuzz $(cat "$f") -> rc $rc: $(cat "$tmp/err")"
  fi
done
[ "$fuzzbad" -eq 0 ] && [ "$(ls "$tmp"/fz | wc -l)" -gt 50 ] && ok || bad "cluster fuzz: $fuzzbad"

# ---- stages that share a process's cores: with one core a replica's 4 stages take turns,
# the core never idles (no hand-offs inside a process), so the pipeline is all the process's
# work; with 4 cores they run side by side, as devices of their own
for c in 1 4; do
  if "$part" "$resnet" --stages 4 --micro-batches 4 --remat never --processes 2 --replicas 2 \
      --threads $c --device-tflops 1 --json >"$tmp/t$c.json" 2>"$tmp/err"; then ok
  else bad "cores $c: $(cat "$tmp/err")"; fi
done
python3 - "$tmp/t1.json" "$tmp/t4.json" <<'PY' && ok || bad "stages taking turns on one core"
import json, sys
one, four = (json.load(open(f))["distributed"] for f in sys.argv[1:])
M = 4
work = M * one["positions"][0]["compute_s"]
assert one["cores_per_process"] == 1 and one["stages_taking_turns"] == 4, one
assert abs(one["pipeline_s"] - work) <= 1e-9 * work, (one["pipeline_s"], work)
assert four["stages_taking_turns"] == 0 and four["pipeline_s"] < 0.6 * work, (four, work)
PY
"$part" "$resnet" --stages 4 --micro-batches 4 --processes 2 --replicas 2 --threads 1 \
  --device-tflops 1 >"$tmp/t.txt" 2>&1
grep -q "^cores       1 a process (--threads): a process's 4 CPU stages take turns" "$tmp/t.txt" \
  && ok || bad "no cores line: $(cat "$tmp/t.txt")"

echo "passed $passed, failed $failed"
[ "$failed" -eq 0 ]
