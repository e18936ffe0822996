#!/usr/bin/env bash
# The CIFAR ResNets load with He et al.'s parameter counts and train on synthetic data.
set -u
train=$1; srcdir=$2
out=$("$train" "$srcdir/models/resnet56-cifar.yaml" --data synthetic --steps 2 --batch-size 8 2>&1) \
  || { echo "FAIL: resnet56 synthetic: $out"; exit 1; }
echo "$out" | grep -q "0.85[0-9]M parameters" || { echo "FAIL: resnet56 count: $out"; exit 1; }
out=$("$train" "$srcdir/models/resnet20-cifar.yaml" --data synthetic --steps 1 --batch-size 8 2>&1) \
  || { echo "FAIL: resnet20 synthetic: $out"; exit 1; }
echo "$out" | grep -q "0.27[0-9]M parameters" || { echo "FAIL: resnet20 count: $out"; exit 1; }
echo "1 passed, 0 failed"
