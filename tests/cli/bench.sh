#!/usr/bin/env bash
# gpipe-bench end to end on a small model with tiny sweeps: the table lists every run and its
# references, --json / --csv / --plot / --trace are well formed and agree with each other and
# with the theory where the numbers are exact, --partition fixes the split, and bad flags get
# one line and exit 2 (unwritable files exit 1 and leave nothing behind).
set -u
bench=$1; part=$2; srcdir=$3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { echo "FAIL: $*"; failed=$((failed+1)); }
# fashion-mlp naming gpipe and except_last (the model files leave both to auto), whose runs,
# references and recompute times the checks below know
sed 's/^pipeline: {stages: 1, micro_batches: 1,/& schedule: gpipe, remat: except_last,/' \
  "$srcdir/models/fashion-mlp.yaml" >"$tmp/mlp.yaml"
mlp=$tmp/mlp.yaml
fast=(--batch-size 32 --steps 2 --warmup 1)

# ---- the table: the asked runs plus the references (K, 1, gpipe, never) marked baseline,
# and M=64 > batch skipped with a note; progress lines on a non-terminal stderr, one per run
if "$bench" "$mlp" --stages 1,2 --micro-batches 2,64 --remat always "${fast[@]}" \
    >"$tmp/table" 2>"$tmp/err"; then
  python3 - "$tmp/table" "$tmp/err" <<'PY' && ok || bad "table: $(cat "$tmp/table" "$tmp/err")"
import re, sys
text = open(sys.argv[1]).read()
lines = text.splitlines()
assert lines[0].startswith("machine:") and "GFLOP/s per core" in lines[0], lines[0]
for word in ("cores", "fashion-mlp", "batch 32", "2 timed steps", "1 warm-up"):
    assert word in lines[0], word
head = re.split(r"\s{2,}", lines[1].strip())
assert head[:4] == ["K", "M", "schedule", "remat"], head
for col in ("samples/s", "vs naive", "of ideal", "vs single", "bubble", "slowest", "replay",
            "sim", "theory", "GFLOP/s", "util", "busy ms per stage", "peak MiB per stage"):
    assert col in head, col
assert head.index("bubble") + 3 == head.index("slowest") + 2 == head.index("replay") + 1 \
    == head.index("sim") == head.index("theory") - 1, head
rows = [re.split(r"\s{2,}", l.strip()) for l in lines[2:] if re.match(r"^\d+\s", l)]
got = [(int(r[0]), int(r[1]), r[2], r[3], r[-1] == "baseline") for r in rows]
assert got == [(1, 1, "gpipe", "never", True), (1, 2, "gpipe", "always", False),
               (2, 1, "gpipe", "never", True), (2, 2, "gpipe", "always", False)], got
for r in rows:
    k = int(r[0])
    busy, peak = r[head.index("busy ms per stage")], r[head.index("peak MiB per stage")]
    assert len(busy.split("/")) == k and len(peak.split("/")) == k, r
    assert float(r[head.index("samples/s")]) > 0, r
    # of ideal: vs naive over K M / (M + K - 1), where there is a pipeline (K, M > 1)
    m, of = int(r[1]), r[head.index("of ideal")]
    if k > 1 and m > 1:
        want = 100 * float(r[head.index("vs naive")].rstrip("x")) / (k * m / (m + k - 1))
        assert of.endswith("%") and abs(float(of[:-1]) - want) <= 1, (of, want, r)
    else:
        assert of == "-", r
assert any(l.startswith("skipped: M=64") for l in lines), text
assert not any(l.startswith("note:") for l in lines), text  # not oversubscribed
err = open(sys.argv[2]).read().splitlines()
runs = [l for l in err if re.match(r"gpipe-bench: run \d+/4: K=\d M=\d", l)]
assert len(runs) == 4 and runs[-1].startswith("gpipe-bench: run 4/4"), err
# from the second run on, an estimate of the time left
assert " left" not in runs[0], runs
assert all(re.search(r", about \d+m\d\ds left$", l) for l in runs[1:]), runs
assert any("skipping M=64" in l for l in err), err
PY
else
  bad "table run exited $?: $(cat "$tmp/err")"
fi

# ---- the BLAS kernels: named on the machine line; an OPENBLAS_CORETYPE the user set is kept
# (gpipe replaces only kernels OpenBLAS fell back to on its own, cli/machine.c)
if [ "$(uname -m)" = x86_64 ]; then
  if OPENBLAS_CORETYPE=Prescott "$bench" "$mlp" --stages 1 --micro-batches 1 "${fast[@]}" \
      >"$tmp/p" 2>"$tmp/err"; then
    if head -1 "$tmp/p" | grep -q "(OpenBLAS Prescott)" && ! grep -q "OPENBLAS_CORETYPE" "$tmp/err"; then
      ok
    else
      bad "OPENBLAS_CORETYPE=Prescott: $(head -1 "$tmp/p") $(cat "$tmp/err")"
    fi
  else
    bad "OPENBLAS_CORETYPE=Prescott run exited $?: $(cat "$tmp/err")"
  fi
fi

# ---- one sweep, every output: --json on stdout, --csv, --plot, --trace; --quiet keeps
# stderr empty
if "$bench" "$mlp" --stages 1,2,3 --micro-batches 1,4 --schedule gpipe,1f1b --remat never \
    "${fast[@]}" --json --csv "$tmp/b.csv" --plot "$tmp/b.svg" --trace "$tmp/t.json" --quiet \
    >"$tmp/j" 2>"$tmp/err"; then
  [ -s "$tmp/err" ] && bad "--quiet printed: $(cat "$tmp/err")" || ok
  python3 - "$tmp/j" <<'PY' && ok || bad "--json: $(head -c 800 "$tmp/j")"
import json, sys
d = json.load(open(sys.argv[1]))
mc = d["machine"]
assert mc["cores"] >= 1 and mc["sgemm_gflops_per_core"] > 0 and mc["cpu_model"], mc
assert mc["blas_kernels"], mc
assert mc["oversubscribed"] is (mc["threads"] > mc["cores"]), mc
assert d["model"] == "fashion-mlp" and d["batch_size"] == 32 and d["steps"] == 2
assert d["warmup"] == 1 and d["flops_per_sample"] > 0
runs = d["runs"]
# 3 K x 2 M x 2 schedules; (K, 1, gpipe, never) is asked for, so no extra baselines
assert len(runs) == 12 and not any(r["baseline"] for r in runs), [r["baseline"] for r in runs]
keys = ("stages", "micro_batches", "schedule", "remat", "batch_size", "samples_per_s",
        "speedup_vs_naive", "speedup_vs_single", "bubble_measured", "bubble_slowest",
        "bubble_replayed", "bubble_simulated", "bubble_theory", "peak_bytes", "busy_ms", "gflops",
        "utilization", "wall_busy_ms", "recompute_ms")
ref = {}
for r in runs:
    for k in keys:
        assert k in r, (k, r)
    if r["micro_batches"] == 1 and r["schedule"] == "gpipe":
        ref[r["stages"]] = r
for r in runs:
    K, M = r["stages"], r["micro_batches"]
    assert r["batch_size"] == 32 and r["remat"] == "never"
    assert abs(r["bubble_theory"] - (K - 1) / (M + K - 1)) < 1e-6, r
    assert abs(r["speedup_ideal"] - K * M / (M + K - 1)) < 1e-5, r
    assert 0 <= r["bubble_measured"] < 1, r
    assert len(r["peak_bytes"]) == K and len(r["busy_ms"]) == K, r
    assert all(p > 0 for p in r["peak_bytes"]) and all(b > 0 for b in r["busy_ms"]), r
    # wall time in actions: the forwards' and backwards' compute time and more (hand-offs, the
    # optimizer step). On one-thread stages the compute is thread CPU time, a different clock
    # (the scheduler's): over sub-millisecond actions on a loaded VM it came out 4% above the
    # wall time (0.366 against 0.352 ms), hence the 10%
    assert len(r["wall_busy_ms"]) == K, r
    assert all(w >= b * 0.9 for w, b in zip(r["wall_busy_ms"], r["busy_ms"])), r
    assert r["recompute_ms"] == [0] * K, r  # never re-materializes
    # the hypervisor's share, null where /proc/stat has none
    assert r["steal"] is None or 0 <= r["steal"] <= 1, r
    assert r["samples_per_s"] > 0 and r["gflops"] > 0 and 0 < r["utilization"] < 1.5, r
    assert abs(r["gflops"] - d["flops_per_sample"] * r["samples_per_s"] / 1e9) \
        < 1e-3 * r["gflops"], r
    naive, one = ref[K]["samples_per_s"], ref[1]["samples_per_s"]
    assert abs(r["speedup_vs_naive"] - r["samples_per_s"] / naive) < 1e-3 * r["speedup_vs_naive"]
    assert abs(r["speedup_vs_single"] - r["samples_per_s"] / one) < 1e-3 * r["speedup_vs_single"]
