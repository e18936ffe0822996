#!/usr/bin/env bash
# gpipe-train --save-shard-size on real Fashion-MNIST (a slice): a tiny shard size makes --save
# and checkpoints shards plus a Hugging Face-style index (checked with Python's json); --load
# reads the index; a run resumed from a sharded checkpoint, from a flat optimizer-state
# checkpoint of before sharding, and from a folder with a torn write (shards of a later step, no
# index) or killed (SIGKILL) at any moment saves the uninterrupted run's weights bit for bit;
# bad indexes fail in one line.
# Skips (77) without the data.
set -u
train=$1; model=$2
data=/usr/share/datasets/fashion-mnist
[ -f $data/train-images-idx3-ubyte.gz ] || { echo "no $data: skipped"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
common=(--quiet --batch-size 32 --threads 1 --set data.train_limit=640 --set data.test_limit=256
        --set train.log_every=5 --set train.optimizer.lr=0.02)
sz=(--save-shard-size 100K)
fail() { echo "FAIL: $*"; exit 1; }
mkdir "$tmp/full" "$tmp/resumed" "$tmp/torn" "$tmp/fromflat"
# same DIR: DIR/w.safetensors's files are $tmp/full's, byte for byte
same() {
  [ -f "$1/w.safetensors.index.json" ] || fail "$1: no index"
  for f in "$tmp"/full/*; do
    [ "$(sha256sum <"$f")" = "$(sha256sum <"$1/${f##*/}")" ] || fail "$1/${f##*/} differs from the uninterrupted run's"
  done
}
one_line() { # one_line RC PATTERN: the last command exited RC with one line matching PATTERN
  [ "$rc" = "$1" ] && [ "$(wc -l <"$tmp/err")" = 1 ] && grep -qE -- "$2" "$tmp/err" ||
    fail "wanted exit $1 and one line like '$2', got exit $rc: $(cat "$tmp/err")"
}

"$train" "$model" "${common[@]}" "${sz[@]}" --steps 24 --save "$tmp/full/w.safetensors" \
  >"$tmp/full.out" 2>"$tmp/err" || fail "the 24-step run: $(cat "$tmp/err")"
[ ! -e "$tmp/full/w.safetensors" ] && [ "$(ls "$tmp"/full/w-*-of-*.safetensors | wc -l)" -ge 2 ] ||
  fail "--save with a 100K shard size: $(ls "$tmp/full")"
