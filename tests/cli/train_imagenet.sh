#!/usr/bin/env bash
# gpipe-train on ImageNet-format data written on the fly (WebDataset shards of JPEGs, plain
# and gzipped, with classes.txt): trains through a 2-stage pipeline with decode threads,
# reports its data wait, resumes exactly, and names a damaged member in one line. The streamed
# shards' size is unknown: gpipe-train says so, and gpipe-bench --data real runs on them.
set -u
train=$1; writer=$2; bench=$3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$writer" --write "$tmp/data" || fail "writing the shards"
cat > "$tmp/m.yaml" <<YAML
name: tiny-imagenet
inputs: {image: [3, 16, 16], label: {shape: [], dtype: i32}}
layers:
  - {type: conv2d, out_channels: 8, kernel: 3, padding: 1}
  - {type: relu}
  - {type: global_avgpool}
  - {type: linear, out_features: 5}
loss: {type: softmax_cross_entropy}
data:
  dataset: imagenet
  path: $tmp/data
  train_shards: "train-{000..001}.tar,train-002.tar.gz"
  test_shards: "train-{000..001}.tar,train-002.tar.gz"
  classes: classes.txt
  image_size: 16
  shuffle_buffer: 8
  workers: 2
train: {batch_size: 6, steps: 8, seed: 3, optimizer: {type: sgd, lr: 0.1}}
YAML
out=$("$train" "$tmp/m.yaml" --quiet --stages 2 --micro-batches 3 --save "$tmp/a.safetensors" 2>&1) ||
  fail "training: $out"
grep -q "^data: 2 decode threads, waited" <<<"$out" || fail "no data-wait line: $out"
grep -q "final: step 8" <<<"$out" || fail "did not train 8 steps: $out"
# Unknown stream size: said as such, not "-1 per epoch"; gpipe-bench does not count it as
# fewer samples than a batch.
out=$("$train" "$tmp/m.yaml" --steps 1 2>&1) || fail "one step: $out"
grep -q "^training 1 step of batch 6 (epoch size unknown: streamed shards)" <<<"$out" ||
  fail "epoch size line: $out"
out=$("$bench" "$tmp/m.yaml" --data real --stages 1 --micro-batches 1 --steps 1 --warmup 0 \
  --quiet 2>&1) || fail "gpipe-bench --data real on streamed shards: $out"
# Unknown stream size without steps: a clear error.
out=$("$train" "$tmp/m.yaml" --quiet --set train.steps=0 2>&1); rc=$?
[ $rc = 2 ] && grep -q "data.train_samples" <<<"$out" || fail "unknown size: rc $rc: $out"
# A list of classes that does not match the model's outputs is named.
printf 'n01\nn02\nn03\nn04\n' >"$tmp/data/four.txt"
out=$("$train" "$tmp/m.yaml" --quiet --steps 1 --set data.classes=four.txt 2>&1); rc=$?
[ $rc = 2 ] && grep -q "the model outputs 5 classes, the data has 4 (the classes listed in \
$tmp/data/four.txt)$" <<<"$out" || fail "classes file: rc $rc: $out"
# Shards holding fewer samples than a batch (30): one line naming them, exit 1.
out=$("$train" "$tmp/m.yaml" --quiet --batch-size 64 --steps 1 2>&1); rc=$?
[ $rc = 1 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q "^gpipe-train: imagenet: the training \
shards (data.train_shards 'train-{000..001}.tar,train-002.tar.gz', 3 shards) hold fewer than one \
batch of 64$" <<<"$out" || fail "fewer samples than a batch: rc $rc: $out"
# Resume across an epoch boundary (30 samples = 5 batches per epoch) is exact.
"$train" "$tmp/m.yaml" --quiet --set data.train_samples=30 --steps 4 --checkpoint-dir "$tmp/ck" \
  >/dev/null 2>&1 || fail "first half"
"$train" "$tmp/m.yaml" --quiet --set data.train_samples=30 --steps 8 --checkpoint-dir "$tmp/ck" \
  --resume --save "$tmp/b.safetensors" >/dev/null 2>&1 || fail "resumed half"
"$train" "$tmp/m.yaml" --quiet --set data.train_samples=30 --steps 8 --save "$tmp/c.safetensors" \
  >/dev/null 2>&1 || fail "straight run"
cmp -s "$tmp/b.safetensors" "$tmp/c.safetensors" || fail "resume differs from a straight run"
# A damaged shard: one line naming the member, exit 1.
printf 'garbage' > "$tmp/data/train-002.tar.gz"
out=$("$train" "$tmp/m.yaml" --quiet 2>&1); rc=$?
[ $rc = 1 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q "train-002.tar.gz" <<<"$out" ||
  fail "damaged shard: rc $rc: $out"
echo "ok"
