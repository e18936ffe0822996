#!/usr/bin/env bash
# gpipe-partition end to end: the table, --json, --timeline and -o for real models; a written
# plan drives gpipe-train --partition; edited plans that no longer fit the model and bad
# requests are refused with one clear line and exit 2.
set -u
part=$1; train=$2; srcdir=$3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { echo "FAIL: $*"; failed=$((failed+1)); }
resnet=$srcdir/models/resnet56-cifar.yaml
mlp=$srcdir/models/fashion-mlp.yaml

# ---- the table: 4 stage rows whose unit ranges are contiguous, cover the 32 units, and agree
# with the count column
if "$part" "$resnet" --stages 4 --micro-batches 4 >"$tmp/table" 2>"$tmp/err"; then
  python3 - "$tmp/table" <<'PY' && ok || bad "resnet56 table: $(cat "$tmp/table")"
import re, sys
rows = []
for line in open(sys.argv[1]):
    cells = re.split(r"\s{2,}", line.strip())
    if len(cells) >= 7 and cells[0].isdigit() and re.match(r"^\d+(-\d+)? ", cells[1]):
        rows.append(cells)
assert len(rows) == 4, rows
nxt = 0
for i, c in enumerate(rows):
    assert int(c[0]) == i, c
    a, _, b = c[1].split(" ")[0].partition("-")
    a, b = int(a), int(b or a)
    assert a == nxt and b >= a, (c, nxt)
    assert int(c[2]) == b - a + 1, c
    nxt = b + 1
assert nxt == 32, nxt
assert sum(int(c[2]) for c in rows) == 32
text = open(sys.argv[1]).read()
for word in ("imbalance", "bubble", "speed-up", "resnet56-cifar", "32 units"):
    assert word in text, word
# M = 4 is few for 4 stages: the hint names M = 16 and its ideal bubble 3/19
assert ("hint        M = 4 is few for 4 stages: --micro-batches 16 (the GPipe paper's M >= 4K) "
        "brings the ideal bubble (K-1)/(M+K-1) down to 15.8%") in text, text
PY
else
  bad "resnet56 --stages 4 exited $?: $(cat "$tmp/err")"
fi

# ---- the header names the micro-batch size; uneven when M does not divide the batch (7 = 3+2+2)
head=$("$part" "$mlp" --stages 2 --batch-size 7 --micro-batches 3 2>&1 | head -1)
case $head in *"3 micro-batches of 2-3 (batch 7)"*) ok ;; *) bad "uneven header: $head" ;; esac
head=$("$part" "$mlp" --stages 2 --batch-size 8 --micro-batches 4 2>&1 | head -1)
case $head in *"4 micro-batches of 2 (batch 8)"*) ok ;; *) bad "even header: $head" ;; esac

# ---- a unit heavier than an even stage's share is named: no cut between units balances K;
# writing its block out helps only when no single layer of it is that heavy
cnn=$srcdir/models/fashion-cnn.yaml
out=$("$part" "$cnn" --stages 2 2>&1)
case $out in
  *"hint        unit 1 'block2' alone is 85.2% of the estimated FLOPs, more than an even stage's 50.0%: no cut between units balances 2 stages (nor would its 4 layers written out: 'block2.conv' alone is 84.3%)"*) ok ;;
  *) bad "fashion-cnn K=2 unit hint: $out" ;;
esac
printf '%s\n' 'name: blk' 'inputs: {image: [8, 16, 16], label: {shape: [], dtype: i32}}' \
  'blocks:' '  two:' '    params: {c: ~}' '    layers:' \
  '      - {type: conv2d, out_channels: $c, kernel: 3, padding: 1, name: a}' \
  '      - {type: relu}' '      - {type: conv2d, out_channels: $c, kernel: 3, padding: 1, name: b}' \
  'layers:' '  - {type: conv2d, out_channels: 32, kernel: 1, name: stem}' \
  '  - {block: two, c: 32, name: body}' '  - {type: flatten}' \
  '  - {type: linear, out_features: 10, name: head}' 'loss: {type: softmax_cross_entropy}' \
  'train: {batch_size: 32}' >"$tmp/blk.yaml"
out=$("$part" "$tmp/blk.yaml" --stages 2 --micro-batches 8 2>&1)
case $out in
  *"unit 1 'body' alone is "*"no cut between units balances 2 stages; its 3 layers written as top-level entries of layers: are units to cut between"*) ok ;;
  *) bad "block unit hint: $out" ;;
esac
# none where the units allow an even split, or where the heavy unit fits the faster device
out=$("$part" "$resnet" --stages 4 --micro-batches 16 2>&1)
case $out in *"alone is"*) bad "resnet56 K=4 unit hint: $out" ;; *) ok ;; esac
out=$("$part" "$cnn" --stages 2 --speeds 1,10 2>&1)
case $out in *"alone is"*) bad "fashion-cnn --speeds 1,10 unit hint: $out" ;; *) ok ;; esac

# ---- --json: valid, with the keys, consistent with itself
if "$part" "$resnet" --stages 4 --micro-batches 8 --json >"$tmp/j" 2>"$tmp/err"; then
  python3 - "$tmp/j" <<'PY' && ok || bad "resnet56 --json: $(head -c 600 "$tmp/j")"
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("model", "stages", "micro_batches", "units", "partition", "imbalance", "bubble",
          "predicted_speedup"):
    assert k in d, k
