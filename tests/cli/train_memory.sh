#!/usr/bin/env bash
# gpipe-train --memory-limit and the peak memory it prints: bad sizes and a limit too small
# for the model are one line on stderr and a non-zero exit; the printed peak is what the limit
# is held against (the run passes at exactly that limit and fails 64 bytes below it), lies
# between the parameter and optimizer bytes and that plus a bound on the activations, and
# grows with the batch.
set -u
train=$1; srcdir=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
mlp=$srcdir/models/fashion-mlp.yaml
run=(--data synthetic --steps 2 --threads 1 --quiet)
# fashion-mlp: 784*256+256 + 256*128+128 + 128*10+10 parameters; AdamW keeps weights,
# gradients and two moments: 16 bytes each.
params=$((784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10))
fixed=$((16 * params))

# expect CODE PATTERN ARGS...: exit code, exactly one line on stderr matching PATTERN
expect() {
  local code=$1 pat=$2; shift 2
  timeout 60 "$train" "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  if [ "$rc" = "$code" ] && [ "$(wc -l <"$tmp/err")" = 1 ] && grep -qE -- "$pat" "$tmp/err"; then
    ok
  else
    bad "gpipe-train $* -> exit $rc (want $code), stderr: $(cat "$tmp/err")"
  fi
}
expect 2 "^gpipe-train: --memory-limit: cannot read '2x' as a size" "$mlp" "${run[@]}" --memory-limit 2x
expect 2 "--memory-limit: cannot read '0'" "$mlp" "${run[@]}" --memory-limit 0
expect 2 "--memory-limit: cannot read '-5MiB'" "$mlp" "${run[@]}" --memory-limit -5MiB
expect 2 "--memory-limit: cannot read '1.5 GB'" "$mlp" "${run[@]}" --memory-limit "1.5 GB"
# too small for the parameters (made before the first step) ...
expect 1 "memory limit of 1048576 bytes.*; more --stages, --remat always or a smaller --batch-size" \
  "$mlp" "${run[@]}" --memory-limit 1MiB
# ... and for the activations of the first step: the stage and the micro-batch are named
expect 1 "stage 0, micro-batch 0: .*memory limit of 4194304 bytes" "$mlp" "${run[@]}" \
  --memory-limit 4MiB --remat except_last
expect 1 "stage 1, micro-batch 0: .*memory limit of 4194304 bytes" "$mlp" "${run[@]}" \
  --memory-limit 4MiB --stages 2 --balance 1,6 --schedule gpipe --remat except_last

# peak BATCH [ARGS...]: the bytes of the "memory: peak" line (empty when it fails)
peak() {
  local b=$1; shift
  timeout 60 "$train" "$mlp" "${run[@]}" --batch-size "$b" "$@" >"$tmp/out" 2>"$tmp/err" &&
    sed -n 's/^memory: peak [0-9.]* MiB (\([0-9]*\) bytes).*/\1/p' "$tmp/out"
}
p128=$(peak 128 --memory-limit 1.5GB)
grep -Eq "^memory: peak .* bytes\); limit 1430.51 MiB per stage(; remat auto: .*)?$" "$tmp/out" ||
  bad "no limit on the memory line: $(cat "$tmp/out")"
if [ -z "$p128" ]; then
  bad "no memory line: $(cat "$tmp/out" "$tmp/err")"
else
  ok
  # activations of a batch of 128 (input 784, hidden 256 and 128, 10 logits, their gradients
  # and the dropout mask) are well under 2 MB; arena chunks are at least 1 MiB, two arenas
  [ "$p128" -ge "$fixed" ] && [ "$p128" -le $((fixed + 8 * 1048576)) ] && ok ||
    bad "peak $p128 bytes is not within [$fixed, $fixed + 8 MiB]"
  [ "$(peak 128 --memory-limit "$p128")" = "$p128" ] && ok ||
    bad "does not train at a limit of its own peak ($p128 bytes): $(cat "$tmp/err")"
  expect 1 "memory limit of $((p128 - 64)) bytes" "$mlp" "${run[@]}" --memory-limit $((p128 - 64))
  # 896 more samples of 784 floats each are 2.8 MB of input alone
  p1024=$(peak 1024)
  [ -n "$p1024" ] && [ "$p1024" -ge $((p128 + 896 * 784 * 4)) ] && ok ||
    bad "batch 1024 peak ${p1024:-none} is not 2.8 MB above batch 128's $p128"
fi
# two stages: the line lists both, and they add up to the total
p2=$(peak 128 --stages 2 --balance 2,5)
line=$(grep '^memory:' "$tmp/out")
sum=$(sed -n 's/.*the sum of 2 stages: \([0-9.]*\), \([0-9.]*\) MiB.*/\1 \2/p' <<<"$line" |
  awk '{ printf "%.0f", ($1 + $2) * 1048576 }')
if [ -n "$p2" ] && [ -n "$sum" ] && [ $((sum - p2)) -le 10486 ] && [ $((p2 - sum)) -le 10486 ]; then
  ok
else
  bad "two stages: '$line' (sum of the stages ${sum:-?} vs $p2)"
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