for K, r in ref.items():
    assert r["speedup_vs_naive"] == 1, r
assert ref[1]["speedup_vs_single"] == 1 and ref[1]["bubble_theory"] == 0
# the bubble is the mean of the stages' idle shares. How it relates to the theory is a
# benchmark's question, not this test's: on a loaded machine a stage preempted inside an
# action counts as busy (K = 2, M = 1 measured 0.44 against 0.5 under ASan with both cores
# taken), and at K = 1 a sub-millisecond step's overhead reached 0.81.
for r in runs:
    per = r["bubble_per_stage"]
    assert len(per) == r["stages"] and all(0 <= b < 1 for b in per), r
    assert abs(sum(per) / len(per) - r["bubble_measured"]) < 1e-4, r
# the schedule simulated with the run's stage times: nothing idle on one stage; on 2 stages
# with one micro-batch each waits while the other computes, half the step, less the last
# stage's optimizer step, which runs while the first stage is still in its backward (0.5 -
# s1 / 2 makespan: 0.45 under ASan, where the MLP's optimizer loop is slow next to BLAS)
for r in runs:
    K, M, sim = r["stages"], r["micro_batches"], r["bubble_simulated"]
    assert 0 <= sim < 1, r
    if K == 1:
        assert sim < 1e-9, r
    if K == 2 and M == 1:
        assert 0.3 < sim <= 0.5 + 1e-9, r
# the idle share of each step's busiest stage: no stage idles less over the steps (each step's
# busiest idled least in it); on one stage it is that stage's
for r in runs:
    slow, per = r["bubble_slowest"], r["bubble_per_stage"]
    assert 0 <= slow <= min(per) + 1e-9, r
    if r["stages"] == 1:
        assert abs(slow - per[0]) < 1e-9, r
# the steps replayed with each action's own time and instant hand-offs: the same actions under
# the same dependencies, so never more idle than measured; nothing idle on one stage
for r in runs:
    rep = r["bubble_replayed"]
    assert 0 <= rep <= r["bubble_measured"] + 1e-9, r
    if r["stages"] == 1:
        assert rep < 1e-9, r
    if r["stages"] == 2 and r["micro_batches"] == 1:
        assert 0.3 < rep <= 0.5 + 1e-9, r
PY
  python3 - "$tmp/b.csv" "$tmp/j" <<'PY' && ok || bad "--csv: $(cat "$tmp/b.csv")"
import csv, json, sys
rows = list(csv.reader(open(sys.argv[1])))
runs = json.load(open(sys.argv[2]))["runs"]
head = rows[0]
for k in ("stages", "micro_batches", "schedule", "remat", "samples_per_s",
          "speedup_vs_naive", "bubble_measured", "bubble_slowest", "bubble_replayed",
          "bubble_simulated", "bubble_theory", "peak_bytes", "busy_ms", "steal"):
    assert k in head, k
assert len(rows) == 1 + len(runs), len(rows)
for row, r in zip(rows[1:], runs):
    assert len(row) == len(head), row
    c = dict(zip(head, row))
    assert int(c["stages"]) == r["stages"] and int(c["micro_batches"]) == r["micro_batches"]
    assert c["schedule"] == r["schedule"] and c["remat"] == r["remat"]
    assert [int(p) for p in c["peak_bytes"].split(";")] == r["peak_bytes"], (c, r)
    assert abs(float(c["bubble_theory"]) - r["bubble_theory"]) < 1e-4
    # the JSON has every digit the CSV has (it had 6 significant: 20412.9 for 20412.874)
    assert abs(float(c["samples_per_s"]) - r["samples_per_s"]) <= 0.0005 + 1e-9, (c, r)
    assert abs(float(c["gflops"]) - r["gflops"]) <= 0.00005 + 1e-12, (c, r)
    assert abs(float(c["bubble_simulated"]) - r["bubble_simulated"]) < 1e-4
    assert abs(float(c["bubble_replayed"]) - r["bubble_replayed"]) < 1e-4
    assert abs(float(c["bubble_slowest"]) - r["bubble_slowest"]) < 1e-4
    assert abs(float(c["speedup_ideal"]) - r["speedup_ideal"]) < 1e-4
    assert (c["steal"] == "") == (r["steal"] is None), (c, r)
    assert c["steal"] == "" or abs(float(c["steal"]) - r["steal"]) < 1e-4, (c, r)
PY
  python3 - "$tmp/b.svg" "$tmp/j" <<'PY' && ok || bad "--plot: $(head -c 800 "$tmp/b.svg")"
import json, sys
import xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == ns + "svg" and root.get("width") == "720" and root.get("height") == "480"
assert not list(root.iter(ns + "script"))  # self-contained: no scripts
runs = json.load(open(sys.argv[2]))["runs"]
ms = sorted({r["micro_batches"] for r in runs})
ks = sorted({r["stages"] for r in runs})
lines = list(root.iter(ns + "polyline"))
measured = [p for p in lines if p.get("class") == "measured"]
ideal = [p for p in lines if p.get("class") == "ideal"]
assert sorted(int(p.get("data-m")) for p in measured) == ms, measured
assert len(ideal) == len(ms) and all(p.get("stroke-dasharray") for p in ideal), ideal
assert not any(p.get("stroke-dasharray") for p in measured)
for p in measured:
    assert len(p.get("points").split()) == len(ks), p.get("points")
colours = [p.get("stroke") for p in measured]
assert len(set(colours)) == len(ms) and sorted(colours) == sorted(p.get("stroke") for p in ideal)
text = " ".join("".join(t.itertext()) for t in root.iter(ns + "text"))
for word in ("stages K", "speed-up over one stage", "fashion-mlp", "batch 32", "M = 4", "ideal"):
    assert word in text, word
PY
  python3 - "$tmp/t.json" <<'PY' && ok || bad "--trace: $(head -c 600 "$tmp/t.json")"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
slices = [e for e in ev if e["ph"] == "X"]
# the last run is K = 3, M = 4, 1f1b: every stage forwards and backwards every micro-batch
for s in range(3):
    names = {e["name"] for e in slices if e["tid"] == s}
    assert {"F0", "F3", "B0", "B3"} <= names, (s, sorted(names))
assert {e["tid"] for e in slices} == {0, 1, 2}
PY
else
  bad "full sweep exited $?: $(cat "$tmp/err")"
fi

# ---- --partition: the plan's split for every M swept, its references still run
"$part" "$mlp" --stages 3 --micro-batches 4 --batch-size 32 -o "$tmp/plan.yaml" >/dev/null 2>&1 ||
  bad "gpipe-partition -o failed"
if "$bench" "$mlp" --partition "$tmp/plan.yaml" --micro-batches 2 "${fast[@]}" --json \
    --quiet >"$tmp/pj" 2>"$tmp/err"; then
  python3 - "$tmp/pj" <<'PY' && ok || bad "--partition: $(head -c 800 "$tmp/pj")"
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
got = [(r["stages"], r["micro_batches"], r["baseline"]) for r in runs]
assert got == [(1, 1, True), (3, 1, True), (3, 2, False)], got
assert runs[2]["balance"] == "2,3,2" and runs[2]["remat"] == "except_last", runs[2]
PY
else
  bad "--partition exited $?: $(cat "$tmp/err")"
fi

