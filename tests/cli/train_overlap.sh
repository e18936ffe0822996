#!/usr/bin/env bash
# gpipe-train overlaps its steps (stage 0 runs the next step's first forwards while stage 1
# finishes the last) only where nothing comes between them, with the same numbers: the weights
# equal GP_STEP_OVERLAP=0's byte for byte; a run checkpointed every few steps and resumed, or
# stopped by SIGINT after a step told its successor (whose batch, fetched ahead, was not
# trained) and resumed, ends with the weights of one run; the log's epochs stay the trained
# batches'; the pipeline line counts the steps overlapped. GP_TEST_AHEAD_ALL=1 makes stage 0 run
# every early forward it may, whatever the timing, so that the counts are exact.
set -u
train=$1; srcdir=$2
tmp=$(mktemp -d); trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cnn=$srcdir/models/fashion-cnn.yaml # batch norm and dropout: both keyed on the step
common=(--data synthetic --batch-size 16 --threads 2 --stages 2 --micro-batches 4
        --schedule zb-h2 --set train.schedule.type=constant --set train.log_every=1)

# run NAME STEPS [FLAGS...]: --save NAME.safetensors, stdout NAME.out, --log NAME.jsonl
run() {
  local name=$1 steps=$2; shift 2
  "$train" "$cnn" "${common[@]}" --steps "$steps" --save "$tmp/$name.safetensors" \
    --log "$tmp/$name.jsonl" "$@" >"$tmp/$name.out" 2>"$tmp/err" ||
    fail "$name: $(tail -3 "$tmp/err")"
}
# overlapped NAME: N of M from NAME's pipeline line
overlapped() {
  sed -n 's/^pipeline: .*; steps overlapped: \([0-9]*\) of \([0-9]*\)$/\1 of \2/p' "$tmp/$1.out"
}
# the (step, epoch) of each train event in a log
epochs() { python3 -c 'import json, sys
print([(e["step"], e["epoch"]) for e in map(json.loads, open(sys.argv[1])) if e["event"] == "train"])' "$1"; }

# 1. the same weights with and without overlap, and the same epochs logged (synthetic data: 16
#    batches an epoch, so step 16's batch is epoch 1's and the one fetched ahead epoch 2's);
#    the counts: every step but the last (17 of 18), none an evaluation (4, 8, 12, 16) or a
#    checkpoint (3, 6, 9, 12, 15, and 16, the epoch's end) follows, none when it is off
GP_STEP_OVERLAP=0 run off 18 --eval-every 1000000
run on 18 --eval-every 1000000
GP_TEST_AHEAD_ALL=1 run all 18 --eval-every 1000000
cmp -s "$tmp/off.safetensors" "$tmp/on.safetensors" || fail "overlap on: other weights"
cmp -s "$tmp/off.safetensors" "$tmp/all.safetensors" || fail "every early forward: other weights"
[ "$(overlapped off)" = "0 of 18" ] || fail "GP_STEP_OVERLAP=0: '$(overlapped off)', not 0 of 18"
[ "$(overlapped all)" = "17 of 18" ] || fail "every early forward: '$(overlapped all)', not 17 of 18"
# by default, where stage 1 is still busy after stage 0's update (its deferred W's: stages of
# even cost; fashion-cnn's stage 0 is the slower), some steps overlap, with the same weights
bal=(--data synthetic --batch-size 32 --threads 2 --stages 2 --micro-batches 4 --schedule zb-h2
     --steps 8 --quiet)
for o in 0 1; do
  GP_STEP_OVERLAP=$o "$train" "$srcdir/bench/models/balanced-cnn.yaml" "${bal[@]}" \
    --save "$tmp/bal$o.safetensors" >"$tmp/bal$o.out" 2>"$tmp/err" ||
    fail "balanced-cnn, GP_STEP_OVERLAP=$o: $(tail -3 "$tmp/err")"
done
cmp -s "$tmp/bal0.safetensors" "$tmp/bal1.safetensors" || fail "balanced-cnn: other weights"
[ "$(overlapped bal0)" = "0 of 8" ] || fail "balanced-cnn off: '$(overlapped bal0)', not 0 of 8"
[[ $(overlapped bal1) =~ ^([0-9]+)\ of\ 8$ ]] && [ "${BASH_REMATCH[1]}" -gt 0 ] ||
  fail "balanced-cnn, default: '$(overlapped bal1)': no step overlapped"
[ "$(epochs "$tmp/off.jsonl")" = "$(epochs "$tmp/all.jsonl")" ] ||
  fail "the log's epochs: $(epochs "$tmp/off.jsonl") without overlap, $(epochs "$tmp/all.jsonl") with"
GP_TEST_AHEAD_ALL=1 run ev 18 --eval-every 4
[ "$(overlapped ev)" = "13 of 18" ] || fail "--eval-every 4: '$(overlapped ev)', not 13 of 18"
cmp -s "$tmp/off.safetensors" "$tmp/ev.safetensors" || fail "--eval-every 4: other weights"
GP_TEST_AHEAD_ALL=1 run ck 18 --eval-every 1000000 --checkpoint-dir "$tmp/ck" \
  --checkpoint-every 3
[ "$(overlapped ck)" = "11 of 18" ] || fail "--checkpoint-every 3: '$(overlapped ck)', not 11 of 18"
cmp -s "$tmp/off.safetensors" "$tmp/ck.safetensors" || fail "--checkpoint-every 3: other weights"

# 2. checkpointed every 3 steps (each after a step told no successor) and killed (SIGKILL: no
#    checkpoint of its own), resumed to 40 steps: the weights of one run
rm -rf "$tmp/ck"
set -m # else bash starts background runs with SIGINT ignored (3.)
GP_TEST_AHEAD_ALL=1 "$train" "$cnn" "${common[@]}" --steps 1000000 --eval-every 1000000 \
  --checkpoint-dir "$tmp/ck" --checkpoint-every 3 --log "$tmp/kill.jsonl" >/dev/null \
  2>"$tmp/err" &
pid=$!
wait_steps() { # LOG N: until LOG holds N train events (60 s at most) while $pid runs
  for i in $(seq 601); do
    [ $i = 601 ] && fail "no $2 steps in 60 s"
    kill -0 $pid 2>/dev/null || fail "the run ended before $2 steps: $(tail -3 "$tmp/err")"
    n=$(grep -c '"event": "train"' "$1" 2>/dev/null)
    [ "${n:-0}" -ge "$2" ] && return 0
    sleep 0.1
  done
}
wait_steps "$tmp/kill.jsonl" 7
kill -KILL $pid
wait $pid 2>/dev/null
GP_TEST_AHEAD_ALL=1 run killres 40 --eval-every 1000000 --checkpoint-dir "$tmp/ck" --resume
k=$(python3 -c 'import json, sys
print([e["step"] for e in map(json.loads, open(sys.argv[1])) if e["event"] == "resumed"][0])' \
  "$tmp/killres.jsonl")
[ $((k % 3)) = 0 ] && [ "$k" -ge 6 ] || fail "killed: resumed from step $k, not a checkpoint's"
GP_STEP_OVERLAP=0 run one40 40 --eval-every 1000000
cmp -s "$tmp/one40.safetensors" "$tmp/killres.safetensors" ||
  fail "checkpointed every 3 steps, killed, resumed: other weights than one run's"

# 3. SIGINT after a step told its successor (every step of this run but the last is): the
#    checkpoint's data position is before the batch fetched ahead, so the resumed run trains it
rm -rf "$tmp/ck"
GP_TEST_AHEAD_ALL=1 "$train" "$cnn" "${common[@]}" --steps 1000000 --eval-every 1000000 \
  --checkpoint-dir "$tmp/ck" --log "$tmp/int.jsonl" >/dev/null 2>"$tmp/err" &
pid=$!
wait_steps "$tmp/int.jsonl" 5
kill -INT $pid
wait $pid; rc=$?
set +m
[ $rc = 130 ] || fail "SIGINT: exit $rc, not 130: $(tail -3 "$tmp/err")"
last=$(tail -1 "$tmp/err")
[[ $last =~ SIGINT\ received:\ stopped\ after\ step\ ([0-9]+)\ of\ 1000000\;\ .*holds\ step\ ([0-9]+): ]] ||
  fail "SIGINT: the last line: $last"
n=${BASH_REMATCH[1]}
[ "${BASH_REMATCH[2]}" = "$n" ] || fail "SIGINT: stopped at $n, checkpoint of ${BASH_REMATCH[2]}"
GP_TEST_AHEAD_ALL=1 run intres $((n + 3)) --eval-every 1000000 --checkpoint-dir "$tmp/ck" --resume
GP_STEP_OVERLAP=0 run intone $((n + 3)) --eval-every 1000000
cmp -s "$tmp/intres.safetensors" "$tmp/intone.safetensors" ||
  fail "interrupted at $n and resumed: other weights than one run's of $((n + 3)) steps"
echo "ok: balanced-cnn overlapped $(overlapped bal1) by default; killed, resumed from $k; SIGINT at $n, resumed"
