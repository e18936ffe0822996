#!/usr/bin/env bash
# Issue 50's split check: for resnet20-cifar, resnet56-cifar and transformer-lm at K = 2 and 4
# (M = 8, the model files' batch), the automatic split by measured time against the splits one
# unit around it, every stage timed whole (bench-partition-check --candidates); each ratio is
# the automatic split's slowest stage over the best of them (target <= 1.05). The unit times
# are measured afresh into a temporary cache, in the same conditions as the stages.
#   bench/split_check.sh [BUILD_DIR] [ROUNDS]
set -u
cd "$(dirname "$0")/.."
build=${1:-build}; rounds=${2:-2}
cache=$(mktemp -d); trap 'rm -rf "$cache"' EXIT
for model in resnet20-cifar resnet56-cifar transformer-lm; do
  for k in 2 4; do
    "$build/bench/bench-partition-check" "models/$model.yaml" --stages "$k" --micro-batches 8 \
      --candidates --rounds "$rounds" --cache-dir "$cache" || exit 1
    echo
  done
done