# ---- a bubble more than 0.05 above GPipe's gets a line splitting the excess (sim, replay,
# hand-offs: they add up to it) beside the busiest stage's idle; a plan that leaves stage 0 the
# flatten alone makes one for sure (stage 0 idles nearly all the step), and no other run has one
# unless its own bubble is that far above
printf 'model: fashion-mlp\nstages: 2\nmicro_batches: 4\nschedule: gpipe\nremat: never\ndevices: [cpu, cpu]\nbalance: [1, 6]\n' \
  >"$tmp/lopsided.yaml"
if "$bench" "$mlp" --partition "$tmp/lopsided.yaml" --micro-batches 4 "${fast[@]}" --quiet \
    --csv "$tmp/l.csv" >"$tmp/l" 2>"$tmp/err"; then
  python3 - "$tmp/l" "$tmp/l.csv" <<'PY' && ok || bad "bubble notes: $(cat "$tmp/l" "$tmp/l.csv")"
import csv, re, sys
notes = [l for l in open(sys.argv[1]).read().splitlines() if l.startswith("bubble ")]
rows = list(csv.DictReader(open(sys.argv[2])))
want = [r for r in rows if int(r["stages"]) > 1 and int(r["micro_batches"]) > 1
        and float(r["bubble_measured"]) - float(r["bubble_theory"]) > 0.05]
assert len(want) == 1 and want[0]["micro_batches"] == "4", rows
r = want[0]
assert len(notes) == 1, notes
m = re.fullmatch(r"bubble K=2 M=4 gpipe never: ([0-9.]+) against GPipe's ([0-9.]+): unequal "
                 r"stages ([-+][0-9.]+) \(sim\), the actions' spread ([-+][0-9.]+) \(replay\), "
                 r"hand-offs and work between actions ([-+][0-9.]+); each step's busiest stage "
                 r"idled ([0-9.]+), the others waited for it", notes[0])
assert m, notes[0]
v = [float(x) for x in m.groups()]
f = lambda k: float(r[k])
assert abs(v[0] - f("bubble_measured")) < 6e-4 and abs(v[1] - 0.2) < 1e-9, (v, r)
assert abs(v[2] - (f("bubble_simulated") - 0.2)) < 1e-3, (v, r)
assert abs(v[3] - (f("bubble_replayed") - f("bubble_simulated"))) < 1e-3, (v, r)
assert abs(v[4] - (f("bubble_measured") - f("bubble_replayed"))) < 1e-3, (v, r)
assert abs(v[2] + v[3] + v[4] - (v[0] - v[1])) < 2e-3, v
assert abs(v[5] - f("bubble_slowest")) < 6e-4 and v[5] < v[0], (v, r)
PY
else
  bad "lopsided plan exited $?: $(cat "$tmp/err")"
fi

# ---- a pipelined run below 85% of its ideal speed-up gets a line with the three factors of the
# median steps (this run's and naive-2's) that multiply to its share: balanced-cnn with stage 0 the batchnorm stem
# alone is no faster than naive-2 (0.95-1.07x against the ideal 1.6x at M = 4)
printf 'model: balanced-cnn\nstages: 2\nmicro_batches: 4\nschedule: gpipe\nremat: never\ndevices: [cpu, cpu]\nbalance: [1, 18]\n' \
  >"$tmp/stem.yaml"
# The stem-alone plan $1 on balanced-cnn (more flags after $2), its output checked by
# $tmp/check.py (argv: the table, the CSV). A busy machine can slow naive-2 alone and lift the
# share to 85% or more: then no note may be printed (the check exits 3), and the run is tried
# again, three times at most, until one is below 85%. $2 names the check.
below_ideal() {
  local plan=$1 what=$2 rc=1
  shift 2
  for _ in 1 2 3; do
    if ! "$bench" "$srcdir/bench/models/balanced-cnn.yaml" --partition "$plan" \
        --micro-batches 4 "${fast[@]}" --quiet --csv "$tmp/s.csv" "$@" >"$tmp/s" 2>"$tmp/err"; then
      bad "$what: the plan exited with an error: $(cat "$tmp/err")"; return
    fi
    python3 "$tmp/check.py" "$tmp/s" "$tmp/s.csv" >"$tmp/why" 2>&1
    rc=$?
    [ "$rc" = 3 ] || break
  done
  case $rc in
    0) ok ;;
    3) bad "$what: three runs at 85% or more of the ideal: $(cat "$tmp/s")" ;;
    *) bad "$what: $(cat "$tmp/why" "$tmp/s" "$tmp/s.csv")" ;;
  esac
}
cat >"$tmp/check.py" <<'PY'
import csv, re, sys
text = open(sys.argv[1]).read().splitlines()
rows = {(r["stages"], r["micro_batches"]): r for r in csv.DictReader(open(sys.argv[2]))}
head = re.split(r"\s{2,}", text[1].strip())
row = next(re.split(r"\s{2,}", l.strip()) for l in text if l.startswith("2  4 "))
table = float(row[head.index("of ideal")].rstrip("%"))
notes = [l for l in text if l.startswith("of ideal ")]
if table >= 85:
    assert not notes, (row, notes)
    sys.exit(3)
assert len(notes) == 1, notes
m = re.fullmatch(r"of ideal K=2 M=4 gpipe never: (\d+)% = work x([0-9.]+) \(stages busy ([0-9.]+) "
                 r"ms a step against naive-2's ([0-9.]+)\) x bubble x([0-9.]+) \(([0-9.]+) against "
                 r"GPipe's ([0-9.]+)\) x naive-2's bubble x([0-9.]+) \(([0-9.]+) against ([0-9.]+)\), "
                 r"in the median steps", notes[0])
assert m, notes[0]
pct, work, bp, bn, bub, mp, th, nbub, mn, nth = (float(x) for x in m.groups())
assert abs(work - bn / bp) < 0.006 and abs(bub - (1 - mp) / (1 - th)) < 0.006, m.groups()
assert abs(nbub - 0.5 / (1 - mn)) < 0.006 and th == 0.2 and nth == 0.5, m.groups()
# the factors multiply to the table's share, of the same steps (by the steps' means they had not)
assert pct == table and abs(pct - 100 * work * bub * nbub) < 1.5, (m.groups(), table)
# the median of two timed steps is their mean: the bubbles are close to the run's (whose span is
# the pipeline's, without the step's start and end)
assert abs(mp - float(rows[("2", "4")]["bubble_measured"])) < 0.02, rows
assert abs(mn - float(rows[("2", "1")]["bubble_measured"])) < 0.02, rows
PY
below_ideal "$tmp/stem.yaml" "of-ideal notes"
# the same under except_last: the work factor's recompute (work naive-K never does) is named,
# with the factor it would be without it
sed 's/remat: never/remat: except_last/' "$tmp/stem.yaml" >"$tmp/stem-el.yaml"
cat >"$tmp/check.py" <<'PY'
import re, sys
notes = [l for l in open(sys.argv[1]).read().splitlines() if l.startswith("of ideal ")]
if not notes:
    sys.exit(3)
assert len(notes) == 1, notes
m = re.match(r"of ideal K=2 M=4 gpipe except_last: \d+% = work x([0-9.]+) \(stages busy ([0-9.]+) "
             r"ms a step against naive-2's ([0-9.]+); ([0-9.]+) of them recomputing forwards, "
             r"x([0-9.]+) without\) x bubble x", notes[0])
assert m, notes[0]
work, bp, bn, rec, without = (float(x) for x in m.groups())
assert 0 < rec < bp and abs(work - bn / bp) < 0.006, m.groups()
assert abs(without - bn / (bp - rec)) < 0.006 and without > work, m.groups()
PY
below_ideal "$tmp/stem-el.yaml" "of-ideal recompute"
# recompute_ms: each stage's time in re-materializing forwards, none without recomputing
if "$bench" "$mlp" --stages 2 --micro-batches 1,4 --remat never,except_last,always \
    "${fast[@]}" --json --quiet >"$tmp/rj" 2>"$tmp/err"; then
  python3 - "$tmp/rj" <<'PY' && ok || bad "recompute_ms: $(cat "$tmp/rj")"
