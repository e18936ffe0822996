#!/usr/bin/env bash
# The fusion pass as a user sees it (core/spec/fuse.c): gpipe-partition's model line says how
# many layer pairs run as one node (transformer-nmt: its post-norm add + layernorm pairs and
# linear + relu pairs), GP_FUSE=0 says none, and the per-unit FLOPs, parameters, activation
# and output bytes are the unfused graph's (input-gradient bytes may grow by the add + norm
# pairs' second gradient buffer, docs/cuda.md#fusion).
set -u
part=$1; srcdir=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
nmt=$srcdir/models/transformer-nmt.yaml
fail() { echo "FAIL: $*"; exit 1; }
"$part" "$nmt" --stages 2 --by flops >"$tmp/ft" 2>"$tmp/err" || fail "fused: $(cat "$tmp/err")"
GP_FUSE=0 "$part" "$nmt" --stages 2 --by flops >"$tmp/ut" 2>"$tmp/err" ||
  fail "GP_FUSE=0: $(cat "$tmp/err")"
grep -Eq "^model transformer-nmt: [0-9]+ units \(21 fused\)," "$tmp/ft" ||
  fail "no '(21 fused)' on the model line: $(head -3 "$tmp/ft")"
grep -q "fused" "$tmp/ut" && fail "GP_FUSE=0 still fuses: $(head -3 "$tmp/ut")"
"$part" "$nmt" --stages 2 --by flops --json >"$tmp/fj" 2>"$tmp/err" &&
  GP_FUSE=0 "$part" "$nmt" --stages 2 --by flops --json >"$tmp/uj" 2>>"$tmp/err" ||
  fail "--json: $(cat "$tmp/err")"
python3 - "$tmp/fj" "$tmp/uj" <<'PY' || exit 1
import json, sys
f, u = (json.load(open(a)) for a in sys.argv[1:3])
assert len(f["units"]) == len(u["units"]), "unit counts differ"
for a, b in zip(f["units"], u["units"]):
    for k in ("flops_fwd", "flops_bwd", "params", "activation_bytes", "output_bytes"):
        assert a[k] == b[k], f"FAIL: unit {a['name']}: {k} fused {a[k]}, unfused {b[k]}"
    assert a["gradient_bytes"] >= b["gradient_bytes"], a["name"]
print("ok: 21 fused; FLOPs, parameters, activation and output bytes unit by unit as unfused")
PY
