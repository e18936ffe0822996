#!/usr/bin/env bash
# The include and size rules (scripts/check-includes.py) on the tree, and the checker itself
# on a tree that breaks each rule once: it must name every breach and fail.
set -u
check=$1 root=$2
fails=0
python3 "$check" "$root" || fails=$((fails + 1))
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/core/exec" "$tmp/layers" "$tmp/data" "$tmp/cli"
printf '#include "data/loader.h"\n' > "$tmp/core/exec/a.c"
printf '#include "cli/args.h"\n' > "$tmp/layers/b.c"
printf '#include "layers/layers.h"\n' > "$tmp/data/c.h"
printf '#include "core/status.h"\n#include "data/x.h"\n' > "$tmp/cli/ok.c"
for i in $(seq 601); do echo "int x$i;"; done > "$tmp/cli/long.c"
out=$(python3 "$check" "$tmp"); rc=$?
for want in "core/exec/a.c:1: core/ includes data/loader.h" "layers/b.c:1: layers/ includes cli/args.h" \
            "data/c.h:1: data/ includes layers/layers.h" "cli/long.c: 601 lines, over 600"; do
  if ! grep -qF "$want" <<< "$out"; then echo "FAIL: the checker missed: $want"; fails=$((fails + 1)); fi
done
if grep -q "cli/ok.c" <<< "$out"; then echo "FAIL: cli/ may include anything"; fails=$((fails + 1)); fi
[ $rc -ne 0 ] || { echo "FAIL: the checker passed a broken tree"; fails=$((fails + 1)); }
echo "$((7 - fails)) passed, $fails failed"
[ $fails -eq 0 ]
