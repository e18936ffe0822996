#!/usr/bin/env bash
# gpipe-train through the pipeline: K stages and M micro-batches (any schedule and
# re-materialization) give the weights of K = 1, M = 1 up to summation order; bad pipeline
# flags are one clear line and exit 2.
set -u
train=$1; srcdir=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
model=$srcdir/models/fashion-mlp.yaml
common=(--quiet --data synthetic --steps 4 --batch-size 16 --threads 2)
"$train" "$model" "${common[@]}" --save "$tmp/k1.safetensors" || fail "K=1"
i=0
# interleaved: K stages of V chunks each (the fifth field)
for cfg in "2 4 gpipe never 1" "3 8 1f1b always 1" "4 2 gpipe except_last 1" \
  "7 3 1f1b except_last 1" "2 4 interleaved never 2" "3 6 interleaved never 2" \
  "2 2 interleaved never 3"; do
  set -- $cfg
  vs=(); [ "$5" -gt 1 ] && vs=(--virtual-stages "$5")
  "$train" "$model" "${common[@]}" --stages "$1" --micro-batches "$2" --schedule "$3" \
    --remat "$4" "${vs[@]}" --save "$tmp/p$i.safetensors" || fail "K=$1 M=$2 $3 $4 V=$5"
  python3 - "$tmp/k1.safetensors" "$tmp/p$i.safetensors" <<'PY' || fail "K=$1 M=$2 $3 $4: weights differ"
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); d = b[8 + n:]
    return {k: struct.unpack("<%df" % ((v["data_offsets"][1] - v["data_offsets"][0]) // 4),
                             d[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in h.items() if k != "__metadata__"}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys(), (sorted(a), sorted(b))
for k in a:
    ref = max(max(abs(x) for x in a[k]), 1e-30)
    err = max(abs(x - y) for x, y in zip(a[k], b[k])) / ref
    assert err <= 1e-5, (k, err)
PY
  i=$((i+1))
done
passed=8
# a Chrome trace: one named row per stage, F/B/R slices for every micro-batch of every step
"$train" "$model" "${common[@]}" --stages 3 --micro-batches 4 --schedule gpipe --remat always \
  --trace "$tmp/trace.json" || fail "traced run"
python3 - "$tmp/trace.json" <<'PY' || fail "the trace is not what it should be"
import json, sys, collections
ev = json.load(open(sys.argv[1]))["traceEvents"]
rows = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M"}
assert sorted(rows) == [0, 1, 2], rows
acts = [e for e in ev if e["ph"] == "X" and e["cat"] != "layer"]
n = collections.Counter((e["tid"], e["name"][0]) for e in acts)
for s in range(3):
    assert n[(s, "F")] == 16 and n[(s, "B")] == 16 and n[(s, "s")] == 4, n
    assert n[(s, "R")] == 16, n  # always: every micro-batch recomputed
assert all(e["dur"] >= 0 for e in ev if e["ph"] == "X")
# layer spans: inside an action of their stage, micro-batch and pass; every layer of a stage
# in every forward and recompute, and in backward all but stage 0's input layer (the flatten
# of a model input has nothing to compute there)
layers = [e for e in ev if e["ph"] == "X" and e["cat"] == "layer"]
kind = {"forward": "F", "recompute": "R", "backward": "B"}
per = collections.defaultdict(set)
for e in layers:
    a = e["args"]
    hits = [x for x in acts if x["tid"] == e["tid"] and x["name"] == f'{kind[a["pass"]]}{a["micro_batch"]}'
            and x["args"]["step"] == a["step"]]
    assert len(hits) == 1, (e, hits)
    h = hits[0]
    assert h["ts"] - 0.01 <= e["ts"] and e["ts"] + e["dur"] <= h["ts"] + h["dur"] + 0.01, (e, h)
    per[(e["tid"], a["pass"])].add(e["name"])
for s in range(3):
    assert per[(s, "forward")] and per[(s, "forward")] == per[(s, "recompute")], per
    assert per[(s, "backward")] == per[(s, "forward")] - ({"0"} if s == 0 else set()), per
assert len(set().union(*(per[(s, "forward")] for s in range(3)))) == sum(len(per[(s, "forward")]) for s in range(3))
PY
passed=$((passed+1))
# scripts/trace-layers.py sums that trace's layer slices: each stage's layers, per pass
"$srcdir/scripts/trace-layers.py" "$tmp/trace.json" --stage 2 --by layer >"$tmp/layers" ||
  fail "trace-layers.py exited $?"
python3 - "$tmp/layers" <<'PY' || fail "trace-layers.py: $(cat "$tmp/layers")"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
assert "last 3 step(s), stage 2" in lines[0], lines[0]
rows = {(r[0], r[1]): r for r in (l.split() for l in lines[1:])}
for name in ("logits", "loss"):
    for p in ("forward", "recompute", "backward"):
        assert (name, p) in rows and rows[(name, p)][4] == "4", (name, p, rows)
assert not any(n == "fc1" for n, _ in rows), rows  # stage 0's
PY
passed=$((passed+1))
# bad pipeline flags: one line, exit 2
check() {
  local pat=$1; shift
  "$train" "$model" --data synthetic --steps 1 "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  if [ $rc = 2 ] && grep -qE -- "$pat" "$tmp/err" && [ "$(wc -l <"$tmp/err")" = 1 ]; then
    passed=$((passed+1))
  else
    fail "$* -> exit $rc: $(cat "$tmp/err")"
  fi
}
check "--stages 9: model fashion-mlp has 7 units, so K must be 1..7" --stages 9
check "balance sums to 4 units, the model has 7" --stages 2 --balance 2,2
check "unknown value 'gpipee'; did you mean 'gpipe'" --schedule gpipee
check "fashion-mlp.yaml:[0-9]+:[0-9]+: micro_batches: 8 is more than batch_size 4 .*\\(set by --micro-batches 8\\)$" \
  --batch-size 4 --micro-batches 8
check "--balance: expected integers >= 1 separated by commas" --stages 2 --balance 3,x
check "balance has 2 entries for 1 stage$" --stages 1 --balance 3,4 # it said "1 stages"
# interleaved: M in groups of K, V and the schedule together, no re-materialization yet
inter=(--stages 2 --schedule interleaved --virtual-stages 2 --remat never)
check "^gpipe-train: interleaved takes micro-batches in groups of the 2 stages: 3 micro-batches \
is not a multiple of 2 \(4 would do\)$" "${inter[@]}" --micro-batches 3
check "^gpipe-train: 2 virtual stages need the interleaved schedule \(--schedule interleaved\), \
not 1f1b$" --stages 2 --micro-batches 2 --schedule 1f1b --virtual-stages 2
check "^gpipe-train: the interleaved schedule needs 2 or more virtual stages \(--virtual-stages \
V\)$" --stages 2 --micro-batches 2 --schedule interleaved
check "^gpipe-train: --remat except_last: the interleaved schedule re-materializes nothing; use \
--remat never$" --stages 2 --micro-batches 2 --schedule interleaved --virtual-stages 2 \
  --remat except_last
check "^gpipe-train: cannot cut 7 units into 4 stages x 2 chunks \(at most 7\)$" \
  --stages 4 --micro-batches 4 --schedule interleaved --virtual-stages 2 --remat never
check "balance has 2 entries for 4 chunks$" "${inter[@]}" --micro-batches 2 --balance 3,4
# its pipeline line names the chunks, and the summary is per stage (device): each stage's
# idle share is its chunks' together
"$train" "$model" --data synthetic --steps 3 --batch-size 16 --threads 2 "${inter[@]}" \
  --micro-batches 4 >"$tmp/isum" 2>&1 || fail "interleaved summary run: $(cat "$tmp/isum")"
grep -q "^pipeline: 2 stages x 2 chunks (chunk c on stage c mod 2) of [0-9]*,[0-9]*,[0-9]*,[0-9]* \
units, 4 micro-batches, interleaved schedule, re-materialization never$" "$tmp/isum" &&
  grep -Eq "^pipeline: chunks busy [0-9.]+, [0-9.]+, [0-9.]+, [0-9.]+ ms per step, stages idle \
[0-9.]+%, [0-9.]+% of the steps, each step's busiest stage [0-9.]+% \(GPipe's bubble for K = 2, \
M = 4: 20.0%; the schedule with these stage times: [0-9.]+%; with each action's own time: \
[0-9.]+%\); steps overlapped: 0 of 3$" "$tmp/isum" || fail "interleaved summary: $(cat "$tmp/isum")"
passed=$((passed+1))
# a stage runs one chunk at a time: in the trace (a row a chunk, named with its stage), the
# forwards and backwards of chunks 0 and 2 (stage 0), and of 1 and 3 (stage 1), never overlap
# (the balanced CNN's, of about a millisecond each: chunks left to run at once overlapped)
"$train" "$srcdir/bench/models/balanced-cnn.yaml" --data synthetic --steps 2 --batch-size 16 \
  --threads 2 "${inter[@]}" --micro-batches 8 --quiet --trace "$tmp/itrace.json" >/dev/null 2>&1 ||
  fail "interleaved traced run"
python3 - "$tmp/itrace.json" <<'PY' || fail "interleaved trace: a stage ran two chunks at once"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
rows = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
assert [rows[t].split(" (")[0] for t in sorted(rows)] == \
    ["chunk 0 on stage 0", "chunk 1 on stage 1", "chunk 2 on stage 0", "chunk 3 on stage 1"], rows
acts = [e for e in ev if e["ph"] == "X" and e.get("cat") != "layer" and e["name"][0] in "FB"]
for stage in (0, 1):
    spans = sorted((e["ts"], e["ts"] + e["dur"], e["tid"]) for e in acts if e["tid"] % 2 == stage)
    assert len(spans) == 2 * 2 * 8 * 2, len(spans)  # 2 chunks x (F, B) x 8 micro-batches x 2 steps
    for a, b in zip(spans, spans[1:]):
        assert b[0] >= a[1] - 0.01, (stage, a, b)
PY
passed=$((passed+1))
# the pipeline and training lines count in words: 1 stage, 1 micro-batch, 1 step
for cfg in "1 2 stage micro-batches" "2 1 stages micro-batch"; do
  set -- $cfg
  "$train" "$model" --data synthetic --steps 1 --batch-size 16 --threads 2 --stages "$1" \
    --micro-batches "$2" >/dev/null 2>"$tmp/words" || fail "K=$1 M=$2: $(cat "$tmp/words")"
  grep -q "^pipeline: $1 $3 of [0-9,]* units, $2 $4, " "$tmp/words" &&
    grep -q "^training 1 step of batch 16 " "$tmp/words" || fail "K=$1 M=$2: $(cat "$tmp/words")"
  passed=$((passed+1))
done
# --schedule auto names the schedule it took on the pipeline line (interleaved with its V, the
# chunks a stage), then how the others compared
"$train" "$model" --data synthetic --steps 1 --batch-size 16 --threads 2 --stages 2 \
  --micro-batches 4 --schedule auto >/dev/null 2>"$tmp/auto" || fail "auto: $(cat "$tmp/auto")"
chosen=$(sed -n 's/^pipeline: .* micro-batches, \([a-z0-9-]*\) schedule, .*/\1/p' "$tmp/auto")
v=$(sed -n 's/^pipeline: 2 stages x \([0-9]*\) chunks .*/ V=\1/p' "$tmp/auto")
grep -Eq "^schedule auto: $chosen$v \(simulated step 1\.00(; [a-z0-9-]+( V=[2-4])? ([0-9.]+, memory [0-9.]+x|cannot run))+\)$" \
  "$tmp/auto" && [ -n "$chosen" ] && { [ -z "$v" ] || [ "$chosen" = interleaved ]; } ||
  fail "auto: $(cat "$tmp/auto")"
passed=$((passed+1))
# the closing summary with stages: each stage's busy time and idle share, the idle share of each
# step's busiest stage (at most the least idle stage's), and GPipe's bubble
"$train" "$model" --data synthetic --steps 3 --batch-size 16 --threads 2 --stages 2 \
  --micro-batches 4 --quiet >"$tmp/sum" 2>&1 || fail "K=2 M=4 summary run: $(cat "$tmp/sum")"
grep -Eq "^pipeline: stages busy [0-9.]+, [0-9.]+ ms per step, idle [0-9.]+%, [0-9.]+% of the \
steps, each step's busiest stage [0-9.]+% \(GPipe's bubble for K = 2, M = 4: 20.0%; the \
schedule with these stage times: [0-9.]+%; with each action's own time: [0-9.]+%\); steps \
overlapped: [0-3] of 3$" "$tmp/sum" || fail "K=2 summary: $(cat "$tmp/sum")"
python3 - "$tmp/sum" <<'PY' ||
import re, sys
m = re.search(r"idle ([0-9.]+)%, ([0-9.]+)% of the steps, each step's busiest stage ([0-9.]+)% ",
              open(sys.argv[1]).read())
# rounded to 0.1%
assert m and float(m[3]) <= min(float(m[1]), float(m[2])) + 0.1, m
PY
  fail "K=2 summary: the busiest stage idles more than a stage: $(cat "$tmp/sum")"
"$train" "$model" --data synthetic --steps 3 --batch-size 16 --threads 2 --quiet >"$tmp/sum" 2>&1 &&
  ! grep -q "^pipeline:" "$tmp/sum" || fail "K=1 has a pipeline summary: $(cat "$tmp/sum")"
passed=$((passed+1))
# K = 2 with one micro-batch says the stages take turns and names M = 4K = 8 (batch 16)
grep -q "re-materialization [a-z_]* (one micro-batch: the stages take turns, as naive model \
parallelism; --micro-batches 8 overlaps them)$" "$tmp/words" || fail "K=2 M=1 hint: $(cat "$tmp/words")"
passed=$((passed+1))
# ... also for a model of one unit and one layer besides its loss (it said "1 units")
one=$tmp/one.yaml
printf 'name: one\ninputs: {x: [4], label: {shape: [], dtype: i32}}\n%s\nloss: %s\n' \
  "layers: [{type: linear, out_features: 3}]" softmax_cross_entropy >"$one"
"$train" "$one" --data synthetic --steps 1 --batch-size 4 --micro-batches 2 >/dev/null 2>"$tmp/words" &&
  grep -q "^model one: 1 unit, 2 layers, " "$tmp/words" &&
  grep -q "^pipeline: 1 stage of 1 unit, 2 micro-batches, " "$tmp/words" ||
  fail "one unit: $(cat "$tmp/words")"
passed=$((passed+1))
echo "$passed passed, 0 failed"
