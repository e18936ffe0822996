#!/usr/bin/env bash
# Bad model files, flags and data files each give one clear line and the right exit code
# (2: model file or usage, 1: data or runtime), never a signal or a hang.
set -u
train=$1; srcdir=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
# expect CODE PATTERN -- ARGS...: runs gpipe-train (with the variables in genv set), checks exit
# code and one-line stderr
genv=()
expect() {
  local code=$1 pat=$2; shift 3
  timeout 60 env ${genv[@]+"${genv[@]}"} "$train" "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  local lines; lines=$(wc -l <"$tmp/err")
  if [ "$rc" = "$code" ] && grep -qE -- "$pat" "$tmp/err" && [ "$lines" -le 1 ]; then
    passed=$((passed+1))
  else
    failed=$((failed+1)); echo "FAIL: gpipe-train $* -> exit $rc (want $code), stderr:"; cat "$tmp/err"
  fi
}
good=$srcdir/models/fashion-mlp.yaml
base=$(cat "$good")
printf 'name: x\nlayers: [\n' >"$tmp/syntax.yaml"
expect 2 "syntax.yaml:[0-9]+:[0-9]+: " -- "$tmp/syntax.yaml"
echo "${base/type: flatten/type: flaten}" >"$tmp/type.yaml"
expect 2 "type.yaml:[0-9]+:[0-9]+: .*flaten.*did you mean 'flatten'" -- "$tmp/type.yaml"
echo "${base/out_features: 256/out_featres: 256}" >"$tmp/key.yaml"
expect 2 "key.yaml:[0-9]+:[0-9]+: .*out_featres.*out_features" -- "$tmp/key.yaml"
echo "${base/out_features: 256/out_features: many}" >"$tmp/value.yaml"
expect 2 "value.yaml:[0-9]+:[0-9]+: .*many" -- "$tmp/value.yaml"
: >"$tmp/empty.yaml"
expect 2 "empty.yaml" -- "$tmp/empty.yaml"
expect 1 "nope.yaml" -- "$tmp/nope.yaml"
expect 2 "unknown flag '--stepz'; did you mean '--steps'" -- "$good" --stepz 3
expect 2 "--steps: expected an integer" -- "$good" --steps abc
# another trainer's flag for a model-file setting names the --set that does it, and that --set
# works on the default model
cnn=$srcdir/models/fashion-cnn.yaml
for fv in "--lr 0.01" "--learning-rate=0.01" "--weight_decay 0" "--momentum 0.5" "--warmup 5" \
  "--lr-schedule constant" "--log-every 10" "--clip-grad-norm 1" "--label-smoothing 0.1" \
  "--data-dir $tmp" "--dataset fashion-mnist" "--optimizer sgd" "--optimizer adamw"; do
  # shellcheck disable=SC2086
  expect 2 "unknown flag '--[a-z_-]+'; the model file sets it: --set " -- "$cnn" $fv
  set=$(sed -n "s/.*the model file sets it: //p" "$tmp/err")
  # shellcheck disable=SC2086
  if [ -n "$set" ] && timeout 60 "$train" "$cnn" $set --data synthetic --eval-only --batch-size 4 \
    --quiet >/dev/null 2>"$tmp/err2"; then
    passed=$((passed+1))
  else
    failed=$((failed+1)); echo "FAIL: $fv suggested '$set', which fails: $(cat "$tmp/err2")"
  fi
done
# another trainer's flag for what a gpipe flag does is pointed to ours in one line
for f in --bf16 --amp --fp16 --mixed_precision; do
  expect 2 "^gpipe-train: unknown flag '$f'; use --precision bf16" -- "$good" "$f"
done
for f in "--grad-accum 4" "--gradient-accumulation-steps=4" "--gradient_accumulation_steps 2"; do
  # shellcheck disable=SC2086
  expect 2 "^gpipe-train: unknown flag '--[a-z_-]+'; use --micro-batches M" -- "$good" $f
done
# what cannot fit is refused before training, naming the layer: a stage that cannot hold its
# parameters (a 10^6 x 10^6 linear: malloc was asked for 8 TB), and a batch norm that would see
# one value per channel in a micro-batch (variance 0; evaluation, on running statistics, is fine)
printf 'inputs: {x: [1000000], label: {shape: [], dtype: i32}}\nlayers:\n  - {type: linear, out_features: 1000000, name: huge}\nloss: softmax_cross_entropy\n' >"$tmp/huge.yaml"
expect 1 "^gpipe-train: stage 0 \(cpu\) cannot fit: .*, at least [0-9.]+ TiB in all \(the largest layer: 'huge' \(linear\) at .*huge.yaml:3:5\), more than the machine's memory of [0-9]+ bytes" \
  -- "$tmp/huge.yaml" --data synthetic --steps 1 --batch-size 1
