#!/usr/bin/env bash
# The denoising task of the data section (data.task: denoise, noise_std): each bad value gives
# one clear line with the model file's line and column and exit 2; a short run of
# models/unet.yaml on synthetic images reports PSNR in the eval line, the final line and --log.
set -u
train=$1; srcdir=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
# expect CODE PATTERN -- ARGS...: exit code, and stderr one line matching PATTERN
expect() {
  local code=$1 pat=$2; shift 3
  timeout 60 "$train" "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  local lines; lines=$(wc -l <"$tmp/err")
  if [ "$rc" = "$code" ] && grep -qE -- "$pat" "$tmp/err" && [ "$lines" -le 1 ]; then
    passed=$((passed+1))
  else
    failed=$((failed+1)); echo "FAIL: gpipe-train $* -> exit $rc (want $code), stderr:"; cat "$tmp/err"
  fi
}
unet=$srcdir/models/unet.yaml
base=$(cat "$unet") # the patterns below are indented: the file's comments mention task: denoise
cnn=$(cat "$srcdir/models/fashion-cnn.yaml")
w() { printf '%s\n' "$2" >"$tmp/$1.yaml"; }
w task "${base/  task: denoise/  task: denoize}"
expect 2 "task.yaml:[0-9]+:[0-9]+: task: unknown value 'denoize'; did you mean 'denoise'" -- "$tmp/task.yaml"
w zero "${base/noise_std: 0.5/noise_std: 0}"
expect 2 "zero.yaml:[0-9]+:[0-9]+: .*noise_std.*\(0, 10\]" -- "$tmp/zero.yaml"
w big "${base/noise_std: 0.5/noise_std: 11}"
expect 2 "big.yaml:[0-9]+:[0-9]+: .*noise_std.*\(0, 10\]" -- "$tmp/big.yaml"
w word "${base/noise_std: 0.5/noise_std: loud}"
expect 2 "word.yaml:[0-9]+:[0-9]+: .*noise_std.*loud" -- "$tmp/word.yaml"
w classify "${base/  task: denoise/  task: classify}"
expect 2 "classify.yaml:[0-9]+:[0-9]+: noise_std: only task: denoise has it" -- "$tmp/classify.yaml"
nostd=${base/  noise_std: 0.5/}
w labels "${nostd/  task: denoise/}"
expect 2 "labels.yaml:[0-9]+:[0-9]+: data.task: classify \(the default\) gives class labels, but the model's target 'target' is f32 \[1, 28, 28\]" \
  -- "$tmp/labels.yaml" --data synthetic
nl=$'\n'
w cnn "${cnn/  normalize:/  task: denoise${nl}  normalize:}"
expect 2 "cnn.yaml:[0-9]+:[0-9]+: data.task: denoise makes the clean image \(f32 \[1, 28, 28\]\) the target, but the model's target 'label' is i32" \
  -- "$tmp/cnn.yaml" --data synthetic
w imagenet "${base/dataset: fashion-mnist/dataset: imagenet}"
expect 2 "imagenet.yaml:[0-9]+:[0-9]+: task: denoise is for mnist" -- "$tmp/imagenet.yaml"
# a short run: PSNR on every report; the noisy input's is the noise's, -20 log10 0.5 = 6.02 dB
if timeout 120 "$train" "$unet" --data synthetic --steps 2 --batch-size 4 --log "$tmp/log.jsonl" \
  >"$tmp/out" 2>"$tmp/err"; then
  if grep -qE "^eval .*test PSNR -?[0-9.]+ dB \(noisy input [56]\.[0-9]+ dB, [-+][0-9.]+ dB\)" "$tmp/err" &&
    grep -qE "^final: .*test PSNR -?[0-9.]+ dB  noisy input [56]\.[0-9]+ dB" "$tmp/out" &&
    grep -qE '"event": "eval".*"psnr": -?[0-9.]+, "input_psnr": [56]\.[0-9]+' "$tmp/log.jsonl"; then
    passed=$((passed+1))
  else
    failed=$((failed+1)); echo "FAIL: no PSNR reported:"; cat "$tmp/err" "$tmp/out" "$tmp/log.jsonl"
  fi
else
  failed=$((failed+1)); echo "FAIL: the synthetic unet run failed:"; cat "$tmp/err"
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