assert d["model"] == "resnet56-cifar" and d["stages"] == 4 and d["micro_batches"] == 8
assert len(d["units"]) == 32
for u in d["units"]:
    for k in ("name", "flops_fwd", "flops_bwd", "params", "activation_bytes", "output_bytes"):
        assert k in u, (k, u)
assert d["units"][0]["name"] == "stem" and d["units"][-1]["name"] == "fc"
p = d["partition"]
assert len(p) == 4
nxt = 0
for s in p:
    for k in ("stage", "first_unit", "last_unit", "units", "params", "flops", "time_share",
              "memory_bytes"):
        assert k in s, (k, s)
    assert s["first_unit"] == nxt and s["units"] == s["last_unit"] - s["first_unit"] + 1
    assert s["params"] == sum(u["params"] for u in d["units"][s["first_unit"]:s["last_unit"] + 1])
    assert s["memory_bytes"] > 0
    nxt = s["last_unit"] + 1
assert nxt == 32
assert abs(sum(s["time_share"] for s in p) - 1) < 1e-9
assert sum(s["params"] for s in p) == 853018
assert 1 <= d["imbalance"] < 1.5 and 0 < d["bubble"] < 1
sp = d["predicted_speedup"]
assert sp["naive"] > 1 and sp["k1"] > 1, sp
PY
else
  bad "resnet56 --json exited $?: $(cat "$tmp/err")"
fi

# ---- --timeline: one row per stage, 100 columns of F/B/R, digits and idle dots
if "$part" "$resnet" --stages 4 --micro-batches 4 --schedule gpipe --remat except_last --timeline >"$tmp/tl" 2>"$tmp/err"; then
  rows=$(grep -cE '^ *[0-9]+ \|[FBR0-9.]{100}\|$' "$tmp/tl")
  if [ "$rows" = 4 ] && grep -q '^legend:' "$tmp/tl" && grep -qE '^ *3 \|.*R' "$tmp/tl" &&
     [ "$(grep -E '^ *0 \|' "$tmp/tl" | grep -o F | wc -l)" -ge 4 ]; then ok
  else bad "timeline: $rows rows: $(cat "$tmp/tl")"; fi
else
  bad "--timeline exited $?: $(cat "$tmp/err")"
fi

# ---- --timeline --json: a stage's actions in time order, none overlapping; a re-materializing
# backward's recompute comes before it (a gap between them is the wait for the gradient)
if "$part" "$resnet" --stages 4 --micro-batches 4 --schedule gpipe --remat except_last --timeline --json >"$tmp/tlj" 2>"$tmp/err"; then
  if python3 - "$tmp/tlj" >"$tmp/why" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
tl = d["timeline"]
assert len(tl) == 4, len(tl)
waited = 0
for s, acts in enumerate(tl):
    t = 0
    for a in acts:
        if a["kind"] == "B" and a["recompute"]:
            r0, r1 = a["recompute_start"], a["recompute_end"]
            assert t <= r0 < r1 <= a["start"], (s, a, t)
            waited += a["start"] > r1
            t = r0
        else:
            assert "recompute_start" not in a, (s, a)
        assert t <= a["start"] <= a["end"], (s, a, t)
        t = a["end"]
assert waited > 0, "no recompute ran ahead of its gradient"
PY
  then ok; else bad "timeline json: $(cat "$tmp/why")"; fi
else
  bad "--timeline --json exited $?: $(cat "$tmp/err")"
fi

# ---- -o plan, then gpipe-train --partition uses it
plan=$tmp/plan.yaml
if "$part" "$mlp" --stages 3 --micro-batches 4 --schedule 1f1b --remat always -o "$plan" \
     >"$tmp/out" 2>"$tmp/err" && [ -s "$plan" ] && ! ls "$plan".tmp* >/dev/null 2>&1; then
  ok
  bal=$(sed -n 's/^balance: \[\([0-9, ]*\)\].*/\1/p' "$plan" | tr -d ' ')
  "$train" "$mlp" --data synthetic --steps 2 --partition "$plan" >"$tmp/tout" 2>&1
  rc=$?
  if [ $rc = 0 ] && [ -n "$bal" ] && grep -q "pipeline: 3 stages of $bal units, 4 micro-batches, 1f1b schedule, re-materialization always" "$tmp/tout"; then ok
  else bad "train --partition (balance '$bal') exit $rc: $(cat "$tmp/tout")"; fi
  # a balance edited by hand is what runs
  sed 's/^balance: .*/balance: [1, 1, 5]/' "$plan" >"$tmp/p115.yaml"
  "$train" "$mlp" --data synthetic --steps 2 --partition "$tmp/p115.yaml" >"$tmp/tout" 2>&1
  if grep -q "pipeline: 3 stages of 1,1,5 units" "$tmp/tout"; then ok
  else bad "edited balance not used: $(cat "$tmp/tout")"; fi
else
  bad "-o plan: $(cat "$tmp/err")"
fi