expect 1 "^gpipe-train: stage 0 \(cpu\) cannot fit: .*'huge' \(linear\).*its memory limit of 1048576 bytes" \
  -- "$tmp/huge.yaml" --data synthetic --steps 1 --batch-size 1 --memory-limit 1MiB --stages 1
printf 'inputs: {x: [6], label: {shape: [], dtype: i32}}\nlayers:\n  - {type: linear, out_features: 4}\n  - {type: batchnorm, name: bn}\n  - {type: linear, out_features: 3}\nloss: softmax_cross_entropy\n' >"$tmp/bn.yaml"
expect 2 "^gpipe-train: .*bn.yaml:4:5: batchnorm 'bn' would normalize 1 value per channel in a micro-batch of 1 sample \(batch 4 in 4 micro-batches" \
  -- "$tmp/bn.yaml" --data synthetic --steps 1 --batch-size 4 --micro-batches 4
for ok in "--steps 1 --batch-size 4 --micro-batches 2" "--eval-only --batch-size 4 --micro-batches 4"; do
  # shellcheck disable=SC2086
  if timeout 60 "$train" "$tmp/bn.yaml" --data synthetic --quiet $ok >/dev/null 2>"$tmp/err"; then
    passed=$((passed+1))
  else
    failed=$((failed+1)); echo "FAIL: batch norm with $ok: $(cat "$tmp/err")"
  fi
done
expect 2 "expected one model file" --
# the GP_* settings (core/env.c): a bad value or a misspelt name is refused before anything
# runs, as a flag is; the variables of gpipe's scripts, other GP_ names and good values pass
for gv in "GP_CPU_PIECES=65|GP_CPU_PIECES=65: expected a whole number from 1 to 64 \(pieces" \
  "GP_CPU_PIECES= 4|GP_CPU_PIECES= 4: expected a whole number" \
  "GP_CPU_TAKEOVER=off|GP_CPU_TAKEOVER=off: expected 0 or 1 \(0: a CPU thread" \
  "GP_CPU_DIRECT=avx-2|GP_CPU_DIRECT=avx-2: expected 0, avx2 or avx512 \(" \
  "GP_DEVICE_TIMING=yes|GP_DEVICE_TIMING=yes: expected 0 or 1" \
  "GP_CUDNN_GRAPH=2|GP_CUDNN_GRAPH=2: expected 0 or 1" \
  "GP_CPU_PEICES=1|GP_CPU_PEICES is not a gpipe setting; did you mean GP_CPU_PIECES\? \(unset"; do
  genv=("${gv%%|*}")
  expect 2 "^gpipe-train: ${gv#*|}" -- "$good" --data synthetic --steps 1 --batch-size 8
done
genv=(GP_CPU_PIECES=1 GP_CPU_TAKEOVER=0 GP_CPU_DIRECT=avx2 GP_PIPELINE_SPIN=0 GP_CUDNN_LOG=0
  GP_SCALING=8:128 GP_CAPACITY_ARGS=x GP_SOMETHING_ELSE=1)
if env "${genv[@]}" timeout 60 "$train" "$good" --data synthetic --steps 1 --batch-size 8 \
  --stages 2 --quiet >"$tmp/out" 2>"$tmp/err" && [ ! -s "$tmp/err" ] &&
  grep -q "^final: step 1 " "$tmp/out"; then
  passed=$((passed+1))
else
  failed=$((failed+1)); echo "FAIL: good GP_* settings ${genv[*]}: $(cat "$tmp/err")"
fi
genv=()
expect 2 "--set" -- "$good" --set train.optimzer.lr=0.1
expect 2 "--resume needs --checkpoint-dir" -- "$good" --resume
expect 2 "--checkpoint-every needs --checkpoint-dir" -- "$good" --checkpoint-every 1
# a name --set gives is bytes: a Latin-1 one went into the --save header, which --load refused
expect 2 "name: byte 0xe9 at 3 is not UTF-8 text" -- "$good" --set $'name=caf\xe9' --data synthetic \
  --steps 1 --save "$tmp/latin1.safetensors"
# a forgotten value is not the next flag (that wrote a log named --quiet); a flag given twice
# had its first value unchecked; after -- every word is the model file's
expect 2 "^gpipe-train: --log -: would write a file named '-', not standard output; give a file name or /dev/stdout$" \
  -- "$good" --data synthetic --steps 1 --log -
expect 2 "--log needs a value \(FILE.jsonl\), got the flag '--quiet'" -- "$good" --log --quiet
expect 2 "--data is given twice \('real', then 'synthetic'\)" -- "$good" --data real \
  --data synthetic
expect 1 "no-such.yaml" -- --steps 1 -- "$tmp/no-such.yaml"
# integers past what the programs hold are refused, not wrapped (4294967297 was 1)
expect 2 "--threads: at most 1024, got '4294967297'" -- "$good" --threads 4294967297
expect 2 "--stages: at most 2147483647" -- "$good" --stages 4294967298
# list flags read their items as strictly as single integers and names
for b in +2,3 ' 2,3' 2,3, 2,,3; do
  expect 2 "--balance: expected integers >= 1 separated by commas, got '${b/+/[+]}'" -- "$good" \
    --stages 2 --balance "$b"
