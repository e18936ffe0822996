#!/usr/bin/env bash
# gpipe-partition --precision: bf16-mixed's estimate keeps activations in 16 bits (each
# stage's memory below fp32's, the units' activation bytes at least half fp32's), bf16 estimates
# as fp32, GP_BF16_STORE=0 as fp32; a bad value is one line and exit 2.
set -u
part=$1; srcdir=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
model=$srcdir/models/transformer-lm.yaml
args=(--stages 2 --micro-batches 4 --schedule gpipe --remat never --json)
for p in fp32 bf16 bf16-mixed; do
  "$part" "$model" "${args[@]}" --precision $p >"$tmp/$p.json" 2>"$tmp/err" ||
    fail "--precision $p: $(cat "$tmp/err")"
done
GP_BF16_STORE=0 "$part" "$model" "${args[@]}" --precision bf16-mixed >"$tmp/off.json" ||
  fail "GP_BF16_STORE=0"
python3 - "$tmp" <<'PY' || fail "the estimates"
import json, sys
d = {p: json.load(open(f"{sys.argv[1]}/{p}.json")) for p in ("fp32", "bf16", "bf16-mixed", "off")}
mem = {p: [s["memory_bytes"] for s in d[p]["partition"]] for p in d}
act = {p: [u["activation_bytes"] for u in d[p]["units"]] for p in d}
assert mem["bf16"] == mem["fp32"] and mem["off"] == mem["fp32"], mem
assert all(b < a for a, b in zip(mem["fp32"], mem["bf16-mixed"])), mem
assert all(a / 2 <= b <= a for a, b in zip(act["fp32"], act["bf16-mixed"])), act
assert sum(act["bf16-mixed"]) < sum(act["fp32"]), act
print("memory per stage, MiB: fp32 %s, bf16-mixed %s" % (
    [round(m / 2**20, 1) for m in mem["fp32"]], [round(m / 2**20, 1) for m in mem["bf16-mixed"]]))
PY
"$part" "$model" --precision fp16 >/dev/null 2>"$tmp/err"
rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
  grep -q -- "--precision: unknown value 'fp16' (fp32, bf16 or bf16-mixed)" "$tmp/err" ||
  fail "--precision fp16 -> exit $rc: $(cat "$tmp/err")"
echo "ok: gpipe-partition --precision bf16-mixed estimates 16-bit activations"