# ---- plans that do not fit the model: one line, exit 2, located
refused() { # pattern, plan text, [extra flags]
  local pat=$1; printf '%s\n' "$2" >"$tmp/edited.yaml"; shift 2
  "$train" "$mlp" --data synthetic --steps 1 --partition "$tmp/edited.yaml" "$@" >"$tmp/o" 2>"$tmp/e"
  local rc=$?
  if [ $rc = 2 ] && [ "$(wc -l <"$tmp/e")" = 1 ] && grep -qE -- "$pat" "$tmp/e"; then ok
  else bad "plan '$pat' -> exit $rc: $(cat "$tmp/e")"; fi
}
if [ -s "$plan" ]; then
  refused "edited.yaml:[0-9]+:[0-9]+: units: the plan lists 6 units, model fashion-mlp has 7" \
    "$(sed 's/, "logits"\]/]/' "$plan")"
  refused "edited.yaml:[0-9]+:[0-9]+: balance: sums to 8 units, model fashion-mlp has 7" \
    "$(sed 's/^balance: .*/balance: [2, 2, 4]/' "$plan")"
  refused "edited.yaml:2:8: the plan is for model 'fashion-cnn', not 'fashion-mlp'" \
    "$(sed 's/^model: .*/model: fashion-cnn/' "$plan")"
  refused "edited.yaml:[0-9]+:[0-9]+: units: unit 6 is 'logitz' in the plan but 'logits' in the model" \
    "$(sed 's/"logits"\]/"logitz"]/' "$plan")"
  refused "edited.yaml:[0-9]+:1: unknown key 'stagse'; did you mean 'stages'" \
    "$(sed 's/^stages:/stagse:/' "$plan")"
  refused "edited.yaml:[0-9]+:[0-9]+: YAML syntax error" "$(sed 's/^balance: \[/balance: [[/' "$plan")"
  refused "edited.yaml:[0-9]+:1: a second YAML document starts here" \
    "$(cat "$plan"; printf -- '---\nmodel: fashion-cnn\n')" # it was ignored
  refused "--partition and --stages both set the pipeline" "$(cat "$plan")" --stages 2
  # the plan's M against the batch, located in the plan (it named the file alone); a plan
  # records the batch its M was made for: another batch is refused, naming both (it changed
  # the micro-batches' size unseen)
  refused "edited.yaml:[0-9]+:13: batch_size: the plan was made for batch 128, this run's is 32 \(" \
    "$(cat "$plan")" --batch-size 32
  refused "edited.yaml:4:16: micro_batches: 4 micro-batches cannot split this run's batch of 2$" \
    "$(sed 's/^batch_size: .*/batch_size: 2/' "$plan")" --batch-size 2
  refused "edited.yaml:4:16: micro_batches: 4 micro-batches cannot split this run's batch of 2$" \
    "$(sed '/^batch_size:/d' "$plan")" --batch-size 2
  # devices mixing the CPU and CUDA: located in the plan too (it named no line)
  refused "edited.yaml:7:10: devices: 1 of the 3 stages are on CUDA devices and the others on the CPU" \
    "$(sed 's/^devices: .*/devices: [cpu, cuda:0, cpu]/' "$plan")"
  # ... and one written before plans recorded it loads, with a note
  sed '/^batch_size:/d' "$plan" >"$tmp/old.yaml"
  if "$train" "$mlp" --data synthetic --steps 1 --partition "$tmp/old.yaml" >/dev/null 2>"$tmp/e" &&
     [ "$(grep -c "old.yaml: the plan records no batch_size" "$tmp/e")" = 1 ]; then ok
  else bad "a plan without batch_size: $(cat "$tmp/e")"; fi
  # integers by the model file's rule (strtol took "+3" and " 3"), and a null said to be one
  # (it was "expected an integer, got '~'")
  refused "edited.yaml:3:9: stages: expected an integer, got '\+3'$" "$(sed 's/^stages: 3/stages: +3/' "$plan")"
  refused "edited.yaml:3:9: stages: expected an integer, got ' 3'$" "$(sed 's/^stages: 3/stages: " 3"/' "$plan")"
  refused "edited.yaml:3:9: stages: expected an integer, got '0x3'$" "$(sed 's/^stages: 3/stages: 0x3/' "$plan")"
  refused "edited.yaml:3:9: stages: expected 1\.\.1024, got 99999999999999999999$" \
    "$(sed 's/^stages: 3/stages: 99999999999999999999/' "$plan")"
  refused "edited.yaml:3:9: stages: expected an integer, got nothing \(null\)$" "$(sed 's/^stages: 3/stages: ~/' "$plan")"
  refused "edited.yaml:3:8: stages: expected an integer, got nothing \(null\)$" "$(sed 's/^stages: 3/stages:/' "$plan")"
  refused "edited.yaml:4:16: micro_batches: expected an integer, got nothing \(null\)$" \
    "$(sed 's/^micro_batches: .*/micro_batches: null/' "$plan")"
  refused "edited.yaml:[0-9]+:[0-9]+: balance: expected an integer, got '\+[0-9]+'$" \
    "$(sed 's/^balance: \[\([0-9]*\), /balance: [\1, +/' "$plan")"
  refused "edited.yaml:[0-9]+:[0-9]+: balance: entry 2 is nothing \(null\)$" \
    "$(sed 's/^balance: \[\([0-9]*\), [0-9]*/balance: [\1, ~/' "$plan")"
  refused "edited.yaml:[0-9]+:[0-9]+: balance: expected a list \[a, b, \.\.\.\], got nothing \(null\)$" \
    "$(sed 's/^balance: .*/balance: ~/' "$plan")"
  refused "edited.yaml:5:11: schedule: expected a name, got nothing \(null\)$" "$(sed 's/^schedule: .*/schedule: ~/' "$plan")"
  refused "edited.yaml:2:7: model: expected a name, got nothing \(null\)$" "$(sed 's/^model: .*/model:/' "$plan")"
  refused "edited.yaml:[0-9]+:[0-9]+: devices: expected a name or a list \[a, b, \.\.\.\], got nothing \(null\)$" \
    "$(sed 's/^devices: .*/devices: ~/' "$plan")"
  refused "edited.yaml:[0-9]+:[0-9]+: units: entry 7 is nothing \(null\)$" "$(sed 's/"logits"\]/~]/' "$plan")"
  # text from the plan is shown escaped: a line break, a terminal escape or U+2028 in a value
  # made the message several lines
  clean() { python3 -c "import sys,re; t=open(sys.argv[1],'rb').read().decode('utf-8')
sys.exit(0 if t.count('\n') == 1 and not re.search('[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]', t) else 1)" "$tmp/e" &&
    ok || bad "not one clean line: $(cat -A "$tmp/e")"; }
  refused "edited.yaml:[0-9]+:11: schedule: unknown value 'gp\\\\npe'; did you mean 'gpipe'\?$" \
    "$(sed 's/^schedule: .*/schedule: "gp\\npe"/' "$plan")"; clean
  refused "edited.yaml:[0-9]+:1: unknown key 'stag\\\\x1bes'; did you mean 'stages'\?$" \
    "$(sed 's/^stages:/"stag\\ees":/' "$plan")"; clean
  refused "edited.yaml:2:8: the plan is for model 'fashion\\\\u2028mlp', not 'fashion-mlp'$" \
    "$(sed 's/^model: .*/model: "fashion\\Lmlp"/' "$plan")"; clean
  refused "edited.yaml:[0-9]+:[0-9]+: units: unit 6 is 'logits\\\\u0085\\\\r' in the plan but 'logits' in the model$" \
    "$(sed 's/"logits"\]/"logits\\N\\r"]/' "$plan")"; clean
  refused "edited.yaml:[0-9]+:[0-9]+: devices: unknown device 'cp\\\\u009bu' \(expected cpu, cuda or cuda:N\)$" \
    "$(sed 's/^devices: .*/devices: "cp\\x9bu"/' "$plan")"; clean
