#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd "${NDT_BUILD_DIR:-build}"
# One test at a time: each uses both cores (OMP_NUM_THREADS=2).
ctest --output-on-failure --timeout 600
