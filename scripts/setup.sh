#!/usr/bin/env bash
# Installs what gpipe needs on Debian (bookworm or later) with apt-get, then builds it into
# build/. Safe to run again: it installs only what is missing and rebuilds incrementally.
# Usage: scripts/setup.sh [BUILD_DIR [meson options...]]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential pkg-config meson ninja-build libyaml-dev zlib1g-dev libopenblas-dev
          libjpeg62-turbo-dev openmpi-bin libopenmpi-dev
          sword-text-kjv sword-text-sparv libsword-utils sentencepiece
          dataset-fashion-mnist python3 python3-numpy)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

build=${1:-build}
shift || true
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "$@"
fi
ninja -C "$build"