import json, sys
for r in json.load(open(sys.argv[1]))["runs"]:
    rec, wall = r["recompute_ms"], r["wall_busy_ms"]
    # except_last keeps one micro-batch: at M = 1 nothing is recomputed
    none = r["remat"] == "never" or (r["remat"] == "except_last" and r["micro_batches"] == 1)
    assert len(rec) == r["stages"] and all((x == 0) if none else (0 < x < w) for x, w in zip(rec, wall)), r
PY
else
  bad "recompute_ms sweep exited $?: $(cat "$tmp/err")"
fi

# ---- --threads past the cores this process may use: accepted, with a note that says the threads
# take turns and what util is then against (C cores' sgemm peak with fewer cores to run them)
over=$(( $(nproc) + 1 ))
if "$bench" "$mlp" --stages 1 --micro-batches 2 --threads "$over" "${fast[@]}" --quiet \
    >"$tmp/over" 2>"$tmp/err" &&
   "$bench" "$mlp" --stages 1 --micro-batches 2 --threads "$over" "${fast[@]}" --quiet --json \
    >"$tmp/overj" 2>>"$tmp/err"; then
  python3 - "$tmp/over" "$tmp/overj" "$over" <<'PY' && ok || bad "--threads $over: $(cat "$tmp/over" "$tmp/overj")"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
c = int(sys.argv[3])
notes = [l for l in lines if l.startswith("note:")]
want = "note: %d threads on %d cores: oversubscribed" % (c, c - 1)
assert len(notes) == 1 and notes[0].startswith(want), notes
assert "cannot pass %.0f%%" % (100.0 * (c - 1) / c) in notes[0], notes
mc = json.load(open(sys.argv[2]))["machine"]
assert mc["oversubscribed"] is True and mc["threads"] == c and mc["cores"] == c - 1, mc
PY
else
  bad "--threads $over exited $?: $(cat "$tmp/err")"
fi

# ---- --threads-per-stage T: each run's K stages get K x T cores (K=1 gets T), so a K past the
# cores is skipped with its reason; one core (taskset) and, where there are two, both
if taskset -c 0 "$bench" "$mlp" --stages 1,2 --micro-batches 2 --threads-per-stage 1 "${fast[@]}" \
    --quiet --json >"$tmp/ps1" 2>"$tmp/err"; then
  python3 - "$tmp/ps1" <<'PY' && ok || bad "--threads-per-stage on one core: $(cat "$tmp/ps1")"
import json, sys
d = json.load(open(sys.argv[1]))
mc = d["machine"]
assert mc["cores"] == 1 and mc["threads_per_stage"] == 1 and mc["threads"] == 1, mc
assert [(r["stages"], r["micro_batches"], r["cores_used"]) for r in d["runs"]] == \
    [(1, 1, 1), (1, 2, 1)], d["runs"]
assert d["skipped"] == ["K=2 (2 stages x 1 thread need 2 cores; this process may use 1)"], d
PY
else
  bad "--threads-per-stage on one core exited $?: $(cat "$tmp/err")"
fi
if [ "$(nproc)" -ge 2 ]; then
  if taskset -c 0,1 "$bench" "$mlp" --stages 1,2 --micro-batches 2 --threads-per-stage 1 \
      "${fast[@]}" >"$tmp/ps2" 2>"$tmp/err" &&
     taskset -c 0,1 "$bench" "$mlp" --stages 1,2 --micro-batches 2 --threads-per-stage 1 \
      "${fast[@]}" --quiet --json >"$tmp/ps2j" 2>>"$tmp/err"; then
    python3 - "$tmp/ps2" "$tmp/ps2j" <<'PY' && ok || bad "--threads-per-stage on two cores: $(cat "$tmp/ps2" "$tmp/ps2j")"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert "2 cores (1 per stage)" in lines[0], lines[0]
assert not any(l.startswith(("skipped:", "note:")) for l in lines), lines
d = json.load(open(sys.argv[2]))
assert d["machine"]["threads"] == 2 and d["machine"]["threads_per_stage"] == 1, d["machine"]
assert [(r["stages"], r["cores_used"]) for r in d["runs"]] == [(1, 1), (1, 1), (2, 2), (2, 2)], \
    d["runs"]
PY
  else
    bad "--threads-per-stage on two cores exited $?: $(cat "$tmp/err")"
  fi
fi
# without it the machine names no per-stage count
"$bench" "$mlp" --stages 1 --micro-batches 1 "${fast[@]}" --quiet --json 2>"$tmp/err" |
  python3 -c 'import json, sys; assert json.load(sys.stdin)["machine"]["threads_per_stage"] is None' &&
  ok || bad "threads_per_stage without the flag: $(cat "$tmp/err")"

# ---- with gradient clipping the stages meet at a barrier before the optimizer step; the wait
# there is idle, not step: at K = 2, M = 1 the simulated bubble is still the one of two stages
# taking turns, 0.5 for a model whose optimizer step is small (counted as step it was 0.36 on
# balanced-cnn: the last stage's "step" held the first stage's whole backward)
if "$bench" "$srcdir/bench/models/balanced-cnn.yaml" --set train.clip_grad_norm=1 --stages 2 --schedule gpipe \
    --micro-batches 1 --remat never "${fast[@]}" --json --quiet >"$tmp/clip" 2>"$tmp/err"; then
  python3 - "$tmp/clip" <<'PY' && ok || bad "clipped K=2 M=1: $(cat "$tmp/clip")"
import json, sys
runs = [r for r in json.load(open(sys.argv[1]))["runs"] if r["stages"] == 2 and not r["baseline"]]
assert len(runs) == 1 and abs(runs[0]["bubble_simulated"] - 0.5) < 0.05, runs
PY
else
  bad "clipped run exited $?: $(cat "$tmp/err")"
fi

# ---- --memory-limit: a run whose memory would pass it does not fit, and is reported so, not an
# error. fashion-cnn at batch 16 needs about 21 MiB on one stage; K=2 M=4 always about
# 8.9/5.6 MiB (gpipe-train's memory line): at 12 MiB only the pipelined run fits (GPipe's
# Table 1 point), and both baselines (K=1 and K=2 at M=1, never) do not
cnn=$srcdir/models/fashion-cnn.yaml
fit=(--batch-size 16 --steps 1 --warmup 1 --memory-limit 12MiB --by flops) # the split its sizes were taken on
if "$bench" "$cnn" --stages 2 --micro-batches 4 --remat always "${fit[@]}" \
    >"$tmp/fit" 2>"$tmp/err"; then
  python3 - "$tmp/fit" <<'PY' && ok || bad "--memory-limit table: $(cat "$tmp/fit")"
import re, sys
text = open(sys.argv[1]).read()
lines = text.splitlines()
assert "memory limit 12.00 MiB per stage" in lines[0], lines[0]
head = re.split(r"\s{2,}", lines[1].strip())
rows = {(int(r[0]), int(r[1])): r for r in
        (re.split(r"\s{2,}", l.strip()) for l in lines[2:] if re.match(r"^\d+\s", l))}
assert sorted(rows) == [(1, 1), (2, 1), (2, 4)], rows
for km in ((1, 1), (2, 1)):
    r = rows[km]
    assert r[head.index("samples/s")] == "does not fit 12.00 MiB", r
    assert r[head.index("vs naive")] == "-" and r[head.index("peak MiB per stage")] == "-", r
    assert r[head.index("bubble")] == "-" and r[head.index("sim")] == "-", r
    assert r[head.index("replay")] == "-" and r[head.index("slowest")] == "-", r
r = rows[(2, 4)]
assert float(r[head.index("samples/s")]) > 0, r
assert r[head.index("vs naive")] == "-" and r[head.index("vs single")] == "-", r
assert len(r[head.index("peak MiB per stage")].split("/")) == 2, r
assert any(l.startswith("does not fit: K=1 M=1 gpipe never: stage 0") and
           "would pass the memory limit of 12582912 bytes" in l for l in lines), text
assert any(l.startswith("no speed-up over K=1 M=1 gpipe never (vs single: '-')") for l in lines), text
assert any(l.startswith("no speed-up over K=2 M=1 gpipe never (vs naive at K=2: '-')")
           for l in lines), text
