#!/usr/bin/env bash
# Sets up (scripts/setup.sh), builds and runs every test. Tests that need a GPU report
# "skipped" without one. Usage: scripts/test.sh [BUILD_DIR [meson options...]]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
scripts/setup.sh "$@"
meson test -C "$build" --print-errorlogs --num-processes "$(nproc)"
