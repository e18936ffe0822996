#!/usr/bin/env bash
# Builds gpipe with CUDA here and packs what a GPU machine without compilers' dependencies
# needs to run it into .gpu/pack.tar.gz: the programs, the CUDA test binaries and the shared
# libraries they use that a CUDA image may lack (libyaml, libjpeg, OpenBLAS and its Fortran
# runtime). CUDA's own libraries (cudart, cuBLAS, cuDNN, NCCL) are the GPU machine's. Where the
# programs link MPI, Open MPI's runtime also goes along as Debian packages (ompi/: mpirun and
# libmpi with what they load), from apt's cache or apt-get download: the GPU machine has no
# network, and gpu-check.sh unpacks them there when it has no MPI of its own. shard/gpt2/ is a
# token-id shard of GPT-2's vocabulary (random ids: speed only) for gpu-check.sh's gpt2 phase;
# the model file and bench/gpt2_vs_torch.py travel with the working tree.
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
# Open MPI's runtime, for a GPU machine without it (bookworm's package names)
ompi_debs=(openmpi-bin openmpi-common libopenmpi3 libpmix2 libhwloc15 libevent-2.1-7
  libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libucx0 libpsm2-2 libpsm-infinipath1
  libibverbs1 ibverbs-providers librdmacm1 libnl-3-200 libnl-route-3-200 libmunge2 libxnvctrl0
  libltdl7)
parts=(bin lib)
if ldd "$build/cli/gpipe-train" | grep -q "libmpi\.so"; then
  mkdir -p "$stage/ompi"
  missing=()
  for d in "${ompi_debs[@]}"; do
    v=$(dpkg-query -W -f '${Version}' "$d" 2>/dev/null | sed 's/:/%3a/')
    f=$(ls /var/cache/apt/archives/"${d}_${v}"_*.deb 2>/dev/null | head -1)
    if [ -n "$f" ]; then
      cp "$f" "$stage/ompi/"
    else
      (cd "$stage/ompi" && apt-get download "$d" >/dev/null 2>&1) || missing+=("$d")
    fi
  done
  [ ${#missing[@]} = 0 ] ||
    echo "gpu-pack: Open MPI's packages not found here: ${missing[*]} (the mpi phase needs" \
      "mpirun on the GPU machine then)"
  parts+=(ompi)
fi
python3 bench/gpt2_vs_torch.py --make-shard "$stage/shard/gpt2" --vocab 50304 --seq 1024 \
  --lines 256
parts+=(shard)
mkdir -p .gpu
tar -C "$stage" -czf .gpu/pack.tar.gz "${parts[@]}"
echo "gpu-pack: .gpu/pack.tar.gz ($(du -h .gpu/pack.tar.gz | cut -f1)): $(ls "$stage/bin" | tr '\n' ' ')"
