#!/usr/bin/env bash
# Configures and builds ndtrain in Release into build/ (or $NDT_BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${NDT_BUILD_DIR:-build}"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$build_dir" "$@"
