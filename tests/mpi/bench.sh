#!/usr/bin/env bash
# gpipe-bench under mpirun (2 processes, every byte through TCP): the sweep over --stages 1,2 x
# --replicas 1,2 runs the layouts 2 processes can hold and lists the one they cannot (K=1 R=1)
# as skipped; rank 0 alone prints (one table); the JSON names the processes and replicas of each
# run, every stage's numbers come from the process that holds it (peak_bytes non-zero for all),
# the replicated runs carry their all-reduce, and the machine its hand-off and all-reduce figures;
# interleaved (K = 2 x V = 2) over the 2 processes runs, every chunk measured.
set -u
bench=$1; srcdir=$2
command -v mpirun >/dev/null || { echo "no mpirun: skipped"; exit 77; }
. "$srcdir/tests/mpi/sanitize.sh"
export OMPI_MCA_rmaps_base_oversubscribe=1
mpi=(timeout 240 mpirun --oversubscribe --mca btl tcp,self -np 2)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { echo "FAIL: $*"; failed=$((failed+1)); }

mlp=$srcdir/models/fashion-mlp.yaml
q=(--stages 1,2 --replicas 1,2 --micro-batches 2 --steps 2 --warmup 1 --threads 1)

# the JSON, with the progress and notes on stderr (rank 0's alone)
if "${mpi[@]}" "$bench" "$mlp" "${q[@]}" --json >"$tmp/j" 2>"$tmp/err"; then
  python3 - "$tmp/j" <<'PY' && ok || bad "JSON under mpirun: $(head -c 3000 "$tmp/j")"
import json, sys
b = json.load(open(sys.argv[1]))
m = b["machine"]
assert m["processes"] == 2, m
assert 0 < m["handoff_latency_s"] < 0.1, m
assert m["handoff_bytes_per_s"] > 1e6 and m["allreduce_bytes_per_s"] > 1e6, m
runs = {(r["stages"], r["micro_batches"], r["replicas"], r["baseline"]): r for r in b["runs"]}
# (K=1, R=1) needs one process holding a stage it cannot: skipped, with the layout's reason
assert len(b["skipped"]) == 1 and b["skipped"][0].startswith("K=1 R=1 (2 processes a replica"), b["skipped"]
assert sorted(runs) == sorted([(2, 1, 1, True), (2, 2, 1, False), (1, 1, 2, True),
                               (1, 2, 2, False), (2, 1, 2, True), (2, 2, 2, False)]), sorted(runs)
for key, r in runs.items():
    k, _, R, _ = key
    assert r["processes"] == 2 and r["replicas"] == R, r
    assert r["fits"] and r["samples_per_s"] > 0, r
    # every stage's numbers from the process that holds it (zeros elsewhere before)
    assert len(r["peak_bytes"]) == k and all(p > 0 for p in r["peak_bytes"]), r
    assert all(x > 0 for x in r["busy_ms"]) and all(x > 0 for x in r["wall_busy_ms"]), r
    if R == 2:
        assert 0 < r["allreduce_ms"] < 10000, r
        assert 0 <= r["allreduce_hidden"] <= 1, r
        assert r["allreduce_bytes"] == 4 * b["params"], (r["allreduce_bytes"], b["params"])
    else:
        assert r["allreduce_ms"] is None and r["allreduce_hidden"] is None, r
        assert r["allreduce_bytes"] == 0, r
# the speed-up over one stage: against K=1 of the same R, none where that was skipped
assert runs[(2, 2, 1, False)]["speedup_vs_single"] is None, runs[(2, 2, 1, False)]
assert runs[(2, 2, 2, False)]["speedup_vs_single"] > 0, runs[(2, 2, 2, False)]
PY
  # one voice: rank 0's progress alone (each run once), and no rank's line
  n=$(grep -c "^gpipe-bench: run 1/6: K=2 M=1 gpipe never (baseline)" "$tmp/err")
  [ "$n" = 1 ] && ! grep -q "rank" "$tmp/err" && ok || bad "stderr under mpirun: $(cat "$tmp/err")"
else
  bad "the JSON sweep exited $?: $(tail -5 "$tmp/err")"
fi

# the table, once, with its R column, the machine's links and an all-reduce line per
# replicated run; --csv with the same fields
if "${mpi[@]}" "$bench" "$mlp" "${q[@]}" --quiet --csv "$tmp/c.csv" >"$tmp/t" 2>"$tmp/err"; then
  [ "$(grep -c '^machine: ' "$tmp/t")" = 1 ] && [ "$(grep -c '^K  M  R  schedule' "$tmp/t")" = 1 ] &&
    grep -q "| 2 processes: hand-off [0-9.]* us (8 B), [0-9.]* GB/s (4 MiB), all-reduce [0-9.]* GB/s" "$tmp/t" &&
    [ "$(grep -c '^all-reduce K=[12] M=[12] [a-z0-9:-]* .* R=2: [0-9.]* ms a step for [0-9.]* MiB, [0-9]*% hidden under the backward$' "$tmp/t")" = 4 ] &&
    grep -q "^skipped: K=1 R=1 (" "$tmp/t" && [ ! -s "$tmp/err" ] && ok ||
    bad "table under mpirun: $(cat "$tmp/t" "$tmp/err")"
  python3 - "$tmp/c.csv" <<'PY' && ok || bad "CSV under mpirun: $(cat "$tmp/c.csv")"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 6, rows
for r in rows:
    assert r["processes"] == "2" and r["replicas"] in ("1", "2"), r
    assert (r["allreduce_ms"] != "") == (r["replicas"] == "2"), r
    assert all(int(p) > 0 for p in r["peak_bytes"].split(";")), r
PY
else
  bad "the table sweep exited $?: $(tail -5 "$tmp/err")"
fi

# interleaved over the 2 processes (chunks 0, 2 on rank 0; 1, 3 on rank 1): it runs, and each
# chunk's numbers come from the process that holds it
if "${mpi[@]}" "$bench" "$mlp" --stages 2 --micro-batches 2 --schedule interleaved \
    --virtual-stages 2 --remat never --steps 2 --warmup 1 --threads 1 --json >"$tmp/iv" \
    2>"$tmp/err"; then
  python3 - "$tmp/iv" <<'PY' && ok || bad "interleaved under mpirun: $(head -c 3000 "$tmp/iv")"
import json, sys
runs = [r for r in json.load(open(sys.argv[1]))["runs"] if r["schedule"] == "interleaved"]
assert len(runs) == 1 and runs[0]["processes"] == 2 and runs[0]["samples_per_s"] > 0, runs
assert all(p > 0 for p in runs[0]["peak_bytes"]), runs[0]["peak_bytes"]
PY
else
  bad "interleaved under mpirun exited $?: $(tail -5 "$tmp/err")"
fi

# a setup error is every process's: one line, from rank 0, and every process exits 2
"${mpi[@]}" "$bench" "$mlp" "${q[@]}" --replicas 0 >"$tmp/o" 2>"$tmp/err"; rc=$?
[ "$rc" = 2 ] && [ "$(grep -c '^gpipe-bench: rank 0 (.*): --replicas' "$tmp/err")" = 1 ] &&
  [ "$(grep -c gpipe-bench "$tmp/err")" = 1 ] && ok || bad "setup error (exit $rc): $(cat "$tmp/err")"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
