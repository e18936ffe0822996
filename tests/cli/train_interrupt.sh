#!/usr/bin/env bash
# gpipe-train and signals: SIGTERM stops after the step under way with a checkpoint of it
# (exit 143, one line saying where), and --resume from it trains on bit for bit as one run
# would; a second signal stops at once and leaves no temporary file; a --log resumed from an
# earlier checkpoint loses the lines the killed run logged past it; a killed run's temporary
# checkpoint is removed by the next run given the folder, and its temporary --save or --trace
# by the next run writing the same file; a signal during an evaluation cuts it short, and
# stops --eval-only's with no result.
set -u
train=$1; srcdir=$2
tmp=$(mktemp -d); trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mlp=$srcdir/models/fashion-mlp.yaml
common=(--data synthetic --batch-size 16 --threads 2 --stages 2 --micro-batches 4
        --set train.schedule.type=constant --set train.log_every=1 --eval-every 1000000)

# waits (up to 60 s) until the log $1 holds $2 train events while process $3 runs
wait_steps() {
  for _ in $(seq 600); do
    kill -0 "$3" 2>/dev/null || fail "the run ended before $2 steps: $(tail -3 "$tmp/err")"
    [ "$(grep -c '"event": "train"' "$1" 2>/dev/null)" -ge "$2" ] && return 0
    sleep 0.1
  done
  fail "no $2 steps in $1 after 60 s"
}

# 1. one SIGTERM: a checkpoint of the last whole step, the line, the log event, exit 143
"$train" "$mlp" "${common[@]}" --steps 1000000 --checkpoint-dir "$tmp/ck" --log "$tmp/log.jsonl" \
  >/dev/null 2>"$tmp/err" &
pid=$!
wait_steps "$tmp/log.jsonl" 5 $pid
kill -TERM $pid
wait $pid; rc=$?
[ $rc = 143 ] || fail "SIGTERM: exit $rc, not 143: $(tail -3 "$tmp/err")"
last=$(tail -1 "$tmp/err")
[[ $last =~ ^gpipe-train:\ SIGTERM\ received:\ stopped\ after\ step\ ([0-9]+)\ of\ 1000000\;\ .*/ck/checkpoint.safetensors\ holds\ step\ ([0-9]+):\ --resume\ goes\ on$ ]] ||
  fail "SIGTERM: the last line: $last"
n=${BASH_REMATCH[1]}
[ "${BASH_REMATCH[2]}" = "$n" ] || fail "SIGTERM: stopped at $n, checkpoint of ${BASH_REMATCH[2]}"
python3 - "$tmp/log.jsonl" "$n" <<'PY' || fail "SIGTERM: the log"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
n = int(sys.argv[2])
assert ev[-1] == dict(ev[-1], event="interrupted", step=n, signal="SIGTERM"), ev[-1]
assert [e["step"] for e in ev if e["event"] == "train"] == list(range(1, n + 1))
PY
ls "$tmp/ck" | grep -q tmp && fail "SIGTERM: temporary files left: $(ls "$tmp/ck")"

# 2. --resume from it for 3 more steps == one run of n + 3 steps, bit for bit
"$train" "$mlp" "${common[@]}" --steps $((n + 3)) --checkpoint-dir "$tmp/ck" --resume \
  --log "$tmp/log.jsonl" --save "$tmp/resumed.safetensors" >/dev/null 2>"$tmp/err" ||
  fail "resuming: $(cat "$tmp/err")"
"$train" "$mlp" "${common[@]}" --steps $((n + 3)) --save "$tmp/one.safetensors" >/dev/null \
  2>"$tmp/err" || fail "one run: $(cat "$tmp/err")"
cmp -s "$tmp/resumed.safetensors" "$tmp/one.safetensors" ||
  fail "interrupted at $n and resumed: weights differ from one run"

# 3. a log resumed from an earlier checkpoint: the lines past it are cut, not repeated
cp "$tmp/ck/checkpoint.safetensors" "$tmp/early.safetensors" # step n + 3
"$train" "$mlp" "${common[@]}" --steps $((n + 8)) --checkpoint-dir "$tmp/ck" --resume \
  --log "$tmp/log.jsonl" >/dev/null 2>"$tmp/err" || fail "resuming to n + 8: $(cat "$tmp/err")"
cp "$tmp/early.safetensors" "$tmp/ck/checkpoint.safetensors" # as if killed after n + 8
printf '{"event": "train", "step": 9' >>"$tmp/log.jsonl"       # and mid-line
"$train" "$mlp" "${common[@]}" --steps $((n + 10)) --checkpoint-dir "$tmp/ck" --resume \
  --log "$tmp/log.jsonl" >/dev/null 2>"$tmp/err" || fail "resuming to n + 10: $(cat "$tmp/err")"
# (8: the resumed run's mark, 5 train lines, its final eval, the cut line)
grep -q "^log: cut 8 lines logged after step $((n + 3)) (the checkpoint's) from" "$tmp/err" ||
  fail "no note of the cut lines: $(cat "$tmp/err")"