PY
else
  bad "--memory-limit with a baseline that does not fit exited $?: $(cat "$tmp/err")"
fi
# the same in JSON, CSV and the plot, with one stage fitting and the pipeline not: fashion-mlp at
# batch 32 needs about 4.18 MiB on one stage (K=1 M=1 never) and 4.32 MiB on stage 0 of K=2 M=4
# always (its first linear layer, most of the parameters, with two stages' worth of boundary
# buffers; before the arenas' first-step chunks were sized to their tensors, 5.6 and 8.1 MiB)
if "$bench" "$mlp" --stages 1,2 --micro-batches 4 --remat always --batch-size 32 --steps 1 \
    --warmup 1 --threads 1 --memory-limit 4.25MiB --json --csv "$tmp/fit.csv" --plot "$tmp/fit.svg" \
    --quiet \
    >"$tmp/fj" 2>"$tmp/err"; then
  python3 - "$tmp/fj" "$tmp/fit.csv" "$tmp/fit.svg" <<'PY' && ok || bad "--memory-limit outputs: $(cat "$tmp/fj" "$tmp/fit.csv")"
import csv, json, sys
import xml.etree.ElementTree as ET
d = json.load(open(sys.argv[1]))
assert d["memory_limit"] == int(4.25 * 1048576), d["memory_limit"]
runs = {(r["stages"], r["micro_batches"]): r for r in d["runs"]}
no = runs[(2, 4)]
assert no["fits"] is False and "would pass the memory limit" in no["memory_error"], no
for k in ("samples_per_s", "speedup_vs_naive", "speedup_vs_single", "bubble_measured",
          "bubble_slowest", "bubble_replayed", "bubble_simulated", "gflops", "utilization",
          "peak_bytes", "busy_ms", "wall_busy_ms", "steal"):
    assert no[k] is None, (k, no)
assert abs(no["bubble_theory"] - 0.2) < 1e-6, no
for km in ((1, 1), (1, 4), (2, 1)):
    r = runs[km]
    assert r["fits"] is True and r["memory_error"] is None and r["samples_per_s"] > 0, r
    assert r["speedup_vs_naive"] > 0 and r["speedup_vs_single"] > 0, r
rows = list(csv.DictReader(open(sys.argv[2])))
c = {(int(r["stages"]), int(r["micro_batches"])): r for r in rows}
assert c[(2, 4)]["fits"] == "0" and c[(1, 4)]["fits"] == "1", rows
for k in ("samples_per_s", "speedup_vs_single", "gflops", "busy_ms", "peak_bytes"):
    assert c[(2, 4)][k] == "", (k, c[(2, 4)])
assert float(c[(1, 4)]["samples_per_s"]) > 0
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[3]).getroot()
points = ["".join(t.itertext()) for t in root.iter(ns + "title")]
# only runs asked for are points: the M=1 baselines are not (K=2 M=1 was drawn)
assert [p.split(":")[0] for p in points] == ["K=1 M=4"], points
notes = [t for t in root.iter(ns + "text") if t.get("class") == "does-not-fit"]
assert "do not fit 4.25 MiB" in " ".join("".join(t.itertext()) for t in notes), notes
PY
else
  bad "--memory-limit --json exited $?: $(cat "$tmp/err")"
fi

# ---- audit fixes, each with the input that showed it

# an M past the batch is noted once even when the first K is skipped (the note was made only
# at the first K, so a skipped first K lost it everywhere)
if taskset -c 0 "$bench" "$mlp" --threads-per-stage 1 --stages 2,1 --micro-batches 1,64 \
    "${fast[@]}" >"$tmp/sk" 2>"$tmp/err" &&
   taskset -c 0 "$bench" "$mlp" --threads-per-stage 1 --stages 2,1 --micro-batches 1,64 \
    "${fast[@]}" --json --quiet >"$tmp/skj" 2>>"$tmp/err"; then
  python3 - "$tmp/sk" "$tmp/skj" "$tmp/err" <<'PY' && ok || bad "M skipped after a skipped K: $(cat "$tmp/sk" "$tmp/skj" "$tmp/err")"
import json, sys
m64 = "M=64 (a batch of 32 cannot be split into 64)"
k2 = "K=2 (2 stages x 1 thread need 2 cores; this process may use 1)"
assert sorted(json.load(open(sys.argv[2]))["skipped"]) == sorted([m64, k2])
table = open(sys.argv[1]).read().splitlines()
assert sorted(l for l in table if l.startswith("skipped:")) == sorted(
    ["skipped: " + m64, "skipped: " + k2]), table
err = open(sys.argv[3]).read().splitlines()
assert err.count("gpipe-bench: skipping " + m64) == 1, err
PY
else
  bad "M skipped after a skipped K exited $?: $(cat "$tmp/err")"
fi

# the balance of 64 stages is whole in the table, CSV and JSON (it was cut at 127 characters:
# 43 entries, the last cut mid-number); 703 units on 1x1 inputs run in a second
big=(--set layers.1.repeat=700 --set inputs.x.1=1 --set inputs.x.2=1 --stages 64 --batch-size 4
     --micro-batches 2 --steps 1 --warmup 0)
if "$bench" "$srcdir/bench/models/balanced-cnn.yaml" "${big[@]}" --csv "$tmp/big.csv" --quiet \
    >"$tmp/big" 2>"$tmp/err" &&
   "$bench" "$srcdir/bench/models/balanced-cnn.yaml" "${big[@]}" --json --quiet \
    >"$tmp/bigj" 2>>"$tmp/err"; then
  python3 - "$tmp/big" "$tmp/big.csv" "$tmp/bigj" <<'PY' && ok || bad "balance of 64 stages: $(cut -c1-300 "$tmp/big" "$tmp/big.csv" "$tmp/bigj")"
import csv, json, re, sys
d = json.load(open(sys.argv[3]))
units = d["units"]
def whole(bal, sep):
    n = [int(x) for x in bal.split(sep)]
    assert len(n) == 64 and sum(n) == units and min(n) >= 1, (len(n), sum(n), units, bal)
runs = [r for r in d["runs"] if r["stages"] == 64]
assert len(runs) == 2, d["runs"]
for r in runs:
    whole(r["balance"], ",")
rows = [r for r in csv.DictReader(open(sys.argv[2])) if r["stages"] == "64"]
assert len(rows) == 2, rows
for r in rows:
    whole(r["balance"], ";")
lines = open(sys.argv[1]).read().splitlines()
rows = [re.split(r"\s{2,}", l.strip()) for l in lines[2:] if re.match(r"^64\s", l)]
assert len(rows) == 2, lines
for r in rows:
    whole(r[4], ",")
PY
else
  bad "balance of 64 stages exited $?: $(cat "$tmp/err")"
fi

# --plot draws the runs asked for, not the baselines beside them: K=2 M=1 is the `always` run
# asked for, not the `never` baseline (it was the faster of the two), with no "fastest of
# several" note; with --micro-batches 4 alone there is no M=1 line (it was made of baselines)
plot() { # name, extra flags...
  local name=$1; shift
  "$bench" "$mlp" --stages 1,2 --remat always "${fast[@]}" --plot "$tmp/$name.svg" --json \
    --quiet "$@" >"$tmp/$name.json" 2>"$tmp/err"
}
if plot bp2 --micro-batches 1,4 && plot bp4 --micro-batches 4; then
  python3 - "$tmp" <<'PY' && ok || bad "--plot with baselines: $(cat "$tmp/bp2.svg" "$tmp/bp4.svg")"