done
for d in cpu, ,cpu cpu,,cpu; do
  expect 2 "--devices: expected names like cpu or cuda:0 separated by commas, got '$d'" -- \
    "$good" --stages 2 --devices "$d"
done
expect 2 "--steps: expected an integer >= 1, got '\+2'" -- "$good" --steps +2
# files written to a temporary name and renamed are not renamed over a FIFO or a device (as
# root that replaced /dev/full); through a symbolic link they land in its target
mkfifo "$tmp/fifo"
expect 1 "--save .*fifo: not a regular file" -- "$good" --data synthetic --steps 1 --save "$tmp/fifo"
expect 1 "--trace .*fifo: not a regular file" -- "$good" --data synthetic --steps 1 --trace "$tmp/fifo"
# an output that is the model file, a file the run reads, or another output is refused before
# any work (--trace MODEL.yaml wrote the trace over the model file); --load and --save may be
# one file (training on, in place)
cp "$good" "$tmp/m.yaml"; ln -s m.yaml "$tmp/mlink.yaml"
expect 2 "^gpipe-train: --trace .*/m.yaml: that is the model file; give the output another path$" \
  -- "$tmp/m.yaml" --data synthetic --steps 1 --trace "$tmp/m.yaml"
expect 2 "^gpipe-train: --log .*mlink.yaml: that is the model file" \
  -- "$tmp/m.yaml" --data synthetic --steps 1 --log "$tmp/mlink.yaml"
cmp -s "$good" "$tmp/m.yaml" || { failed=$((failed+1)); echo "FAIL: the model file was written"; }
expect 2 "^gpipe-train: --trace .*/o.json: --log writes that file too; give each output its own path$" \
  -- "$good" --data synthetic --steps 1 --log "$tmp/o.json" --trace "$tmp/../${tmp##*/}/o.json"
[ -e "$tmp/o.json" ] && { failed=$((failed+1)); echo "FAIL: --log written before refusing"; }
timeout 60 "$train" "$good" --quiet --data synthetic --steps 1 --batch-size 8 \
  --save "$tmp/w.safetensors" >/dev/null 2>&1
expect 2 "--log .*w.safetensors: that is --load's file, which this run reads" \
  -- "$good" --data synthetic --steps 1 --batch-size 8 --load "$tmp/w.safetensors" --log "$tmp/w.safetensors"
mkdir "$tmp/ckd"
expect 2 "^gpipe-train: --save .*ckd/checkpoint.safetensors: --checkpoint-dir writes that file too" \
  -- "$good" --data synthetic --steps 1 --checkpoint-dir "$tmp/ckd" --save "$tmp/ckd/checkpoint.safetensors"
if timeout 60 "$train" "$good" --quiet --data synthetic --steps 1 --batch-size 8 \
    --load "$tmp/w.safetensors" --save "$tmp/w.safetensors" >/dev/null 2>"$tmp/err"; then
  passed=$((passed+1))
else
  failed=$((failed+1)); echo "FAIL: --load and --save of one file: $(cat "$tmp/err")"
fi
# --checkpoint-dir is made and claimed before training: a file there, or a folder another run
# holds, is refused before the first step (found at the first checkpoint, after training, a
# bad folder cost the run its --save; two runs in one folder published each other's bytes)
: >"$tmp/ckfile"
expect 1 "--checkpoint-dir .*ckfile: not a directory" -- "$good" --data synthetic --steps 1 \
  --checkpoint-dir "$tmp/ckfile"
if grep -q "^step " "$tmp/out"; then failed=$((failed+1)); echo "FAIL: trained before refusing"; fi
mkdir "$tmp/held"
r=$tmp/held/ready
flock "$tmp/held/lock" -c "touch '$r'; while [ -e '$r' ]; do sleep 0.05; done" & holder=$!
for _ in $(seq 200); do [ -e "$r" ] && break; sleep 0.05; done
expect 1 "--checkpoint-dir .*held: in use by another gpipe-train run; give each run its own" \
  -- "$good" --data synthetic --steps 1 --checkpoint-dir "$tmp/held"
rm -f "$r"; wait "$holder"
# an output may go into the folder --checkpoint-dir makes; a refused output takes the folder
# the run made away again (one that was there stays)
if timeout 60 "$train" "$good" --quiet --data synthetic --steps 1 --batch-size 8 \
    --checkpoint-dir "$tmp/cknew" --save "$tmp/cknew/final.safetensors" >/dev/null 2>"$tmp/err" &&
    [ -s "$tmp/cknew/final.safetensors" ]; then
  passed=$((passed+1))