python3 - "$tmp/log.jsonl" "$n" <<'PY' || fail "the resumed log"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
n = int(sys.argv[2])
steps = [e["step"] for e in ev if e["event"] == "train"]
assert steps == list(range(1, n + 11)), steps
# one mark per resumed run whose lines stayed: at n (the first), at n + 3 (the last)
marks = [e["step"] for e in ev if e["event"] == "resumed"]
assert marks == [n, n + 3], marks
PY

# 4. a second signal stops at once, mid-step or mid-write: exit 143, no temporary file left
"$train" "$mlp" "${common[@]}" --steps 1000000 --checkpoint-dir "$tmp/ck2" --checkpoint-every 1 \
  --log "$tmp/log2.jsonl" >/dev/null 2>"$tmp/err" &
pid=$!
wait_steps "$tmp/log2.jsonl" 3 $pid
kill -TERM $pid; kill -TERM $pid
wait $pid; rc=$?
[ $rc = 143 ] || fail "two SIGTERMs: exit $rc: $(tail -3 "$tmp/err")"
tail -1 "$tmp/err" | grep -q "^gpipe-train: SIGTERM received: stop" ||
  fail "two SIGTERMs: the last line: $(tail -1 "$tmp/err")"
ls "$tmp/ck2" | grep -q tmp && fail "two SIGTERMs: temporary files left: $(ls "$tmp/ck2")"
# 5. a run killed while writing a checkpoint leaves CHECKPOINT.tmp.PID: the next run given the
# folder (and holding its lock) removes it, and nothing else
mkdir -p "$tmp/ck3"
for f in checkpoint.safetensors.tmp.12345 checkpoint.safetensors.tmp.x notes.tmp.1; do
  echo x >"$tmp/ck3/$f"
done
"$train" "$mlp" "${common[@]}" --steps 1 --checkpoint-dir "$tmp/ck3" >/dev/null 2>"$tmp/err" ||
  fail "training with stale files: $(cat "$tmp/err")"
grep -q "^removed 1 temporary checkpoint a killed run left in .*/ck3$" "$tmp/err" ||
  fail "no note of the removed file: $(cat "$tmp/err")"
[ "$(ls "$tmp/ck3" | tr '\n' ' ')" = "checkpoint.safetensors checkpoint.safetensors.tmp.x lock notes.tmp.1 " ] ||
  fail "stale files: $(ls "$tmp/ck3")"
# 5b. checkpoint.safetensors a link to a file elsewhere: a killed run's temporary lies beside
# the target; the next run removes it when its process has exited, and keeps a running one's
mkdir -p "$tmp/ck4" "$tmp/store"
cp "$tmp/ck3/checkpoint.safetensors" "$tmp/store/c.safetensors"
ln -s "$tmp/store/c.safetensors" "$tmp/ck4/checkpoint.safetensors"
gone=$(sh -c 'echo $$') # a process that has exited
echo x >"$tmp/store/c.safetensors.tmp.$gone"
echo x >"$tmp/store/c.safetensors.tmp.$$"
"$train" "$mlp" "${common[@]}" --steps 2 --checkpoint-dir "$tmp/ck4" --resume >/dev/null \
  2>"$tmp/err" || fail "training with a linked checkpoint: $(cat "$tmp/err")"
grep -q "^removed 1 temporary checkpoint a killed run left in .*/ck4$" "$tmp/err" ||
  fail "no note of the removed file beside the link's target: $(cat "$tmp/err")"
[ "$(ls "$tmp/store" | tr '\n' ' ')" = "c.safetensors c.safetensors.tmp.$$ " ] ||
  fail "temporary files beside the link's target: $(ls "$tmp/store" | tr '\n' ' ')"
[ -L "$tmp/ck4/checkpoint.safetensors" ] || fail "the link was replaced by a file"
# 6. a run SIGKILLed while writing --save or --trace leaves TARGET.tmp.PID: the next run writing
# that target removes it when no process has PID here, and keeps one whose PID runs (ours)
mkdir -p "$tmp/out"
dead=$(sh -c 'echo $$') # a process that has exited
for f in w.safetensors.tmp.$dead w.safetensors.tmp.$$ t.json.tmp.$dead t.json.tmp.x \
  other.tmp.$dead; do
  echo x >"$tmp/out/$f"
done
"$train" "$mlp" "${common[@]}" --steps 1 --save "$tmp/out/w.safetensors" \
  --trace "$tmp/out/t.json" >/dev/null 2>"$tmp/err" || fail "training with stale temps: $(cat "$tmp/err")"
grep -q "^removed 2 temporary files that killed runs left beside the output files$" "$tmp/err" ||
  fail "no note of the removed temporary files: $(cat "$tmp/err")"
[ "$(ls "$tmp/out" | tr '\n' ' ')" = "other.tmp.$dead t.json t.json.tmp.x w.safetensors w.safetensors.tmp.$$ " ] ||
  fail "stale temporary files: $(ls "$tmp/out" | tr '\n' ' ')"
