#!/usr/bin/env bash
# Builds gpipe with CUDA here and packs what a GPU machine without compilers' dependencies
# needs to run it into .gpu/pack.tar.gz: the programs, the CUDA test binaries and the shared
# libraries they use that a CUDA image may lack (libyaml, libjpeg, OpenBLAS and its Fortran
# runtime). CUDA's own libraries (cudart, cuBLAS, cuDNN) are the GPU machine's.
# scripts/gpu-check.sh unpacks and runs it there.
# Usage: scripts/gpu-pack.sh [BUILD_DIR]   (default build-gpu)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" -Dcuda=enabled -Dbuildtype=release >/dev/null
fi
ninja -C "$build" >/dev/null
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
progs=(cli/gpipe-train cli/gpipe-bench cli/gpipe-partition)
for t in "$build"/tests/cuda/test_cuda_* "$build"/bench/bench-*; do
  [ -x "$t" ] && [ -f "$t" ] && progs+=("${t#"$build"/}")
done
for p in "${progs[@]}"; do
  strip -s -o "$stage/bin/$(basename "$p")" "$build/$p"
done
# the non-CUDA shared libraries the programs load, as resolved here
ldd "$build/cli/gpipe-train" | awk '/=> \//{print $1, $3}' | while read -r name path; do
  case "$name" in
  libyaml* | libjpeg* | libopenblas* | libgfortran* | libquadmath*) cp -L "$path" "$stage/lib/$name" ;;
  esac
done
mkdir -p .gpu
tar -C "$stage" -czf .gpu/pack.tar.gz bin lib
echo "gpu-pack: .gpu/pack.tar.gz ($(du -h .gpu/pack.tar.gz | cut -f1)): $(ls "$stage/bin" | tr '\n' ' ')"
