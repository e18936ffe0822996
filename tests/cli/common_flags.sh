#!/usr/bin/env bash
# The flags the three programs share are read by one module (cli/common.c): the same mistake
# gets the same one line, after the program's name, from gpipe-train, gpipe-partition and
# gpipe-bench, and exit 2.
set -u
train=$1; part=$2; bench=$3; srcdir=$4
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { echo "FAIL: $*"; failed=$((failed+1)); }
mlp=$srcdir/models/fashion-mlp.yaml

# same MESSAGE ARGS...: each program exits 2 with exactly "PROG: MESSAGE" on stderr
same() {
  local msg=$1 p name; shift
  for p in "$train" "$part" "$bench"; do
    name=$(basename "$p")
    local data=(--data synthetic) # gpipe-partition reads no data
    [ "$p" = "$part" ] && data=()
    "$p" "$mlp" "${data[@]}" "$@" >/dev/null 2>"$tmp/err"
    local rc=$?
    if [ "$rc" = 2 ] && [ "$(cat "$tmp/err")" = "$name: $msg" ]; then ok
    else bad "$name ${1:0:40}...: exit $rc, '$(cat "$tmp/err")', expected '$name: $msg'"; fi
  done
}

same "--schedule: unknown value 'gpipee'; did you mean 'gpipe'? (expected one of gpipe, 1f1b, zb-h1, zb-h2, interleaved, auto)" \
  --schedule gpipee
same "--remat: unknown value 'alwys'; did you mean 'always'? (expected one of always, except_last, never, auto)" \
  --remat alwys
same "--devices: expected names like cpu or cuda:0 separated by commas, got 'cpu,'" \
  --stages 2 --devices cpu,
same "--stages 9: model fashion-mlp has 7 units, so K must be 1..7" --stages 9

# --set: at most GP_CLI_MAX_SETS (256) values, refused in one line past it; 256 are taken
sets=()
for i in $(seq 1 257); do sets+=(--set "train.seed=$i"); done
same "--set: given 257 times; one run takes at most 256" "${sets[@]}"
if "$part" "$mlp" --stages 2 "${sets[@]:2}" >/dev/null 2>"$tmp/err"; then ok
else bad "256 --set values: $(cat "$tmp/err")"; fi

# gpipe-train's --balance reads its list as gpipe-bench reads its lists
for b in +2,5 ' 2,5' 2,5, 2,,5 2,x; do
  "$train" "$mlp" --data synthetic --stages 2 --balance "$b" >/dev/null 2>"$tmp/err"
  [ $? = 2 ] && [ "$(cat "$tmp/err")" = "gpipe-train: --balance: expected integers >= 1 separated by commas, got '$b'" ] &&
    ok || bad "--balance '$b': $(cat "$tmp/err")"
done
"$bench" "$mlp" --micro-batches 2,x >/dev/null 2>"$tmp/err"
[ $? = 2 ] && [ "$(cat "$tmp/err")" = "gpipe-bench: --micro-batches: expected integers >= 1 separated by commas, got '2,x'" ] &&
  ok || bad "--micro-batches 2,x: $(cat "$tmp/err")"

echo "common flags: $passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