import json, sys
import xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
for name, ms in (("bp2", [1, 4]), ("bp4", [4])):
    root = ET.parse("%s/%s.svg" % (sys.argv[1], name)).getroot()
    runs = json.load(open("%s/%s.json" % (sys.argv[1], name)))["runs"]
    asked = {(r["stages"], r["micro_batches"]): r for r in runs if not r["baseline"]}
    assert all(r["remat"] == "always" for r in asked.values()), runs
    assert any(r["baseline"] and r["micro_batches"] == 1 for r in runs), runs
    measured = [p for p in root.iter(ns + "polyline") if p.get("class") == "measured"]
    assert sorted(int(p.get("data-m")) for p in measured) == ms, (name, measured)
    points = {}
    for t in root.iter(ns + "title"):
        km, v = "".join(t.itertext()).split(": ")
        k, m = (int(x.split("=")[1]) for x in km.split())
        points[(k, m)] = float(v.rstrip("x"))
    assert sorted(points) == sorted(asked), (name, points, asked)
    for km, v in points.items():
        assert abs(v - asked[km]["speedup_vs_single"]) < 0.0051, (name, km, v, asked[km])
    text = " ".join("".join(t.itertext()) for t in root.iter(ns + "text"))
    assert "fastest" not in text, (name, text)
PY
else
  bad "--plot with baselines exited $?: $(cat "$tmp/err")"
fi

# --data-only: a model path with a quote and a backslash is still JSON (it was printed bare),
# and a stdout that cannot be written fails as the sweep's does (it exited 0); on a small
# Fashion-MNIST made here
mkdir -p "$tmp/fm"
python3 - "$tmp/fm" <<'PY'
import gzip, struct, sys
n = 64
with gzip.open(sys.argv[1] + "/train-images-idx3-ubyte.gz", "wb") as f:
    f.write(struct.pack(">IIII", 0x803, n, 28, 28) + bytes(i * 7 % 256 for i in range(n * 784)))
with gzip.open(sys.argv[1] + "/train-labels-idx1-ubyte.gz", "wb") as f:
    f.write(struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n)))
PY
odd=$tmp/'q"b\c.yaml'
cp "$srcdir/models/fashion-cnn.yaml" "$odd"
donly=("$odd" --set data.path="$tmp/fm" --data-only --batch-size 8 --steps 1 --warmup 0 --quiet)
if "$bench" "${donly[@]}" --json >"$tmp/dj" 2>"$tmp/err"; then
  python3 - "$tmp/dj" "$odd" <<'PY' && ok || bad "--data-only --json with an odd path: $(cat "$tmp/dj")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["data"]["model"] == sys.argv[2] and d["data"]["batch_size"] == 8, d
assert d["machine"]["cpu"] and d["runs"][0]["samples_per_s"] > 0, d
PY
else
  bad "--data-only --json exited $?: $(cat "$tmp/err")"
fi
for j in "" --json; do
  "$bench" "${donly[@]}" $j >/dev/full 2>"$tmp/err"; rc=$?
  [ $rc = 1 ] && [ "$(cat "$tmp/err")" = "gpipe-bench: stdout: writing failed: No space left on device" ] &&
    ok || bad "--data-only $j to /dev/full: exit $rc: $(cat "$tmp/err")"
done

# a limit below a MiB is given in readable units (it was "0.00 MiB")
for lim in "1 1 B" "3000 2.93 KiB"; do
  set -- $lim
  "$bench" "$mlp" "${fast[@]}" --stages 1 --micro-batches 1 --memory-limit "$1" --quiet \
    >/dev/null 2>"$tmp/err"; rc=$?
  [ $rc = 1 ] && grep -q "^gpipe-bench: no run asked for fits --memory-limit $2 $3 per stage (K=1" \
    "$tmp/err" && ok || bad "--memory-limit $1: exit $rc: $(cat "$tmp/err")"
done

# nothing to run with --threads-per-stage says where K came from when --stages was not given
# (it named --stages)
"$part" "$mlp" --stages 2 -o "$tmp/plan2.yaml" >/dev/null 2>&1 || bad "gpipe-partition -o plan2 failed"
for how in "--partition $tmp/plan2.yaml|the plan of --partition $tmp/plan2.yaml has 2 stages" \
           "--set pipeline.stages=2|the model file's pipeline section has 2 stages"; do
  IFS='|' read -r flag want <<<"$how"
  taskset -c 0 "$bench" "$mlp" $flag --threads-per-stage 1 >"$tmp/out" 2>"$tmp/err"; rc=$?
  [ $rc = 2 ] && [ ! -s "$tmp/out" ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
    grep -q "^gpipe-bench: nothing to run: $want, which need 2 cores at --threads-per-stage 1; this process may use 1" \
      "$tmp/err" && ok || bad "no K with $flag: exit $rc: $(cat "$tmp/err")"
done

# ---- a language model with rows of one token on synthetic data trains (each sentence is just
# EOS; a length bound of 0 made the synthetic corpus divide by zero, SIGFPE)
lm1=(--set layers.0.num_embeddings=20 --set layers.0.dim=16 --set layers.1.max_len=1
     --set blocks.layer.params.d=16 --set blocks.layer.params.heads=2 --set blocks.layer.params.ff=32
     --set layers.3.repeat=1 --set layers.5.out_features=20)
for i in tokens seg pos label; do lm1+=(--set inputs.$i.shape.0=1); done
"$bench" "$srcdir/models/transformer-lm.yaml" "${lm1[@]}" --stages 1 --micro-batches 1 \
  --batch-size 4 --steps 1 --warmup 0 --quiet >"$tmp/lm1" 2>"$tmp/err" && ok ||
  bad "LM with rows of 1 token: exit $?: $(cat "$tmp/err")"

# ---- bad input: one line on stderr, nothing on stdout, exit 2 (usage, model) or 1 (files)
expect() { # code, what, args...
  local code=$1 what=$2; shift 2
  "$bench" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -ne "$code" ]; then bad "$what: exit $rc, expected $code: $(cat "$tmp/err")"
  elif [ "$(wc -l <"$tmp/err")" -ne 1 ] || [ -s "$tmp/out" ]; then
    bad "$what: expected one line on stderr only: $(cat "$tmp/out" "$tmp/err")"
  else ok; fi
}
expect 2 "not a number in --stages" "$mlp" --stages 1,x
# an output that is the file stdout goes to (--csv /dev/stdout > f) would replace the table
expect 2 "--csv is stdout's file" "$mlp" --stages 1 --micro-batches 1 --steps 1 --warmup 0 \
  --csv "$tmp/out"
grep -q "^gpipe-bench: --csv .*/out: is the file the program's standard output goes to; give another file$" \
  "$tmp/err" && ok || bad "--csv is stdout's file: $(cat "$tmp/err")"
# --batch-size is checked as the file's setting: a --set M above the file's batch no longer
# stops a sweep that --batch-size makes room for
"$bench" "$mlp" --set pipeline.micro_batches=200 --batch-size 256 --stages 1 --steps 1 \
  --warmup 0 --quiet >"$tmp/out" 2>"$tmp/err" && ok ||
  bad "--set pipeline.micro_batches=200 --batch-size 256: exit $?: $(cat "$tmp/err")"
# one process holds no replica but the one: R = 2 is skipped with the layout's reason, and a
# sweep of nothing but R = 2 is one line
expect 2 "no layout fits" "$mlp" --stages 2 --replicas 2 --steps 1 --warmup 0
grep -q "^gpipe-bench: nothing to run: no layout of --stages and --replicas fits 1 process (K=2 R=2: --replicas 2 with 1 processes: each replica needs a process of its own" \
  "$tmp/err" && ok || bad "no layout fits: $(cat "$tmp/err")"
if "$bench" "$mlp" --stages 2 --replicas 1,2 --micro-batches 2 "${fast[@]}" --quiet --json \
    >"$tmp/rj" 2>"$tmp/err"; then
  python3 - "$tmp/rj" <<'PY' && ok || bad "--replicas 1,2 in one process: $(cat "$tmp/rj")"
import json, sys
b = json.load(open(sys.argv[1]))
assert b["machine"]["processes"] == 1 and b["machine"]["handoff_latency_s"] is None, b["machine"]
assert [s.split(" (")[0] for s in b["skipped"]] == ["K=1 R=2, the one-stage reference", "K=2 R=2"], b["skipped"]
assert all(r["replicas"] == 1 and r["processes"] == 1 and r["allreduce_ms"] is None
           for r in b["runs"]), b["runs"]