# 7. a signal during an evaluation cuts it short (a batch, not the whole test split) and
# stops with a checkpoint of the steps trained; the first signal says so at once
data=/usr/share/datasets/fashion-mnist
if [ -f $data/t10k-images-idx3-ubyte.gz ]; then
  "$train" "$srcdir/models/fashion-cnn.yaml" --threads 2 --steps 1000 --eval-every 1 \
    --set train.log_every=1 --checkpoint-dir "$tmp/ck4" --overwrite --log "$tmp/log4.jsonl" \
    >/dev/null 2>"$tmp/err" &
  pid=$!
  wait_steps "$tmp/log4.jsonl" 1 $pid # step 1 is logged, then its evaluation of 10000 begins
  kill -TERM $pid
  wait $pid; rc=$?
  [ $rc = 143 ] || fail "SIGTERM in an evaluation: exit $rc: $(tail -3 "$tmp/err")"
  grep -q "^gpipe-train: SIGTERM received: stopping after the step under way (an evaluation is cut short); a second signal stops at once$" "$tmp/err" ||
    fail "SIGTERM in an evaluation: no notice: $(cat "$tmp/err")"
  last=$(tail -1 "$tmp/err")
  [[ $last =~ ^gpipe-train:\ SIGTERM\ received:\ stopped\ in\ the\ evaluation\ after\ step\ 1\ of\ 1000\;\ .*/ck4/checkpoint.safetensors\ holds\ step\ 1:\ --resume\ goes\ on$ ]] ||
    fail "SIGTERM in an evaluation: the last line: $last"
  grep -q '"event": "eval"' "$tmp/log4.jsonl" && fail "SIGTERM in an evaluation: it was finished"
  # --resume does that evaluation first (the log then reads as one run's: step 1, its
  # evaluation, step 2, its evaluation), also when resumed twice from that checkpoint (as
  # after a SIGKILL); resuming the finished run logs nothing again and prints the same line
  cp "$tmp/ck4/checkpoint.safetensors" "$tmp/due.safetensors"
  resume4() {
    "$train" "$srcdir/models/fashion-cnn.yaml" --threads 2 --steps 2 --eval-every 1 \
      --set train.log_every=1 --checkpoint-dir "$tmp/ck4" --log "$tmp/log4.jsonl" --resume \
      2>"$tmp/err" || fail "resuming an evaluation cut short: $(cat "$tmp/err")"
  }
  resume4 >/dev/null
  cp "$tmp/due.safetensors" "$tmp/ck4/checkpoint.safetensors"
  resume4 >"$tmp/final1"
  grep -q "^log: cut 4 lines logged after step 1 (the checkpoint's) or by its evaluation (done again) from " "$tmp/err" ||
    fail "resumed twice: the log note: $(cat "$tmp/err")"
  cp "$tmp/log4.jsonl" "$tmp/log4.before"
  resume4 >"$tmp/final2"
  cmp -s "$tmp/log4.jsonl" "$tmp/log4.before" || fail "the finished run's resume logged again"
  grep -q "^the checkpoint is at the run's last step, 2: nothing to train; the final evaluation is repeated (not logged again)$" "$tmp/err" ||
    fail "the finished run's resume: $(cat "$tmp/err")"
  [ "$(grep ^final: "$tmp/final1" | cut -d' ' -f1-9)" = "$(grep ^final: "$tmp/final2" | cut -d' ' -f1-9)" ] ||
    fail "the finished run's final line: $(cat "$tmp/final1" "$tmp/final2")"
  python3 - "$tmp/log4.jsonl" <<'PY' || fail "the log of the resumed evaluation: $(cat "$tmp/log4.jsonl")"
import json, sys
ev = [(e["event"], e["step"]) for e in map(json.loads, open(sys.argv[1]))]
assert ev == [("train", 1), ("interrupted", 1), ("resumed", 1), ("eval", 1), ("train", 2),
              ("eval", 2)], ev
PY
  # 8. --eval-only: a signal stops its evaluation, with no result and nothing logged
  "$train" "$srcdir/models/fashion-cnn.yaml" --eval-only --threads 1 --batch-size 8 \
    --log "$tmp/log5.jsonl" >"$tmp/out5" 2>"$tmp/err" &
  pid=$!
  for _ in $(seq 1200); do grep -q "^evaluating" "$tmp/err" && break; sleep 0.05; done
  kill -TERM $pid
  wait $pid; rc=$?
  [ $rc = 143 ] && [ "$(tail -1 "$tmp/err")" = "gpipe-train: SIGTERM received: stopped the evaluation; no result" ] ||
    fail "SIGTERM in --eval-only: exit $rc: $(cat "$tmp/err")"
  grep -q "^gpipe-train: SIGTERM received: stopping the evaluation; a second signal stops at once$" "$tmp/err" ||
    fail "SIGTERM in --eval-only: no notice: $(cat "$tmp/err")"
  [ -s "$tmp/log5.jsonl" ] || [ -s "$tmp/out5" ] && fail "SIGTERM in --eval-only: a result: $(cat "$tmp/out5" "$tmp/log5.jsonl")"
else
  echo "no $data: the evaluation case left out"
fi
echo "ok: stopped after step $n"
