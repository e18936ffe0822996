#!/usr/bin/env bash
# Re-materialization is named remat: the --remat flag, pipeline.remat: in a model file, remat:
# in a plan and the remat field of the JSON. The old names (--checkpoint, checkpoint:) are
# still read with a one-line note, so older scripts, model files and plans keep working; a file
# giving both names is refused.
set -u
train=$1; part=$2; bench=$3; srcdir=$4
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { echo "FAIL: $*"; failed=$((failed+1)); }
# fashion-mlp naming the mode (the model files leave it to remat auto), the keys edited below
sed 's/^pipeline: {stages: 1, micro_batches: 1,/& schedule: gpipe, remat: except_last,/' \
  "$srcdir/models/fashion-mlp.yaml" >"$tmp/mlp.yaml"
mlp=$tmp/mlp.yaml
fast=(--data synthetic --steps 1 --batch-size 8 --threads 1 --quiet)

# the "remat" of gpipe-partition --json, or nothing
remat_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["remat"])' "$1" 2>/dev/null; }

# ---- the new names
sed 's/remat: except_last/remat: never/' "$mlp" >"$tmp/new.yaml"
if "$part" "$tmp/new.yaml" --stages 2 --json >"$tmp/out" 2>"$tmp/err" &&
   [ "$(remat_of "$tmp/out")" = never ] && [ ! -s "$tmp/err" ]; then ok
else bad "pipeline.remat: never: $(cat "$tmp/out" "$tmp/err")"; fi
if "$part" "$mlp" --stages 2 --remat always --json >"$tmp/out" 2>"$tmp/err" &&
   [ "$(remat_of "$tmp/out")" = always ] && [ ! -s "$tmp/err" ]; then ok
else bad "--remat always: $(cat "$tmp/out" "$tmp/err")"; fi
if "$part" "$mlp" --stages 2 --batch-size 8 --remat always -o "$tmp/plan.yaml" >/dev/null 2>"$tmp/err" &&
   grep -qx "remat: always" "$tmp/plan.yaml" && ! grep -q "checkpoint" "$tmp/plan.yaml"; then ok
else bad "a written plan says remat:: $(cat "$tmp/plan.yaml" "$tmp/err")"; fi
if "$train" "$mlp" "${fast[@]}" --partition "$tmp/plan.yaml" >/dev/null 2>"$tmp/err" &&
   ! grep -q "note:" "$tmp/err"; then ok
else bad "gpipe-train --partition with remat:: $(cat "$tmp/err")"; fi
"$part" --help | grep -q -- "--remat auto|always|except_last|never" && ok || bad "--help names --remat"
"$part" "$mlp" --stages 2 --remat sometimes >/dev/null 2>"$tmp/err"
[ $? = 2 ] && grep -q "^gpipe-partition: --remat: unknown value 'sometimes'" "$tmp/err" && ok ||
  bad "--remat sometimes: $(cat "$tmp/err")"

# ---- the old flag: read as --remat, with the note, in the three programs
if "$part" "$mlp" --stages 2 --checkpoint always --json >"$tmp/out" 2>"$tmp/err" &&
   [ "$(remat_of "$tmp/out")" = always ] &&
   [ "$(cat "$tmp/err")" = "gpipe-partition: note: --checkpoint is now --remat" ]; then ok
else bad "gpipe-partition --checkpoint always: $(cat "$tmp/out" "$tmp/err")"; fi
if "$part" "$mlp" --stages 2 --checkpoint=never --json >"$tmp/out" 2>"$tmp/err" &&
   [ "$(remat_of "$tmp/out")" = never ] && grep -q "note: --checkpoint is now --remat" "$tmp/err"
then ok; else bad "gpipe-partition --checkpoint=never: $(cat "$tmp/out" "$tmp/err")"; fi
if "$train" "$mlp" "${fast[@]}" --stages 2 --micro-batches 2 --checkpoint never \
     >/dev/null 2>"$tmp/err" && grep -qx "gpipe-train: note: --checkpoint is now --remat" "$tmp/err"
then ok; else bad "gpipe-train --checkpoint never: $(cat "$tmp/err")"; fi
if "$bench" "$mlp" --stages 2 --micro-batches 2 --checkpoint always,never --batch-size 8 \
     --steps 1 --warmup 0 --threads 1 --json --quiet >"$tmp/out" 2>"$tmp/err" &&
   grep -qx "gpipe-bench: note: --checkpoint is now --remat" "$tmp/err" &&
   python3 - "$tmp/out" <<'PY'; then ok; else bad "gpipe-bench --checkpoint always,never: $(cat "$tmp/out" "$tmp/err")"; fi
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
asked = {r["remat"] for r in runs if r["stages"] == 2 and r["micro_batches"] == 2}
assert asked == {"always", "never"}, runs
PY
# both names: one value given twice
"$part" "$mlp" --stages 2 --checkpoint always --remat never >/dev/null 2>"$tmp/err"
[ $? = 2 ] && grep -q "gpipe-partition: --remat is given twice ('always', then 'never')" "$tmp/err" &&
  ok || bad "--checkpoint and --remat: $(cat "$tmp/err")"