assert [(r["stages"], r["micro_batches"]) for r in b["runs"]] == [(1, 1), (2, 1), (2, 2)], b["runs"]
PY
else bad "--replicas 1,2 in one process: exit $?: $(cat "$tmp/err")"; fi
expect 2 "no M fits the batch" "$mlp" --batch-size 8 --micro-batches 16,32 --steps 1 --warmup 0
grep -q "^gpipe-bench: nothing to run: every micro-batch count exceeds the batch of 8$" \
  "$tmp/err" && ok || bad "no M fits the batch: $(cat "$tmp/err")"
# ... nor does the file's M, which --micro-batches replaces (it stopped at the load)
"$bench" "$mlp" --set pipeline.micro_batches=100 --batch-size 64 --micro-batches 2 --stages 1 \
  --steps 1 --warmup 0 --quiet >"$tmp/out" 2>"$tmp/err" && ok ||
  bad "--micro-batches replacing the file's M: exit $?: $(cat "$tmp/err")"
expect 2 "empty item in --micro-batches" "$mlp" --micro-batches 1,,4
expect 2 "zero stages" "$mlp" --stages 0
# list items are integers as single-integer flags take them: no sign, no space (strtol took them)
expect 2 "--stages ' 2'" "$mlp" --stages ' 2' "${fast[@]}"
expect 2 "--stages +2" "$mlp" --stages +2 "${fast[@]}"
expect 2 "--micro-batches 1,+2" "$mlp" --micro-batches 1,+2 "${fast[@]}"
expect 2 "--micro-batches '1, 2'" "$mlp" --micro-batches '1, 2' "${fast[@]}"
grep -q "^gpipe-bench: --micro-batches: expected integers >= 1 separated by commas, got '1, 2'$" \
  "$tmp/err" && ok || bad "--micro-batches '1, 2': $(cat "$tmp/err")"
expect 2 "--workers +1" "$mlp" --data-only --workers +1
expect 2 "--stages past long" "$mlp" --stages 99999999999999999999
grep -q "^gpipe-bench: --stages: 99999999999999999999 is too large (at most 1024)$" "$tmp/err" && ok ||
  bad "--stages past long: $(cat "$tmp/err")"
expect 2 "duplicate K" "$mlp" --stages 2,2
expect 2 "K > units" "$mlp" --stages 1,8
expect 2 "unknown schedule" "$mlp" --schedule gpipe,1f1c
grep -q "did you mean '1f1b'" "$tmp/err" && ok || bad "no did-you-mean: $(cat "$tmp/err")"
expect 2 "unknown remat" "$mlp" --remat alwys
grep -q "did you mean 'always'" "$tmp/err" && ok || bad "no did-you-mean: $(cat "$tmp/err")"
expect 2 "unknown data" "$mlp" --data fake
expect 2 "unknown flag" "$mlp" --stage 2
expect 2 "every M above the batch" "$mlp" --micro-batches 64 --batch-size 32
expect 2 "--partition with --stages" "$mlp" --partition "$tmp/plan.yaml" --stages 2
expect 2 "no model" --stages 2
cp "$mlp" "$tmp/m.yaml"
expect 2 "--trace over the model file" "$tmp/m.yaml" --stages 1 --micro-batches 1 --trace "$tmp/m.yaml"
grep -q "^gpipe-bench: --trace $tmp/m.yaml: that is the model file; give the output another path$" \
  "$tmp/err" && cmp -s "$mlp" "$tmp/m.yaml" && ok || bad "--trace over the model file: $(cat "$tmp/err")"
expect 2 "--plot over --csv" "$mlp" --stages 1 --micro-batches 1 --csv "$tmp/o" --plot "$tmp/./o"
grep -q "^gpipe-bench: --plot $tmp/./o: --csv writes that file too" "$tmp/err" && ok ||
  bad "--plot over --csv: $(cat "$tmp/err")"
expect 2 "bad model override" "$mlp" --set nope.x=1
expect 1 "unwritable --csv" "$mlp" "${fast[@]}" --csv "$tmp/no/such/dir.csv"
expect 1 "--plot is a directory" "$mlp" "${fast[@]}" --plot "$tmp"
# an SVG under another name opens as a broken image; "-" would be a file of that name
expect 2 "--plot not .svg" "$mlp" "${fast[@]}" --plot "$tmp/speedup.png"
grep -q "^gpipe-bench: --plot $tmp/speedup.png: the plot is SVG; give a name ending in .svg$" \
  "$tmp/err" && [ ! -e "$tmp/speedup.png" ] && ok || bad "--plot not .svg: $(cat "$tmp/err")"
expect 2 "--csv -" "$mlp" "${fast[@]}" --csv -
grep -q "^gpipe-bench: --csv -: would write a file named '-', not standard output; give a file name$" \
  "$tmp/err" && [ ! -e ./- ] && ok || bad "--csv -: $(cat "$tmp/err")"
expect 1 "unwritable --trace" "$mlp" "${fast[@]}" --trace /proc/no-such-trace.json
# a model name with a comma and a quote stays one CSV field
"$bench" "$mlp" "${fast[@]}" --stages 1 --micro-batches 1 --set 'name=a,"b' --csv "$tmp/n.csv" \
  --quiet >/dev/null 2>&1 &&
  python3 -c 'import csv, sys; r = list(csv.reader(open(sys.argv[1])))
assert r[1][0] == "a,\"b" and len(r[1]) == len(r[0]), r' "$tmp/n.csv" && ok ||
  bad "a model name with a comma in --csv: $(cat "$tmp/n.csv")"
mkfifo "$tmp/fifo"
expect 1 "--trace to a FIFO (it is renamed into place)" "$mlp" "${fast[@]}" --trace "$tmp/fifo"
expect 2 "an integer past int" "$mlp" --steps 2147483648
expect 2 "--steps past 4096" "$mlp" --steps 4097
expect 2 "a sweep flag with --data-only" "$mlp" --data-only --csv "$tmp/x.csv"
expect 2 "--workers without --data-only" "$mlp" --workers 2
expect 2 "--threads with --threads-per-stage" "$mlp" --threads 1 --threads-per-stage 1
expect 2 "--threads-per-stage past the cores" "$mlp" --threads-per-stage "$over"
grep -q "^gpipe-bench: --threads-per-stage $over: this process may use $((over - 1)) core" "$tmp/err" &&
  ok || bad "--threads-per-stage past the cores: $(cat "$tmp/err")"
expect 2 "--threads-per-stage leaves no K" "$mlp" --stages 2,4 --threads-per-stage "$(nproc)"
grep -q "^gpipe-bench: nothing to run: --threads-per-stage $(nproc) leaves no K of --stages" \
  "$tmp/err" && ok || bad "--threads-per-stage leaves no K: $(cat "$tmp/err")"
# what only opening the data finds is located at the data section, as gpipe-train says it
for how in "--data real" "--data-only"; do
  expect 2 "$how without CIFAR's data.path" "$srcdir/models/resnet20-cifar.yaml" $how "${fast[@]}"
  grep -qE "^gpipe-bench: .*resnet20-cifar.yaml:[0-9]+:[0-9]+: data.path: set it" "$tmp/err" && ok ||
    bad "$how without data.path: $(cat "$tmp/err")"
done
# --data-only on token data: the same line and exit 2 for translation and text
# no run asked for fits: nothing to report, one line, exit 1
expect 1 "no run fits --memory-limit" "$mlp" "${fast[@]}" --stages 1 --micro-batches 1 \
  --memory-limit 1MiB --quiet
grep -q "no run asked for fits --memory-limit 1.00 MiB per stage (K=1 M=1 gpipe" "$tmp/err" && ok ||
  bad "no run fits: $(cat "$tmp/err")"
expect 2 "--data-only on translation data" "$srcdir/models/transformer-nmt.yaml" --data-only
grep -q "transformer-nmt.yaml reads translation token data, which has no decode threads" "$tmp/err" &&
  ok || bad "--data-only on translation data: $(cat "$tmp/err")"
expect 2 "--data-only on text data" "$srcdir/models/transformer-lm.yaml" --data-only
grep -q "transformer-lm.yaml reads text token data, which has no decode threads" "$tmp/err" &&
  ok || bad "--data-only on text data: $(cat "$tmp/err")"