else
  failed=$((failed+1)); echo "FAIL: --save into a new --checkpoint-dir: $(cat "$tmp/err")"
fi
# a folder holding a checkpoint is refused without --resume (a preempted run restarted
# without it replaced the checkpoint at its first one); --overwrite starts afresh
cp "$tmp/cknew/checkpoint.safetensors" "$tmp/ck1.safetensors"
expect 2 "^gpipe-train: --checkpoint-dir .*/cknew already holds a checkpoint of step 1; --resume continues it, another folder keeps it, --overwrite replaces it$" \
  -- "$good" --data synthetic --steps 2 --batch-size 8 --checkpoint-dir "$tmp/cknew"
cmp -s "$tmp/cknew/checkpoint.safetensors" "$tmp/ck1.safetensors" ||
  { failed=$((failed+1)); echo "FAIL: a refused run changed the checkpoint"; }
expect 2 "^gpipe-train: --overwrite and --resume: .*; use one$" \
  -- "$good" --data synthetic --steps 2 --checkpoint-dir "$tmp/cknew" --overwrite --resume
expect 2 "^gpipe-train: --overwrite needs --checkpoint-dir DIR$" -- "$good" --steps 2 --overwrite
if timeout 60 "$train" "$good" --quiet --data synthetic --steps 2 --batch-size 8 \
    --checkpoint-dir "$tmp/cknew" --overwrite >/dev/null 2>"$tmp/err" &&
    ! cmp -s "$tmp/cknew/checkpoint.safetensors" "$tmp/ck1.safetensors"; then
  passed=$((passed+1))
else
  failed=$((failed+1)); echo "FAIL: --overwrite: $(cat "$tmp/err")"
fi
expect 1 "^gpipe-train: --trace .*/nowhere/t.json: cannot write: No such file or directory$" \
  -- "$good" --data synthetic --steps 1 --checkpoint-dir "$tmp/cknew2" --trace "$tmp/nowhere/t.json"
[ -e "$tmp/cknew2" ] && { failed=$((failed+1)); echo "FAIL: a refused run left its new folder"; }
expect 2 "fashion-mlp.yaml: the model file names no dataset to train on \(data.dataset is none" \
  -- "$good" --set data.dataset=none --steps 1
printf 'inputs: {image: [], label: {shape: [], dtype: i32}}\ndata: {dataset: synthetic}\nlayers: [{type: flatten}, {type: linear, out_features: 3}]\nloss: softmax_cross_entropy\n' >"$tmp/scalar.yaml"
expect 2 "synthetic data: the input's shape is \[\], but it makes samples of 1 to 8 dimensions" \
  -- "$tmp/scalar.yaml" --steps 1
# what only opening the data finds is located at the data section like any model-file error
expect 2 "resnet20-cifar.yaml:[0-9]+:[0-9]+: data.path: set it to the directory with cifar-10" \
  -- "$srcdir/models/resnet20-cifar.yaml" --steps 1
expect 1 "^gpipe-train: --resume: .*/ckres holds no checkpoint to resume from \(.*: No such file" \
  -- "$good" --data synthetic --steps 1 --checkpoint-dir "$tmp/ckres" --resume
[ -e "$tmp/ckres" ] && { failed=$((failed+1)); echo "FAIL: a refused --resume left its new folder"; }
# a split too small for one batch is named, with its data
mkdir -p "$tmp/txt"
for sp in train valid test; do printf '5 6 7\n8 9\n' >"$tmp/txt/$sp.es.ids"; done
{ printf '<pad>\t0\n<unk>\t0\n<s>\t0\n</s>\t0\n'; seq 4 7999 | sed 's/^/t/; s/$/\t0/'; } \
  >"$tmp/txt/spm.vocab"
expect 1 "txt: the train split: the training data fills 1 rows, fewer than one batch of 32" \
  -- "$srcdir/models/transformer-lm.yaml" --set data.path="$tmp/txt" --steps 1
# numbers are checked as the kernels take them, float32: no NaN or a silent lr of 0 later
expect 2 "fashion-mlp.yaml:[0-9]+:[0-9]+: lr: 1e-50 must be > 0 \(1e-50 is 0 as float32\)" \
  -- "$good" --data synthetic --steps 1 --set train.optimizer.lr=1e-50
expect 2 "fashion-mlp.yaml:[0-9]+:[0-9]+: weight_decay: 1e39 is beyond float32's range" \
  -- "$good" --data synthetic --steps 1 --set train.optimizer.weight_decay=1e39
expect 2 "fashion-mlp.yaml:[0-9]+:[0-9]+: p: 0.99999999999 is out of range \[0, 1\) \(0.99999999999 is 1 as float32\)" \
  -- "$good" --data synthetic --steps 1 --set layers.3.p=0.99999999999