python3 - "$tmp/full/w.safetensors.index.json" <<'PY' || fail "the index is not Hugging Face's layout"
import json, os, struct, sys
ix = json.load(open(sys.argv[1]))
assert set(ix) == {"metadata", "weight_map"}, list(ix)
meta, wmap = ix["metadata"], ix["weight_map"]
assert all(isinstance(v, str) for k, v in meta.items() if k != "total_size"), meta
total, seen = 0, set()
for f in sorted(set(wmap.values())):
    b = open(os.path.join(os.path.dirname(sys.argv[1]), f), "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    for k, v in json.loads(b[8:8 + n]).items():
        if k == "__metadata__":
            continue
        assert wmap[k] == f and k not in seen, k
        seen.add(k)
        total += v["data_offsets"][1] - v["data_offsets"][0]
assert seen == set(wmap) and meta["total_size"] == total, (meta, total)
PY

# --load of the index (named, or found beside X.safetensors) evaluates the run's weights
want=$(sed -n 's/^final: step 24  \(test loss [0-9.]*  test accuracy [0-9.]*\)  .*/\1/p' "$tmp/full.out")
for w in w.safetensors.index.json w.safetensors; do
  "$train" "$model" "${common[@]}" --eval-only --load "$tmp/full/$w" --stages 2 >"$tmp/eval.out" 2>"$tmp/err" ||
    fail "--eval-only --load $w: $(cat "$tmp/err")"
  got=$(sed -n 's/^final: weights of .*  \(test loss [0-9.]*  test accuracy [0-9.]*\)  .*/\1/p' "$tmp/eval.out")
  [ -n "$want" ] && [ "$got" = "$want" ] || fail "--load $w: '$got', the run ended with '$want'"
done

# 12 steps with sharded checkpoints, resumed to 24: bit for bit
"$train" "$model" "${common[@]}" "${sz[@]}" --steps 12 --checkpoint-dir "$tmp/ck" >/dev/null 2>"$tmp/err" ||
  fail "the 12-step run: $(cat "$tmp/err")"
[ -f "$tmp/ck/checkpoint.safetensors.index.json" ] && [ ! -e "$tmp/ck/checkpoint.safetensors" ] &&
  [ "$(ls "$tmp"/ck/checkpoint-s12-p0-*.safetensors | wc -l)" -ge 2 ] || fail "no sharded checkpoint: $(ls "$tmp/ck")"
cp -r "$tmp/ck" "$tmp/ck12"
"$train" "$model" "${common[@]}" "${sz[@]}" --steps 24 --checkpoint-dir "$tmp/ck" --resume \
  --save "$tmp/resumed/w.safetensors" >/dev/null 2>"$tmp/err" || fail "the resumed run: $(cat "$tmp/err")"
same "$tmp/resumed"
ls "$tmp"/ck/checkpoint-s12-* >/dev/null 2>&1 && fail "step 12's shards outlived step 24's commit"

# a torn write: step 24's shards beside step 12's index (a kill before the commit)
cp "$tmp"/ck/checkpoint-s24-* "$tmp/ck12/"
"$train" "$model" "${common[@]}" "${sz[@]}" --steps 24 --checkpoint-dir "$tmp/ck12" --resume \
  --save "$tmp/torn/w.safetensors" >"$tmp/torn.out" 2>"$tmp/err" || fail "resume after a torn write: $(cat "$tmp/err")"
same "$tmp/torn"

# SIGKILL at five moments of a run that checkpoints every step (a kill inside a write leaves
# shards or temporary files without a commit): resuming, or starting afresh where nothing was
# committed yet, still saves the uninterrupted run's files
for delay in 0.25 0.4 0.55 0.7 0.85; do
  d=$tmp/kill-$delay
  mkdir -p "$d/out"
  "$train" "$model" "${common[@]}" "${sz[@]}" --steps 24 --checkpoint-dir "$d/ck" \
    --checkpoint-every 1 >/dev/null 2>&1 &
  pid=$!
  sleep $delay
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
  again=()
  [ -e "$d/ck/checkpoint.safetensors.index.json" ] && again=(--resume)
  "$train" "$model" "${common[@]}" "${sz[@]}" --steps 24 --checkpoint-dir "$d/ck" "${again[@]}" \
    --save "$d/out/w.safetensors" >/dev/null 2>"$tmp/err" || fail "after a kill at $delay s: $(cat "$tmp/err")"
  same "$d/out"
done

# a checkpoint of before sharding: one file, optimizer state as one flat tensor per slot
"$train" "$model" "${common[@]}" --steps 12 --checkpoint-dir "$tmp/single" >/dev/null 2>"$tmp/err" || fail "12 steps: $(cat "$tmp/err")"
mkdir "$tmp/flat"
python3 - "$tmp/single/checkpoint.safetensors" "$tmp/flat/checkpoint.safetensors" <<'PY' || fail "flattening"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h, data = json.loads(b[8:8 + n]), b[8 + n:]
out, blobs, flat = {"__metadata__": h.pop("__metadata__")}, [], {}
for k, v in h.items():  # file order: the slots' parameters in node order
    t = data[v["data_offsets"][0]:v["data_offsets"][1]]
    if k.startswith("optim."):
        flat.setdefault(k.split(".")[1], []).append(t)
    else:
        out[k] = dict(v)
        blobs.append((k, t))
assert flat, "no optimizer state"
for s, ts in flat.items():
    t = b"".join(ts)
    out["optim." + s] = {"dtype": "F32", "shape": [len(t) // 4]}
    blobs.append(("optim." + s, t))
off = 0
for k, t in blobs:
    out[k]["data_offsets"] = [off, off + len(t)]
    off += len(t)
j = json.dumps(out).encode()
j += b" " * (-len(j) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(j)) + j + b"".join(t for _, t in blobs))
PY
"$train" "$model" "${common[@]}" "${sz[@]}" --steps 24 --checkpoint-dir "$tmp/flat" --resume \
  --save "$tmp/fromflat/w.safetensors" >/dev/null 2>"$tmp/err" || fail "resume from a flat checkpoint: $(cat "$tmp/err")"
same "$tmp/fromflat"

# bad indexes: one line naming what is wrong, exit 1 (resume and --load alike)
bad() { # bad NAME PATTERN: $tmp/NAME is ck12 with the damage done before the call
  "$train" "$model" "${common[@]}" --steps 30 --checkpoint-dir "$tmp/$1" --resume 2>"$tmp/err"
  rc=$?; one_line 1 "$2"
  "$train" "$model" "${common[@]}" --eval-only --load "$tmp/$1/checkpoint.safetensors" 2>"$tmp/err"
  rc=$?; one_line 1 "$2"
}
for d in notjson missing absent; do cp -r "$tmp/ck" "$tmp/$d"; done
echo '{"weight_map": {' >"$tmp/notjson/checkpoint.safetensors.index.json"
bad notjson "checkpoint.safetensors.index.json: JSON at byte"
rm "$tmp"/missing/checkpoint-s24-p0-00002-*
bad missing "names the shard 'checkpoint-s24-p0-00002-of-[0-9]+.safetensors' \(for '.*'\), which is missing"
sed -i '0,/-00001-of-/s//-00002-of-/' "$tmp/absent/checkpoint.safetensors.index.json"
bad absent "weight_map puts '.*' in 'checkpoint-s24-p0-00002-of-[0-9]+.safetensors', which has no such tensor"
"$train" "$model" "${common[@]}" --steps 2 --save-shard-size 12Q 2>"$tmp/err"
rc=$?; one_line 2 "--save-shard-size: cannot read '12Q' as a size"
echo "1 passed, 0 failed"
