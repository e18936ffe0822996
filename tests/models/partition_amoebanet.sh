#!/usr/bin/env bash
# gpipe-partition previews AmoebaNet-D(72, 512), 1.84B parameters, over 8 stages without
# allocating them: it succeeds, reports 8 contiguous stages covering the 78 units and the
# specification's parameter count, writes a plan, and stays small and quick (peak RSS and wall
# time of the process are bounded far above what it needs: measured about 11 MiB, 0.02 s,
# without CUDA; a CUDA build adds the libraries' mapped pages).
set -u
part=$1; srcdir=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
model=$srcdir/models/amoebanet-d.yaml
# docs/amoebanet-d.md: N = L/3 = 24 normal cells per group, the first is its own entry
set72=(--set blocks.cell.params.D=512 --set layers.4.repeat=23 --set layers.7.repeat=23
       --set layers.10.repeat=23)
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { echo "FAIL: $*"; failed=$((failed+1)); }

# runs the command, then prints "exit status, peak RSS in KiB, wall seconds" of that process
measure() {
  python3 - "$@" <<'PY'
import resource, subprocess, sys, time
t0 = time.monotonic()
rc = subprocess.call(sys.argv[1:])
wall = time.monotonic() - t0
print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "%.3f" % wall, file=sys.stderr)
PY
}

# ---- the table
measure "$part" "$model" --stages 8 --micro-batches 32 --batch-size 64 "${set72[@]}" \
  >"$tmp/table" 2>"$tmp/stat"
read -r rc rss wall <"$tmp/stat"
echo "table: exit $rc, peak RSS $rss KiB, $wall s"
if [ "$rc" = 0 ]; then
  python3 - "$tmp/table" <<'PY' && ok || bad "(72, 512) table: $(cat "$tmp/table")"
import re, sys
text = open(sys.argv[1]).read()
assert "model amoebanet-d: 78 units, 1844.858M parameters; 8 stages" in text, text[:300]
rows = [l.split() for l in text.splitlines() if re.match(r"^\s+\d+\s+\d+-\d+ ", l)]
assert len(rows) == 8, rows
nxt = 0
for i, r in enumerate(rows):
    a, b = map(int, r[1].split("-"))
    assert int(r[0]) == i and a == nxt and b >= a, (r, nxt)
    nxt = b + 1
assert nxt == 78, nxt
PY
else
  bad "(72, 512) --stages 8 exited $rc: $(head -c 400 "$tmp/table")"
fi
# 1.84B f32 weights alone are 6.9 GiB: 1 GiB means none were allocated (a CUDA build maps
# cuBLAS and cuDNN at start, about 220 MiB resident, 370 MiB under ASan); 20 s is generous
# for sanitizer builds
[ "${rss:-999999999}" -lt 1048576 ] && ok || bad "peak RSS $rss KiB"
python3 -c "import sys; sys.exit(not float('${wall:-99}') < 20)" && ok || bad "took $wall s"

# ---- --json: the parameter count of the specification, split over the 8 stages; a plan
if "$part" "$model" --stages 8 --json -o "$tmp/plan.yaml" "${set72[@]}" >"$tmp/j" 2>"$tmp/err"; then
  python3 - "$tmp/j" "$tmp/plan.yaml" <<'PY' && ok || bad "(72, 512) --json: $(head -c 600 "$tmp/j")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["params"] == 1844858344, d["params"]  # tests/models/amoebanet_count.py 72 512 1000
assert d["stages"] == 8 and len(d["partition"]) == 8 and len(d["units"]) == 78
assert sum(s["params"] for s in d["partition"]) == 1844858344
assert d["units"][0]["name"] == "stem" and d["units"][-1]["name"] == "head"
assert all(s["params"] > 0 and s["memory_bytes"] > 0 for s in d["partition"])
plan = open(sys.argv[2]).read()
assert "stages" in plan and "balance" in plan, plan
PY
else
  bad "(72, 512) --json exited $?: $(cat "$tmp/err")"
fi

# ---- the recipe checks L: L = 9 (N = 3) is 15 units, (18, 208) is 24 units, 81.5M
"$part" "$model" --stages 4 --set layers.4.repeat=2 --set layers.7.repeat=2 \
  --set layers.10.repeat=2 >"$tmp/t9" 2>&1 && grep -q "15 units" "$tmp/t9" && ok ||
  bad "L = 9: $(head -3 "$tmp/t9")"
"$part" "$model" --stages 4 >"$tmp/t18" 2>&1 && grep -q "24 units, 81.506M parameters" "$tmp/t18" &&
  ok || bad "defaults: $(head -3 "$tmp/t18")"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