# the files' flags are not the old name
"$train" "$mlp" "${fast[@]}" --checkpoint-dir "$tmp/run" >/dev/null 2>"$tmp/err" &&
  [ -f "$tmp/run/checkpoint.safetensors" ] && ! grep -q "note:" "$tmp/err" && ok ||
  bad "--checkpoint-dir: $(cat "$tmp/err")"

# ---- a model file with the old key: read, with a note naming where
sed 's/remat: except_last/checkpoint: never/' "$mlp" >"$tmp/old.yaml"
line=$(grep -n "checkpoint: never" "$tmp/old.yaml" | cut -d: -f1)
if "$part" "$tmp/old.yaml" --stages 2 --json >"$tmp/out" 2>"$tmp/err" &&
   [ "$(remat_of "$tmp/out")" = never ] &&
   grep -qx "gpipe-partition: note: $tmp/old.yaml:$line:[0-9]*: pipeline.checkpoint is now pipeline.remat" "$tmp/err"
then ok; else bad "model file with checkpoint:: $(cat "$tmp/out" "$tmp/err")"; fi
if "$train" "$tmp/old.yaml" "${fast[@]}" >/dev/null 2>"$tmp/err" &&
   grep -q "^gpipe-train: note: .*pipeline.checkpoint is now pipeline.remat" "$tmp/err"; then ok
else bad "gpipe-train on a model file with checkpoint:: $(cat "$tmp/err")"; fi
if "$bench" "$tmp/old.yaml" --stages 1 --micro-batches 1 --batch-size 8 --steps 1 --warmup 0 \
     --threads 1 --json --quiet >"$tmp/out" 2>"$tmp/err" &&
   grep -q "^gpipe-bench: note: .*pipeline.checkpoint is now pipeline.remat" "$tmp/err" &&
   python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["runs"]; assert r[0]["remat"] == "never", r' "$tmp/out"
then ok; else bad "gpipe-bench on a model file with checkpoint:: $(cat "$tmp/out" "$tmp/err")"; fi
# --set with the old key is the old key too: it replaces an old key's value, and clashes with
# a new one's
if "$part" "$tmp/old.yaml" --stages 2 --set pipeline.checkpoint=always --json >"$tmp/out" 2>"$tmp/err" &&
   [ "$(remat_of "$tmp/out")" = always ] && grep -q "pipeline.checkpoint is now pipeline.remat" "$tmp/err"
then ok; else bad "--set pipeline.checkpoint=always: $(cat "$tmp/out" "$tmp/err")"; fi
"$part" "$mlp" --stages 2 --set pipeline.checkpoint=always >/dev/null 2>"$tmp/err"
[ $? != 0 ] && grep -q "checkpoint: is the old name of remat:.*(set by --set pipeline.checkpoint=always)" "$tmp/err" &&
  ok || bad "--set pipeline.checkpoint on a file with remat:: $(cat "$tmp/err")"
# both keys: refused where the old one is
sed 's/remat: except_last/remat: never, checkpoint: never/' "$mlp" >"$tmp/both.yaml"
"$part" "$tmp/both.yaml" --stages 2 >/dev/null 2>"$tmp/err"
[ $? != 0 ] && grep -q "^gpipe-partition: $tmp/both.yaml:$line:[0-9]*: checkpoint: is the old name of remat:" "$tmp/err" &&
  ok || bad "model file with both keys: $(cat "$tmp/err")"

# ---- a plan with the old key: read, with a note naming where
sed 's/^remat: always/checkpoint: never/' "$tmp/plan.yaml" >"$tmp/old-plan.yaml"
pline=$(grep -n "^checkpoint: never" "$tmp/old-plan.yaml" | cut -d: -f1)
if [ -n "$pline" ] &&
   "$train" "$mlp" "${fast[@]}" --partition "$tmp/old-plan.yaml" >/dev/null 2>"$tmp/err" &&
   grep -qx "gpipe-train: note: $tmp/old-plan.yaml:$pline:13: checkpoint: is now remat:" "$tmp/err"
then ok; else bad "gpipe-train, plan with checkpoint:: $(cat "$tmp/err")"; fi
if "$bench" "$mlp" --partition "$tmp/old-plan.yaml" --batch-size 8 --steps 1 --warmup 0 \
     --threads 1 --json --quiet >"$tmp/out" 2>"$tmp/err" &&
   grep -qx "gpipe-bench: note: $tmp/old-plan.yaml:$pline:13: checkpoint: is now remat:" "$tmp/err" &&
   python3 -c 'import json,sys; r=[x for x in json.load(open(sys.argv[1]))["runs"] if x["stages"] == 2 and not x["baseline"]]; assert r and r[0]["remat"] == "never", r' "$tmp/out"
then ok; else bad "gpipe-bench, plan with checkpoint:: $(cat "$tmp/out" "$tmp/err")"; fi
sed 's/^remat: always/remat: always\ncheckpoint: never/' "$tmp/plan.yaml" >"$tmp/both-plan.yaml"
"$train" "$mlp" "${fast[@]}" --partition "$tmp/both-plan.yaml" >/dev/null 2>"$tmp/err"
[ $? != 0 ] && grep -q "^gpipe-train: $tmp/both-plan.yaml:[0-9]*:13: checkpoint: is the old name of remat:" "$tmp/err" &&
  ok || bad "plan with both keys: $(cat "$tmp/err")"

echo "remat names: $passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