# numbers in messages as written, not %g's six digits (two different numbers showed alike)
expect 2 "fashion-mlp.yaml:[0-9]+:[0-9]+: min_lr: 0.0500000001 is more than lr 0.05 " \
  -- "$good" --data synthetic --steps 1 --set train.schedule.type=cosine \
  --set train.optimizer.lr=0.05 --set train.schedule.min_lr=0.0500000001
expect 2 "fashion-cnn.yaml:[0-9]+:[0-9]+: momentum: 1.00000001 is out of range \[0, 1\) " \
  -- "$srcdir/models/fashion-cnn.yaml" --data synthetic --steps 1 --set train.optimizer.momentum=1.00000001
# a list item is pointed at, with the float32 note
echo "${base/type: adamw,/type: adamw, betas: [0.9, 0.99999999999],}" >"$tmp/betas.yaml"
expect 2 "betas.yaml:26:41: betas: 0.99999999999 is out of range \[0, 1\) \(0.99999999999 is 1 as float32\)$" \
  -- "$tmp/betas.yaml" --data synthetic --steps 1
expect 2 "transformer-nmt.yaml:[0-9]+:[0-9]+: decode_len_a: 1000000.0001 is out of range \[0, 1000000\]" \
  -- "$srcdir/models/transformer-nmt.yaml" --data synthetic --steps 1 --set data.decode_len_a=1000000.0001
# a range message states the rule it applied, open bounds as open; a positive setting whose
# float32 is 0 is refused where it is written (batchnorm trained on, eps 0 as float32, and std
# 1e-50 passed synthetic data); an unknown key with no near match lists the keys there are
expect 2 "fashion-cnn.yaml:13:[0-9]+: eps: 1e-50 is out of range \(0, 1\] \(1e-50 is 0 as float32\) " \
  -- "$cnn" --data synthetic --steps 1 --set blocks.conv_bn_relu.layers.1.eps=1e-50
expect 2 "fashion-cnn.yaml:30:37: std: 1e-50 must be > 0 \(1e-50 is 0 as float32\) \(set by" \
  -- "$cnn" --data synthetic --steps 1 --set data.normalize.std.0=1e-50
expect 2 "fashion-cnn.yaml:23:24: p: 1 is out of range \[0, 1\) \(set by --set layers.5.p=1\)$" \
  -- "$cnn" --data synthetic --steps 1 --set layers.5.p=1
expect 2 "fashion-cnn.yaml:37:30: lr: -1 must be > 0 \(set by" \
  -- "$cnn" --data synthetic --steps 1 --set train.optimizer.lr=-1
expect 2 "fashion-cnn.yaml:23:5: unknown key 'zzzz' for dropout \(its keys: p, name, from, repeat, type\)" \
  -- "$cnn" --data synthetic --steps 1 --set layers.5.zzzz=1
# a --set of one list item is named when that item is refused
expect 2 "fashion-cnn.yaml:[0-9]+:[0-9]+: std: 0 must be > 0 \(set by --set data.normalize.std.0=0\)" \
  -- "$srcdir/models/fashion-cnn.yaml" --set data.normalize.std.0=0 --steps 1
# the log is an output like the others: checked before any work, the new folder taken away
expect 1 "^gpipe-train: --log .*/nowhere/l.jsonl: cannot write: No such file or directory$" \
  -- "$good" --data synthetic --steps 1 --checkpoint-dir "$tmp/cklog" --log "$tmp/nowhere/l.jsonl"
[ -e "$tmp/cklog" ] && { failed=$((failed+1)); echo "FAIL: a refused --log left its new folder"; }
expect 1 "^gpipe-train: --log .*: is a directory$" -- "$good" --data synthetic --steps 1 --log "$tmp"
# ... nor the file stdout goes to: the lines would mix (and a --trace would replace them)
expect 2 "^gpipe-train: --log .*/out: is the file the program's standard output goes to; give another file$" \
  -- "$good" --data synthetic --steps 1 --log "$tmp/out"
expect 2 "^gpipe-train: --trace .*/out: is the file the program's standard output goes to; give another file$" \
  -- "$good" --data synthetic --steps 1 --trace "$tmp/out"
expect 2 "^gpipe-train: --save .*cknew3/checkpoint.safetensors: --checkpoint-dir writes that file too" \
  -- "$good" --data synthetic --steps 1 --checkpoint-dir "$tmp/cknew3" \
  --save "$tmp/cknew3/checkpoint.safetensors"
[ -e "$tmp/cknew3" ] && { failed=$((failed+1)); echo "FAIL: a refused run left its new folder"; }
expect 1 "--trace .*/nowhere/t.json: cannot write" \
  -- "$good" --data synthetic --steps 1 --checkpoint-dir "$tmp/ckd" --trace "$tmp/nowhere/t.json"