fi

# ---- a model name with U+2028, a C1 control or U+0085 (line breaks to YAML: they split the
# plan's comment and name lines) is refused at load, one line (test_plan_io: the writer
# escapes them still)
printf 'name: "mlp\\L\\x9b\\N: x"\n%s\n' "$(grep -v '^name:' "$mlp")" >"$tmp/odd.yaml"
"$part" "$tmp/odd.yaml" --stages 2 -o "$tmp/odd-plan.yaml" >/dev/null 2>"$tmp/err"
if [ $? = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
   grep -q "odd.yaml:1:7: name: control character U+2028 in the model's name$" "$tmp/err"
then ok; else bad "a model named with U+2028, U+009B and U+0085: $(cat "$tmp/err")"; fi

# ---- bad requests: one line, exit 2
refuse() { # pattern, flags...
  local pat=$1; shift
  "$part" "$resnet" "$@" >"$tmp/o" 2>"$tmp/e"; local rc=$?
  if [ $rc = 2 ] && [ "$(wc -l <"$tmp/e")" = 1 ] && grep -qE -- "$pat" "$tmp/e" &&
     [ ! -s "$tmp/o" ]; then ok
  else bad "$* -> exit $rc: $(cat "$tmp/e")"; fi
}
refuse "--stages: expected an integer >= 1, got '0'" --stages 0
# the GP_* settings are refused as flags are, by gp_args_parse in all three programs
GP_CPU_PIECES=0 refuse "^gpipe-partition: GP_CPU_PIECES=0: expected a whole number from 1 to 64 " \
  --stages 2
GP_PIPELINE_SPN=0 refuse "GP_PIPELINE_SPN is not a gpipe setting; did you mean GP_PIPELINE_SPIN\?" \
  --stages 2
refuse "--stages 99: model resnet56-cifar has 32 units, so K must be 1..32" --stages 99
refuse "--devices: unknown device 'gpu0'" --stages 2 --devices gpu0
refuse "devices: 1 of the 2 stages are on CUDA devices and the others on the CPU" \
  --stages 2 --devices cuda:0,cpu
refuse "--devices: unknown device 'cuda:x'" --stages 2 --devices cuda:x
# one spelling per device: a zero-padded cuda:000...01 was checked as cuda:1 and kept cut
# to 16 bytes, cuda:0000000000 (cuda:0)
refuse "--devices: unknown device 'cuda:01'" --stages 2 --devices cuda:0,cuda:01
refuse "--devices: unknown device 'cuda:00000000000000000001'" --stages 2 \
  --devices cuda:0,cuda:00000000000000000001
refuse "--memory-limit: cannot read '12XB' as a size" --stages 4 --memory-limit 12XB
refuse "--by: unknown value 'speed'" --stages 4 --by speed
refuse "--speeds: expected a speed relative to 1, from 0.001 to 1000, got 'x'" --stages 2 \
  --speeds 1,x
refuse "--speeds: .*got '1e-300'" --stages 2 --speeds 1e-300
refuse "--memory-limit: cannot read '1.5' as a size" --stages 2 --memory-limit 1.5
refuse "--memory-limit: cannot read '0x10' as a size" --stages 2 --memory-limit 0x10
refuse "--speeds: .*got '0x1'" --stages 2 --speeds 1,0x1
refuse "--speeds: .*got ' 2'" --stages 2 --speeds '1, 2'
refuse "--batch-size: at most 16777216, got '16777217'" --batch-size 16777217
# an empty item is named as one (it said "expected at most 64 values")
refuse "--memory-limit: an empty value in '1GiB,,2GiB'" --stages 3 --memory-limit 1GiB,,2GiB
refuse "--speeds: an empty value in '1,'" --stages 2 --speeds 1,
refuse "--devices: expected names like cpu or cuda:0 separated by commas, got ',cpu'" --stages 2 --devices ,cpu
refuse "--speeds: '1{70}' is too long" --stages 2 --speeds "$(printf '1%.0s' {1..70})"
refuse "--speeds: expected at most 1024 values" --stages 2 --speeds "$(printf '1,%.0s' {1..1024})1"
refuse "resnet56-cifar.yaml:[0-9]+:[0-9]+: micro_batches: 500 is more than batch_size 128 .*\(set by --micro-batches 500\)$" \
  --stages 2 --micro-batches 500
# ... checked with the flags standing for settings, as if written in the file
"$part" "$resnet" --stages 2 --set pipeline.micro_batches=200 --batch-size 256 >"$tmp/o" 2>"$tmp/e" &&
  grep -q "200 micro-batches" "$tmp/o" && ok || bad "--set pipeline.micro_batches=200 --batch-size 256: $(cat "$tmp/e")"
refuse "^gpipe-partition: --speeds: 2 values for 1 stage \\(" --stages 1 --speeds 1,2 # "1 stages"
# many units: one stage needs no search (it took 0.5 s at 8000 units), and above 10000 units
# the search (N^2 steps: minutes at 100000) is refused at once, saying what to give instead
python3 -c "
import sys
H = 'name: many\ninputs: {x: [4], label: {shape: [], dtype: i32}}\nlayers:\n'
sys.stdout.write(H + '  - {type: relu, repeat: 10000}\n  - {type: linear, out_features: 3}\n'
                 'loss: softmax_cross_entropy\n')" >"$tmp/many.yaml"
if timeout 10 "$part" "$tmp/many.yaml" >"$tmp/o" 2>"$tmp/e"; then ok; else bad "10001 units, K=1: $(cat "$tmp/e")"; fi
timeout 10 "$part" "$tmp/many.yaml" --stages 2 >"$tmp/o" 2>"$tmp/e"; rc=$?
[ $rc = 2 ] && grep -q "^gpipe-partition: 10001 units are too many to split into 2 stages automatically .*pipeline.balance" "$tmp/e" &&
  ok || bad "10001 units, K=2: exit $rc: $(cat "$tmp/e")"
# counts in words: a model of one unit (it said "1 units")
printf 'name: one\ninputs: {x: [4], label: {shape: [], dtype: i32}}\n%s\nloss: %s\n' \
  "layers: [{type: linear, out_features: 3}]" softmax_cross_entropy >"$tmp/one.yaml"
"$part" "$tmp/one.yaml" >"$tmp/o" 2>"$tmp/e" && grep -q "^model one: 1 unit, " "$tmp/o" && ok ||
  bad "one unit: $(cat "$tmp/o" "$tmp/e")"
"$part" "$tmp/one.yaml" --stages 2 >"$tmp/o" 2>"$tmp/e"
grep -q "model one has 1 unit, so K must be 1..1" "$tmp/e" && ok || bad "one unit, K=2: $(cat "$tmp/e")"
# an impossible limit names the smallest limit that fits at this K
refuse "fits the limit of 1.00 MiB.*4 stages need at least [0-9.]+ [KMG]iB" \
  --stages 4 --micro-batches 4 --memory-limit 1MiB
need=$(sed -n 's/.*4 stages need at least \([0-9.]*\) MiB.*/\1/p' "$tmp/e")
if [ -n "$need" ]; then
  # ... and that limit (rounded up) does fit
  lim=$(python3 -c "import math; print(math.ceil($need * 1.001 + 0.01))")
  if "$part" "$resnet" --stages 4 --micro-batches 4 --memory-limit "${lim}MiB" >"$tmp/o" 2>"$tmp/e" &&
     grep -q "every stage fits its limit" "$tmp/o"; then ok
  else bad "the named limit ${lim}MiB does not fit: $(cat "$tmp/e")"; fi
else
  bad "no limit named"
fi

# ---- a plan said to fit a limit fits it in gpipe-train: except_last's kept micro-batch holds
# a set of activations beside the recomputed one, for good (its slot keeps that size). The
# estimate counted one set under GPipe, said 26.0 of 30 MiB, and training passed the limit on
# stage 0; under 1F1B it once said 24.9 of 27 MiB, with the same result. And `never`: an
# arena's first-step chunks of 1 MiB held 13 MiB for a 9 MiB peak, so plans said to fit 40 MiB
# (GPipe) and 48 MiB (1F1B) did not
r20=$srcdir/models/resnet20-cifar.yaml
for sl in "gpipe 27 except_last" "gpipe 30 except_last" "1f1b 27 except_last" \
          "1f1b 30 except_last" "gpipe 40 never" "1f1b 48 never"; do
  read -r sched lim remat <<< "$sl"
  A=(--stages 3 --micro-batches 4 --batch-size 32 --schedule "$sched" --remat "$remat")
  if "$part" "$r20" "${A[@]}" --memory-limit "${lim}MiB" -o "$tmp/p27.yaml" >"$tmp/o" 2>"$tmp/e" &&
     grep -q "every stage fits its limit" "$tmp/o" &&
     "$train" "$r20" --batch-size 32 --partition "$tmp/p27.yaml" --memory-limit "${lim}MiB" \
       --data synthetic --steps 2 --threads 1 --quiet >"$tmp/o2" 2>"$tmp/e2"; then ok
  else bad "$sched $remat under ${lim}MiB: $(cat "$tmp/e" "$tmp/e2")"; fi
done

# ---- --by params balances weights but predicts from FLOPs: on a split that --by flops also
# picks, the same bubble, speed-ups and stage times (they were computed from parameter counts)
cnn=$srcdir/models/fashion-cnn.yaml
for by in flops params; do
  "$part" "$cnn" --stages 2 --micro-batches 4 --by $by --json >"$tmp/by_$by" 2>"$tmp/err" ||
    bad "--by $by: $(cat "$tmp/err")"
done
if python3 - "$tmp/by_flops" "$tmp/by_params" <<'PY'; then ok; else bad "--by params predictions"; fi
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
pa, pb = a["partition"], b["partition"]
assert [s["units"] for s in pa] == [s["units"] for s in pb], (pa, pb)
assert [s["time"] for s in pa] == [s["time"] for s in pb], (pa, pb)
for k in a:
    if "bubble" in k or "speedup" in k or k == "imbalance":
        assert a[k] == b[k], (k, a[k], b[k])
PY
# ... and -o names the batch the plan's M was made for where it is not the model file's
"$part" "$mlp" --stages 2 --batch-size 512 --micro-batches 256 -o "$tmp/b512.yaml" >"$tmp/o" &&
  grep -q -- "--partition $tmp/b512.yaml --batch-size 512)" "$tmp/o" && ok ||
  bad "-o hint without --batch-size: $(tail -1 "$tmp/o")"
# ... and its command can be pasted: a path starting with '-' or holding a space or a quote
mkdir -p "$tmp/hint dir"
cp "$mlp" "$tmp/hint dir/-m's.yaml"
pa=$(realpath "$part"); ta=$(realpath "$train")
(cd "$tmp/hint dir" && "$pa" "./-m's.yaml" --stages 2 -o "-p.yaml" >"$tmp/o" 2>"$tmp/err") &&
  cmd=$(sed -n 's/^plan written to -p.yaml (\(gpipe-train .*\))$/\1/p' "$tmp/o") && [ -n "$cmd" ] &&
  (cd "$tmp/hint dir" && eval "\"\$ta\" ${cmd#gpipe-train } --data synthetic --steps 1" >/dev/null 2>"$tmp/err") &&
  ok || bad "the -o hint cannot be pasted: $(tail -1 "$tmp/o") $(cat "$tmp/err")"

# ---- a faster last device takes more of the work
"$part" "$resnet" --stages 2 --json >"$tmp/even" 2>"$tmp/err" || bad "--stages 2: $(cat "$tmp/err")"
"$part" "$resnet" --stages 2 --speeds 1,3 --json >"$tmp/fast" 2>"$tmp/err" || bad "--speeds: $(cat "$tmp/err")"
if python3 - "$tmp/even" "$tmp/fast" <<'PY'; then ok; else bad "--speeds 1,3 did not move units to stage 1"; fi
import json, sys
a, b = (json.load(open(p))["partition"] for p in sys.argv[1:3])
assert b[1]["units"] > a[1]["units"], (a, b)
PY

# ---- --by time measures once, then reads the cache
cache=$tmp/cache
if "$part" "$mlp" --stages 2 --by time --threads 1 --cache-dir "$cache" >"$tmp/t1" 2>"$tmp/err" &&
   [ -n "$(ls "$cache" 2>/dev/null)" ] &&
   "$part" "$mlp" --stages 2 --by time --threads 1 --cache-dir "$cache" >"$tmp/t2" 2>>"$tmp/err" &&
   grep -q "balanced by measured time" "$tmp/t1" &&
   [ "$(grep -E '^ +[0-9]+ ' "$tmp/t1")" = "$(grep -E '^ +[0-9]+ ' "$tmp/t2")" ]; then ok
else bad "--by time with a cache: $(cat "$tmp/err")"; fi

# ---- --by time also measures each unit's scratch: the estimate of each stage's memory is then
# within 5% of what gpipe-train measures, for a stage of 65 MiB and one of 6 MiB (the
# allowance of the largest unit's activations said 80 MiB for the first, +21%)
fcnn=$srcdir/models/fashion-cnn.yaml
for m in 1 4; do
  "$part" "$fcnn" --stages 2 --balance 3,4 --micro-batches $m --schedule gpipe --remat never --by time \
    --threads 1 --cache-dir "$cache" --json >"$tmp/est.json" 2>"$tmp/err" &&
  "$train" "$fcnn" --data synthetic --steps 2 --stages 2 --balance 3,4 --micro-batches $m \
    --schedule gpipe --remat never --threads 1 >"$tmp/run.out" 2>&1 &&
  python3 - "$tmp/est.json" "$tmp/run.out" <<'PY' && ok || bad "memory estimate M=$m: $(cat "$tmp/err" "$tmp/run.out")"
import json, re, sys
est = [s["memory_bytes"] / 2**20 for s in json.load(open(sys.argv[1]))["partition"]]
line = [l for l in open(sys.argv[2]) if l.startswith("memory: ")][0]
meas = [float(x) for x in re.search(r"stages: ([0-9., ]+) MiB", line).group(1).split(", ")]
assert len(meas) == 2 and all(abs(e / m - 1) < 0.05 for e, m in zip(est, meas)), (est, meas)
PY
done

# ---- the default cache folder is only a cache: one that cannot be made is one warning and a
# measurement without it (it was an error, exit 1); an explicit --cache-dir stays an error
: >"$tmp/homefile"
if env -u XDG_CACHE_HOME HOME="$tmp/homefile" "$part" "$mlp" --stages 2 --by time --threads 1 \
     >"$tmp/t3" 2>"$tmp/err" && grep -q "balanced by measured time" "$tmp/t3" &&
   [ "$(cat "$tmp/err")" = "gpipe-partition: not caching unit times: cannot create the cost cache folder '$tmp/homefile/.cache': Not a directory" ]
then ok; else bad "--by time with an unusable default cache: $(cat "$tmp/err")"; fi
"$part" "$mlp" --stages 2 --by time --threads 1 --cache-dir "$tmp/homefile/c" >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
  grep -q "cannot create the cost cache folder '$tmp/homefile/c': Not a directory" "$tmp/err" &&
  ok || bad "an unusable --cache-dir: exit $rc: $(cat "$tmp/err")"

# ---- a bad -o is one line naming the file as given (it named PLAN.yaml.tmp), before any work
"$part" "$mlp" --stages 2 -o "$tmp/none/plan.yaml" >"$tmp/o" 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && [ ! -s "$tmp/o" ] && [ "$(cat "$tmp/err")" = \
  "gpipe-partition: -o $tmp/none/plan.yaml: cannot write: No such file or directory" ] && ok ||
  bad "-o into a missing folder: exit $rc: $(cat "$tmp/err")"

# ---- -o over the model file is refused (it replaced the model with the plan)
cp "$mlp" "$tmp/m.yaml"
"$part" "$tmp/m.yaml" --stages 2 -o "$tmp/m.yaml" >"$tmp/o" 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && [ ! -s "$tmp/o" ] && cmp -s "$mlp" "$tmp/m.yaml" && [ "$(cat "$tmp/err")" = \
  "gpipe-partition: -o $tmp/m.yaml: that is the model file; give the output another path" ] && ok ||
  bad "-o over the model file: exit $rc: $(cat "$tmp/err")"

# ---- a closed stdout reads as /dev/null: the plan is written and the run succeeds (it was
# "stdout: writing failed", exit 1)
if "$part" "$mlp" --stages 2 -o "$tmp/closed.yaml" >&- 2>"$tmp/err" &&
   grep -q "^stages: 2" "$tmp/closed.yaml"; then ok
else bad "-o with stdout closed: $(cat "$tmp/err")"; fi

# ---- a model larger than this machine is still described (gpipe-train refuses to run it)
printf 'inputs: {x: [1000000], label: {shape: [], dtype: i32}}\nlayers:\n  - {type: linear, out_features: 1000000, name: huge}\nloss: softmax_cross_entropy\n' >"$tmp/huge.yaml"
if "$part" "$tmp/huge.yaml" --stages 1 >"$tmp/o" 2>"$tmp/err" && grep -q "1000001.000M parameters\|1000001000000" "$tmp/o"; then ok
else bad "a model larger than the machine: $(cat "$tmp/err" "$tmp/o" | head -5)"; fi

# ---- interleaved: a row a chunk naming its stage (chunk c on stage c mod K), a timeline row a
# stage with its chunks' letters, a plan of virtual stages that gpipe-train runs, schedule
# auto's interleaved, and the refusals in one line
inter=(--stages 2 --schedule interleaved --virtual-stages 2 --remat never --micro-batches 4)
cnn=$srcdir/bench/models/balanced-cnn.yaml
if "$part" "$cnn" "${inter[@]}" --batch-size 16 --timeline -o "$tmp/inter.yaml" >"$tmp/o" 2>"$tmp/err"; then
  python3 - "$tmp/o" "$tmp/inter.yaml" <<'PY' && ok || bad "interleaved: $(cat "$tmp/o" "$tmp/inter.yaml")"
import re, sys
out = open(sys.argv[1]).read()
assert "; 2 stages x 2 chunks, 4 micro-batches of 4" in out, out
rows = re.findall(r"^ +(\d+) +(\d+) +\d+(?:-\d+)? ", out, re.M)
assert [(int(a), int(b)) for a, b in rows] == [(0, 0), (1, 1), (2, 0), (3, 1)], rows
tl = re.findall(r"^ +(\d) \|([^|]*)\|$", out, re.M)
assert [s for s, _ in tl] == ["0", "1"], tl
for _, row in tl:  # each stage runs both its chunks, forward and backward
    assert all(c in row for c in "FBGC"), row
assert "legend: stage s's chunks by letter: F/B chunk s, G/C chunk s + 2" in out, out
plan = open(sys.argv[2]).read()
assert "\nstages: 2\nvirtual_stages: 2" in plan and "schedule: interleaved" in plan, plan
assert re.search(r"^balance: \[\d+, \d+, \d+, \d+\]  # units per chunk$", plan, re.M), plan
assert "# chunk 2 (stage 0): units" in plan, plan
PY
else bad "interleaved: exit $?: $(cat "$tmp/err")"; fi
if "$train" "$cnn" --partition "$tmp/inter.yaml" --data synthetic --steps 1 --batch-size 16 \
  >"$tmp/o" 2>&1 && grep -q "^pipeline: 2 stages x 2 chunks " "$tmp/o"; then ok
else bad "gpipe-train --partition of an interleaved plan: $(cat "$tmp/o")"; fi
# schedule auto takes interleaved V=3 on the balanced CNN: the header, the plan and the memory
# line are the chunks' (a stage's chunks against its limit together); with a launch's flags
# too, every hand-off between processes charged (the default link), but not on a slow one
auto2=(--stages 2 --micro-batches 4 --batch-size 16)
if "$part" "$cnn" "${auto2[@]}" --memory-limit 1GiB -o "$tmp/iauto.yaml" >"$tmp/o" 2>"$tmp/err" &&
  grep -q "; 2 stages x 3 chunks, 4 micro-batches of 4 (batch 16); interleaved schedule, re-materialization never;" "$tmp/o" &&
  grep -q "^schedule    auto: interleaved V=3 (simulated step 1.00; .*interleaved V=2 " "$tmp/o" &&
  grep -q "^memory      every stage fits its limit (its chunks together); the fullest, stage [01], " "$tmp/o" &&
  grep -q "^virtual_stages: 3 " "$tmp/iauto.yaml" && grep -qx "schedule: interleaved" "$tmp/iauto.yaml"; then ok
else bad "auto's interleaved: $(cat "$tmp/o" "$tmp/err" "$tmp/iauto.yaml")"; fi
w2=(--processes 2 --device-tflops 0.02)
if "$part" "$cnn" "${auto2[@]}" "${w2[@]}" >"$tmp/o" 2>"$tmp/err" &&
  grep -q "^schedule    auto: interleaved V=3 (simulated step 1.00; " "$tmp/o" &&
  "$part" "$cnn" "${auto2[@]}" "${w2[@]}" --link-local 0.001,5000 >"$tmp/o2" 2>>"$tmp/err" &&
  grep -q "^schedule    auto: [a-z0-9-]* (simulated step 1.00; .*; interleaved V=2 [0-9.]*, memory .*; interleaved V=4 [0-9.]*, memory [0-9.]*x)$" "$tmp/o2" &&
  ! grep -q "^schedule    auto: interleaved" "$tmp/o2"; then ok
else bad "auto across processes: $(cat "$tmp/o" "$tmp/o2" "$tmp/err")"; fi
refuse() {
  local want=$1; shift
  "$part" "$mlp" "$@" >"$tmp/o" 2>"$tmp/err"; local rc=$?
  if [ $rc = 2 ] && [ "$(cat "$tmp/err")" = "gpipe-partition: $want" ]; then ok
  else bad "$* -> exit $rc: $(cat "$tmp/err")"; fi
}
refuse "interleaved takes micro-batches in groups of the 2 stages: 3 micro-batches is not a \
multiple of 2 (4 would do)" --stages 2 --schedule interleaved --virtual-stages 2 --remat never \
  --micro-batches 3
refuse "2 virtual stages need the interleaved schedule (--schedule interleaved), not 1f1b" \
  --stages 2 --schedule 1f1b --virtual-stages 2 --micro-batches 4
# across processes: each process's share predicted (the last position sends too: chunk 1's
# output goes back to stage 0's process), and the plan's processes: a position a stage
if "$part" "$mlp" "${inter[@]}" --processes 2 -o "$tmp/inter2.yaml" >"$tmp/o" 2>"$tmp/err" &&
  grep -q "^processes: \[0, 1\]" "$tmp/inter2.yaml" && grep -q "^step time " "$tmp/o" &&
  grep -Eq "^ +1  1 +0 .* local " "$tmp/o"; then ok
else bad "interleaved over 2 processes: $(cat "$tmp/err" "$tmp/o")"; fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
