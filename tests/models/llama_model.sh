#!/usr/bin/env bash
# models/llama.yaml as written: it loads at about transformer-lm's size (6.998M parameters
# against 7.280M), gpipe-partition splits it over 3 stages, and 2 steps on synthetic data give
# the same losses at K = 1 and at K = 3, M = 4 (as printed, 4 decimals).
set -u
train=$1; part=$2; srcdir=$3
model=$srcdir/models/llama.yaml
failed=0
bad() { echo "FAIL: $*"; failed=$((failed+1)); }

out=$("$part" "$model" --stages 3 2>&1) || bad "gpipe-partition --stages 3: $out"
head=$(printf '%s\n' "$out" | head -1)
case $head in
  "model llama: 7 units, 6.998M parameters; 3 stages"*) echo "ok   $head" ;;
  *) bad "partition: $head" ;;
esac
nstages=$(printf '%s\n' "$out" | grep -cE '^ +[0-2] ')
[ "$nstages" = 3 ] || bad "partition: $nstages stage lines, not 3"

losses() {
  "$train" "$model" --data synthetic --steps 2 --batch-size 8 --stages "$1" \
    --micro-batches "$2" --set train.log_every=1 2>&1 | grep -oE '^step [0-9]+/2 .* loss [0-9.]+'
}
a=$(losses 1 1) || bad "K=1 M=1 did not train"
b=$(losses 3 4) || bad "K=3 M=4 did not train"
if [ -n "$a" ] && [ "$(printf '%s\n' "$a" | wc -l)" = 2 ] && [ "$a" = "$b" ]; then
  echo "ok   K=1 and K=3 M=4: $(printf '%s' "$a" | tr '\n' ';')"
else
  bad "losses differ: K=1 M=1 '$a', K=3 M=4 '$b'"
fi
[ "$failed" = 0 ] || exit 1