[ -d "$tmp/ckd" ] || { failed=$((failed+1)); echo "FAIL: a refused run took a folder it did not make"; }
ln -s missing.json "$tmp/dangling.json"
expect 1 "--trace .*dangling.json: a symbolic link to 'missing.json', which does not exist" \
  -- "$good" --data synthetic --steps 1 --trace "$tmp/dangling.json"
expect 2 "--batch-size: at most 16777216, got '16777217'" -- "$good" --batch-size 16777217
# --batch-size and --micro-batches are checked with the file's settings as if written there:
# a --set M above the file's batch runs when --batch-size makes room, and a flag's M above the
# batch is named as the flag's
if timeout 60 "$train" "$good" --quiet --data synthetic --steps 1 --set pipeline.micro_batches=200 \
    --batch-size 256 >/dev/null 2>"$tmp/err"; then
  passed=$((passed+1))
else
  failed=$((failed+1)); echo "FAIL: --set pipeline.micro_batches=200 --batch-size 256: $(cat "$tmp/err")"
fi
expect 2 "fashion-mlp.yaml:[0-9]+:[0-9]+: micro_batches: 4 is more than batch_size 2 .*\(set by --micro-batches 4\)$" \
  -- "$good" --data synthetic --steps 1 --batch-size 2 --micro-batches 4
expect 2 "fashion-mlp.yaml:[0-9]+:[0-9]+: micro_batches: 200 is more than batch_size 128 .*\(set by --set pipeline.micro_batches=200\)$" \
  -- "$good" --data synthetic --steps 1 --set pipeline.micro_batches=200
expect 2 "fashion-mlp.yaml:[0-9]+:[0-9]+: micro_batches: 5000 is out of range \[1, 4096\] \(set by --micro-batches 5000\)$" \
  -- "$good" --data synthetic --steps 1 --micro-batches 5000
: >"$tmp/real.safetensors"; ln -s real.safetensors "$tmp/link.safetensors"
if timeout 60 "$train" "$good" --quiet --data synthetic --steps 1 --batch-size 8 \
    --save "$tmp/link.safetensors" >/dev/null 2>&1 &&
    [ -L "$tmp/link.safetensors" ] && [ -s "$tmp/real.safetensors" ]; then
  passed=$((passed+1))
else
  failed=$((failed+1)); echo "FAIL: --save through a symbolic link"
fi
# writes that fail are errors: the log, stdout
if [ -c /dev/full ]; then
  expect 1 "^gpipe-train: /dev/full: writing the log failed: No space left on device$" -- "$good" \
    --quiet --data synthetic --steps 1 --batch-size 8 --log /dev/full
  # at the line that failed: the run stops at step 1 (it trained to the end, then said so)
  expect 1 "/dev/full: writing the log failed: No space left on device" -- "$good" --quiet \
    --data synthetic --steps 200 --batch-size 8 --set train.log_every=1 --log /dev/full
  grep -q "^final:" "$tmp/out" && { failed=$((failed+1)); echo "FAIL: --log /dev/full trained on"; }
  if timeout 60 "$train" "$good" --data synthetic --steps 1 --batch-size 8 >/dev/full 2>"$tmp/err"
  then
    failed=$((failed+1)); echo "FAIL: stdout to /dev/full exited 0"
  else
    grep -q "stdout: writing failed" "$tmp/err" && passed=$((passed+1)) ||
      { failed=$((failed+1)); echo "FAIL: stdout to /dev/full: $(cat "$tmp/err")"; }
  fi
fi
# synthetic data fills one f32 input and the labels: a model of two f32 inputs is told so in
# user terms, naming its file and inputs, before training starts
printf 'name: two\ninputs:\n  a: [8]\n  b: [8]\n  label: {shape: [], dtype: i32}\nlayers:\n%s\n%s\nloss: softmax_cross_entropy\n' \
  '  - {type: add, from: [a, b]}' '  - {type: linear, out_features: 3}' >"$tmp/two.yaml"
expect 2 "two.yaml: synthetic data fills one f32 input and the labels .*inputs are a f32 \[8\], b f32 \[8\], label i32" \
  -- "$tmp/two.yaml" --data synthetic --steps 1
