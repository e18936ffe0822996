#!/usr/bin/env bash
# Every model file in models/ loads and partitions into one stage (gpipe-partition --stages 1:
# shapes, blocks, ties and sections checked, nothing trained), and models/gpt2-small.yaml has
# GPT-2 small's 124,475,904 parameters with its 50304 vocabulary (the tied matrix once),
# nanoGPT's count: too big to train in a test, so its shapes are held here.
set -u
part=$1; srcdir=$2
failed=0 n=0
bad() { echo "FAIL: $*"; failed=$((failed+1)); }
for f in "$srcdir"/models/*.yaml; do
  n=$((n+1))
  if out=$("$part" "$f" --stages 1 --json 2>&1); then
    p=$(printf '%s' "$out" |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["params"])' 2>&1)
    echo "ok   $(basename "$f"): $p parameters"
  else
    bad "$(basename "$f"): $out"
    continue
  fi
  case $(basename "$f") in
    gpt2-small.yaml) [ "$p" = 124475904 ] || bad "gpt2-small: $p parameters, not 124475904" ;;
  esac
done
[ "$n" -ge 9 ] || bad "only $n model files under $srcdir/models"
[ -f "$srcdir/models/gpt2-small.yaml" ] || bad "no models/gpt2-small.yaml"
[ "$failed" = 0 ] || exit 1