# synthetic data fills one f32 input and the labels: said before the sweep, in user terms
printf 'name: two\ninputs:\n  a: [8]\n  b: [8]\n  label: {shape: [], dtype: i32}\nlayers:\n%s\n%s\nloss: softmax_cross_entropy\n' \
  '  - {type: add, from: [a, b]}' '  - {type: linear, out_features: 3}' >"$tmp/two.yaml"
expect 2 "two f32 inputs" "$tmp/two.yaml" --stages 1 --micro-batches 1 "${fast[@]}"
grep -q "two.yaml: synthetic data fills one f32 input and the labels" "$tmp/err" && ok ||
  bad "two f32 inputs: $(cat "$tmp/err")"
# a run that fails after the output files were checked leaves none of them behind
expect 1 "missing data" "$mlp" "${fast[@]}" --data real --set data.path="$tmp/none" \
  --csv "$tmp/left.csv" --plot "$tmp/left.svg"
[ -e "$tmp/left.csv" ] || [ -e "$tmp/left.svg" ] && bad "files left behind" || ok

# a closed stdout reads as /dev/null: --csv is written and the run succeeds (it was "stdout:
# writing failed", exit 1, no file)
"$bench" "$mlp" "${fast[@]}" --stages 1 --micro-batches 1 --csv "$tmp/closed.csv" >&- \
  2>"$tmp/err" && grep -q "^fashion-mlp," "$tmp/closed.csv" && ok ||
  bad "--csv with stdout closed: $(cat "$tmp/err")"
# a write that fails (files limited to 0 bytes, as on a full disk) says why and leaves no file
# (it left a 0-byte one, and the line had no reason)
for f in csv:csv plot:svg; do
  x=${f#*:} f=${f%:*}
  err=$( (trap '' XFSZ; ulimit -f 0
          exec "$bench" "$mlp" "${fast[@]}" --stages 1 --micro-batches 1 --quiet \
            --$f "$tmp/full.$x" 2>&1 >/dev/null) ); rc=$?
  if [ $rc -eq 1 ] && [ "$err" = "gpipe-bench: --$f $tmp/full.$x: writing failed: File too large" ] &&
     [ -z "$(ls "$tmp" | grep "^full\.$x")" ]; then ok
  else bad "--$f on a full disk: exit $rc: $err; $(ls "$tmp" | grep "^full")"; fi
done
# a reader of stdout that stops early does not cost the files: they are written before the
# table (SIGPIPE on the table killed it before them)
"$bench" "$mlp" "${fast[@]}" --stages 1 --micro-batches 1 --quiet --csv "$tmp/pipe.csv" \
  --plot "$tmp/pipe.svg" 2>/dev/null | true
[ -s "$tmp/pipe.csv" ] && [ -s "$tmp/pipe.svg" ] && ok || bad "stdout closed early: no --csv/--plot"

# ---- hostile names: every output stays valid in its format with a model name made of what
# each format escapes (quotes, backslash, comma, <, &, ]]>, accents, an emoji) and a
# model file whose name is not UTF-8 (its byte was written raw into --json's model_file)
hostile=$tmp/$'h\xff,"q\\.yaml'
cat >"$hostile" <<'YAML'
name: "a\"b\\c,d<e&f]]>g 'h' \u00e9 \U0001F600 end"
inputs: {x: [8], label: {shape: [], dtype: i32}}
layers:
  - {type: linear, out_features: 8, name: l1}
  - {type: relu}
  - {type: linear, out_features: 4, name: head}
loss: {type: softmax_cross_entropy}
train: {batch_size: 4, optimizer: {type: sgd, lr: 0.01}}
YAML
if "$bench" "$hostile" --stages 1,2 --micro-batches 1,2 --steps 1 --warmup 0 --quiet --json \
    --csv "$tmp/h.csv" --plot "$tmp/h.svg" --trace "$tmp/h.trace" >"$tmp/h.json" 2>"$tmp/err" &&
  "$part" "$hostile" --stages 2 --json >"$tmp/hp.json" 2>>"$tmp/err"; then
  python3 - "$tmp" <<'PY' && ok || bad "hostile names: $(cat "$tmp/err")"
import csv, json, sys
import xml.etree.ElementTree as ET
d = sys.argv[1]
name = "a\"b\\c,d<e&f]]>g 'h' \u00e9 \U0001F600 end"
j = json.load(open(d + "/h.json", encoding="utf-8"))
assert j["model"] == name, j["model"]
assert j["model_file"].endswith("/h\ufffd,\"q\\.yaml"), j["model_file"]
assert json.load(open(d + "/hp.json", encoding="utf-8"))["model"] == name
rows = list(csv.reader(open(d + "/h.csv", encoding="utf-8", newline="")))
assert len(rows) == 1 + len(j["runs"]) and all(len(r) == len(rows[0]) for r in rows), rows
assert all(r[0] == name for r in rows[1:]), rows[1]
text = "".join(ET.parse(d + "/h.svg").getroot().itertext())
assert name in text, text[:300]
json.load(open(d + "/h.trace", encoding="utf-8"))
PY
else
  bad "hostile names: exit $?: $(cat "$tmp/err")"
fi

# SIGTERM mid-sweep stops at once: exit 143, one line, no --csv (temporary or whole) left
"$bench" "$srcdir/bench/models/balanced-cnn.yaml" --stages 1,2 --micro-batches 1,8 --steps 50 \
  --csv "$tmp/term.csv" >/dev/null 2>"$tmp/term.err" &
pid=$!
for _ in $(seq 100); do grep -q "run 1/" "$tmp/term.err" && break; sleep 0.1; done
kill -TERM $pid; wait $pid; rc=$?
[ $rc = 143 ] && [ "$(tail -1 "$tmp/term.err")" = "gpipe-bench: SIGTERM received: stopped at once" ] &&
  ! ls "$tmp" | grep -q "term.csv" && ok || bad "SIGTERM: exit $rc, $(tail -1 "$tmp/term.err")"

# ---- interleaved: a row beside 1f1b's, its balance a chunk's, an M that is not a multiple of
# K a note naming one that is, and --virtual-stages only with it
if "$bench" "$mlp" "${fast[@]}" --stages 2 --micro-batches 3,4 --schedule 1f1b,interleaved \
  --virtual-stages 2 --remat never --quiet >"$tmp/inter" 2>"$tmp/err" &&
  grep -Eq "^2 +4 +interleaved +never +[0-9]+,[0-9]+,[0-9]+,[0-9]+ " "$tmp/inter" &&
  grep -Eq "^2 +4 +1f1b +never " "$tmp/inter" && ! grep -Eq "^2 +3 +interleaved" "$tmp/inter" &&
  grep -q "^skipped: K=2 M=3 interleaved (micro-batches go in groups of the stages: M=4 would do)$" \
    "$tmp/inter"; then ok
else bad "interleaved sweep: $(cat "$tmp/inter" "$tmp/err")"; fi
for args in "--schedule interleaved|the interleaved schedule needs 2 or more virtual stages \
(--virtual-stages V)" "--schedule 1f1b --virtual-stages 2|--virtual-stages 2: only the \
interleaved schedule has virtual stages (--schedule interleaved)"; do
  "$bench" "$mlp" "${fast[@]}" --stages 2 --micro-batches 2 --remat never ${args%%|*} \
    >/dev/null 2>"$tmp/err"; rc=$?
  [ $rc = 2 ] && [ "$(cat "$tmp/err")" = "gpipe-bench: ${args#*|}" ] && ok ||
    bad "${args%%|*}: exit $rc: $(cat "$tmp/err")"
done
# schedule auto that takes interleaved names its V in the one token (fashion-cnn, K = 2, M = 6
# on FLOPs: V = 2, as in tests/cli/train_split.sh)
"$bench" "$srcdir/models/fashion-cnn.yaml" --stages 2 --micro-batches 6 --batch-size 36 \
  --by flops --schedule auto --steps 1 --warmup 1 >"$tmp/iauto" 2>"$tmp/err" &&
  grep -Eq "^2 +6 +auto:interleaved-v2 +never +1,2,1,3 " "$tmp/iauto" && ok ||
  bad "auto's interleaved: $(cat "$tmp/iauto" "$tmp/err")"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