# data files: missing, truncated, mismatched
mkdir -p "$tmp/d1" "$tmp/d2"
expect 1 "d1.*(train|t10k)" -- "$good" --set data.path="$tmp/d1" --steps 1
if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  cp /usr/share/datasets/fashion-mnist/*.gz "$tmp/d2/"
  head -c 200000 /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz >"$tmp/d2/train-images-idx3-ubyte.gz"
  expect 1 "train-images-idx3-ubyte.gz: gzip data ends early \(truncated file\) after [0-9]+ decompressed bytes$" \
    -- "$good" --set data.path="$tmp/d2" --steps 1
  cp /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz "$tmp/d2/train-labels-idx1-ubyte.gz"
  cp /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz "$tmp/d2/"
  expect 1 "60000|10000" -- "$good" --set data.path="$tmp/d2" --steps 1
  # fewer samples than a batch: the data and the file named, with the limit that cut it
  expect 1 "^gpipe-train: fashion-mnist: the training set \(/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz, data.train_limit 100\) has 100 samples, fewer than one batch of 128$" \
    -- "$good" --set data.train_limit=100 --steps 1
fi
# a NaN loss stops with the step named
expect 1 "loss is (NaN|infinite) at step" -- "$good" --quiet --data synthetic --steps 5 --set train.optimizer.lr=1e30 --set train.optimizer.type=sgd --set train.schedule.warmup_steps=0
# and when the last step's update is what diverged: the evaluation after it says so
expect 1 "test loss is (NaN|infinite) after step 1" -- "$good" --quiet --data synthetic --steps 1 \
  --batch-size 8 --set train.optimizer.lr=1e30
# checkpoint folders: a lock that is a link is refused (the pid went into what it named); a
# FIFO is refused, not opened (the open blocked); counters larger than the step are damage
# (near INT64_MAX they overflowed)
mkdir "$tmp/lk"; echo keep >"$tmp/victim"; ln -s "$tmp/victim" "$tmp/lk/lock"
expect 1 "^gpipe-train: --checkpoint-dir .*/lk: .*/lk/lock is not a regular file; remove it$" \
  -- "$good" --data synthetic --steps 1 --checkpoint-dir "$tmp/lk"
[ "$(cat "$tmp/victim")" = keep ] && passed=$((passed+1)) || { failed=$((failed+1)); echo "FAIL: the lock's link target was written"; }
mkfifo "$tmp/w.fifo"
expect 1 "^gpipe-train: .*/w.fifo: not a regular file$" -- "$good" --data synthetic --steps 1 --load "$tmp/w.fifo"
"$train" "$good" --quiet --data synthetic --steps 2 --batch-size 8 --checkpoint-dir "$tmp/ckt" >/dev/null 2>&1
python3 - "$tmp/ckt/checkpoint.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]; b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n]); h['__metadata__']['gpipe.optimizer_t'] = '9223372036854775807'
j = json.dumps(h).encode(); j += b' ' * ((8 - len(j) % 8) % 8)
open(p, 'wb').write(struct.pack('<Q', len(j)) + j + b[8 + n:])
PY
expect 1 "checkpoint.safetensors: gpipe.optimizer_t 9223372036854775807 is more than gpipe.step 2 \(a damaged checkpoint\)$" \
  -- "$good" --data synthetic --steps 4 --batch-size 8 --checkpoint-dir "$tmp/ckt" --resume
# weights that are not numbers, in --load or a checkpoint, are refused naming the tensor
"$train" "$good" --quiet --data synthetic --steps 1 --batch-size 8 --save "$tmp/fin.safetensors" >/dev/null 2>&1
for bad in nan:NaN inf:Inf -inf:-Inf; do
  python3 - "$tmp/fin.safetensors" "$tmp/w-${bad%%:*}.safetensors" "${bad%%:*}" <<'PY'
import json, struct, sys
src, dst, v = sys.argv[1:]
b = bytearray(open(src, 'rb').read()); n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n]); name = sorted(k for k in h if k != '__metadata__')[-1]
at = 8 + n + h[name]['data_offsets'][0] + 4 * 3 # element 3
b[at:at + 4] = struct.pack('<f', float(v))
open(dst, 'wb').write(b)
PY
  expect 1 "w-${bad%%:*}.safetensors: tensor '.*' holds ${bad#*:} at element 3 of [0-9]+ \(a run cannot start from values that are not numbers\)$" \
    -- "$good" --data synthetic --steps 1 --batch-size 8 --load "$tmp/w-${bad%%:*}.safetensors"
done
python3 - "$tmp/ckt/checkpoint.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n]); h['__metadata__']['gpipe.optimizer_t'] = '2'
name = [k for k in h if k.startswith('optim.')][0]
at = 8 + n + h[name]['data_offsets'][0]; b[at:at + 4] = struct.pack('<f', float('nan'))
j = json.dumps(h).encode(); j += b' ' * ((8 - len(j) % 8) % 8)
open(p, 'wb').write(struct.pack('<Q', len(j)) + j + b[8 + n:])
PY
expect 1 "checkpoint.safetensors: tensor 'optim\.[a-z_]+\.[a-z0-9_.]+' holds NaN at element 0 of [0-9]+ " \
  -- "$good" --data synthetic --steps 4 --batch-size 8 --checkpoint-dir "$tmp/ckt" --resume
# a --checkpoint-dir that cannot be written is refused before training, also when a lock an
# earlier run left opens in it (it failed at the first checkpoint). Root writes anywhere: as
# root the case runs as nobody, when setpriv can
as=()
[ "$(id -u)" = 0 ] && as=(setpriv --reuid=65534 --regid=65534 --clear-groups)
ro=$(mktemp -d /tmp/gp-ro.XXXXXX)
mkdir "$ro/ck" && cp "$good" "$ro/m.yaml" && : >"$ro/ck/lock" && chmod 666 "$ro/ck/lock" &&
  chmod 555 "$ro/ck" && chmod 755 "$ro"
if "${as[@]}" "$train" --help >/dev/null 2>&1; then
  "${as[@]}" "$train" "$ro/m.yaml" --data synthetic --steps 1 --checkpoint-dir "$ro/ck" \
    >/dev/null 2>"$tmp/err"
  rc=$?
  [ $rc = 1 ] && grep -qx "gpipe-train: --checkpoint-dir $ro/ck: cannot write in it: Permission denied" "$tmp/err" &&
    passed=$((passed+1)) || { failed=$((failed+1)); echo "FAIL: read-only --checkpoint-dir: exit $rc: $(cat "$tmp/err")"; }
else
  echo "the read-only --checkpoint-dir case left out: cannot run as another user"
fi
chmod 755 "$ro/ck"; rm -rf "$ro"
# text from a weights file or a checkpoint is shown escaped: a dtype, a tensor name or a metadata
# value holding a line break, a terminal escape or U+2028 made the message several lines
clean() { # the one line of stderr holds no C0, DEL, C1 or U+2028/9 (wc -l counts only \n)
  python3 -c "import sys,re; t=open(sys.argv[1],'rb').read().decode('utf-8')
sys.exit(0 if t.count('\n') == 1 and t.endswith('\n') and not re.search('[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]', t) else 1)" "$tmp/err" &&
    passed=$((passed+1)) || { failed=$((failed+1)); echo "FAIL: not one clean line:"; cat -A "$tmp/err"; }
}
edit_st() { # FILE PYTHON: runs PYTHON on the header h (a dict), writes the file back
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
p = sys.argv[1]; b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n]); exec(sys.argv[2])
j = json.dumps(h).encode(); j += b' ' * ((8 - len(j) % 8) % 8)
open(p, 'wb').write(struct.pack('<Q', len(j)) + j + b[8 + n:])
PY
}
"$train" "$good" --quiet --data synthetic --steps 1 --batch-size 8 --save "$tmp/w0.safetensors" >/dev/null 2>&1
cp "$tmp/w0.safetensors" "$tmp/wd.safetensors"
edit_st "$tmp/wd.safetensors" "h['fc1.weight']['dtype'] = 'F32\n'"
expect 1 "wd.safetensors: tensor 'fc1.weight': unknown dtype 'F32\\\\n'$" \
  -- "$good" --data synthetic --steps 1 --load "$tmp/wd.safetensors"
clean
cp "$tmp/w0.safetensors" "$tmp/wn.safetensors"
edit_st "$tmp/wn.safetensors" "h['fc1.weight\x1b[2J\u2028'] = h.pop('fc1.weight')"
expect 1 "wn.safetensors: tensor 'fc1.weight\\\\x1b\[2J\\\\u2028' is not a parameter of this model$" \
  -- "$good" --data synthetic --steps 1 --load "$tmp/wn.safetensors"
clean
"$train" "$good" --quiet --data synthetic --steps 2 --batch-size 8 --checkpoint-dir "$tmp/ckm" >/dev/null 2>&1
cp "$tmp/ckm/checkpoint.safetensors" "$tmp/ck0.safetensors"
edit_st "$tmp/ckm/checkpoint.safetensors" "h['__metadata__']['gpipe.model'] = 'fashion-mlp\r\n\x9b2J'"
expect 1 "checkpoint.safetensors: written for model 'fashion-mlp\\\\r\\\\n\\\\u009b2J', this is 'fashion-mlp'$" \
  -- "$good" --data synthetic --steps 4 --batch-size 8 --checkpoint-dir "$tmp/ckm" --resume
clean
cp "$tmp/ck0.safetensors" "$tmp/ckm/checkpoint.safetensors"
edit_st "$tmp/ckm/checkpoint.safetensors" "h['__metadata__']['gpipe.step'] = '2\n'"
expect 1 "checkpoint.safetensors: bad gpipe.step '2\\\\n' \(expected an integer >= 0\)$" \
  -- "$good" --data synthetic --steps 4 --batch-size 8 --checkpoint-dir "$tmp/ckm" --resume
clean
cp "$tmp/ck0.safetensors" "$tmp/ckm/checkpoint.safetensors"
edit_st "$tmp/ckm/checkpoint.safetensors" "h['optim.exp_avg\u0085'] = h.pop([k for k in h if k.startswith('optim.exp_avg.')][0])"
expect 1 "checkpoint.safetensors: optimizer state 'optim.exp_avg\\\\u0085' is not used by this run's optimizer" \
  -- "$good" --data synthetic --steps 4 --batch-size 8 --checkpoint-dir "$tmp/ckm" --resume
clean
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
