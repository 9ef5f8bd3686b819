#!/usr/bin/env bash
# The GPU check (docs/gpu.md): on a machine with an NVIDIA GPU, builds ndtrain with the
# CUDA backend (NDT_CUDA=on, only the GPU test binary, ccache) into build-gpu/ (or
# $NDT_GPU_BUILD_DIR), runs every GPU test and prints a short report. Fails, non-zero and
# saying so, where no GPU is visible, where a GPU test fails, and where one is skipped
# (on a GPU machine a skip means the check did not happen). The training benchmark on the
# device (ndtrain bench train --device cuda) is not part of it yet: the model does not
# run on the cuda backend (docs/gpu.md says what is wired).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${NDT_GPU_BUILD_DIR:-build-gpu}"
log_dir="$build_dir/gpu-check"

die() {
  echo "gpu-check: FAILED: $*" >&2
  exit 1
}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! gpus="$(nvidia-smi -L 2>/dev/null)" || [ -z "$gpus" ]; then
  die "no NVIDIA GPU is visible here (nvidia-smi -L found none): nothing was checked; run this on a GPU machine"
fi
nvcc="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"
command -v nvcc >/dev/null 2>&1 && nvcc="$(command -v nvcc)"
[ -x "$nvcc" ] || die "no nvcc (looked in PATH and ${CUDA_HOME:-/usr/local/cuda}/bin): install the CUDA toolkit"

start=$(date +%s)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNDT_CUDA=on -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null || die "configure with NDT_CUDA=on"
ninja -C "$build_dir" test_cuda >/dev/null || die "build of test_cuda (run: ninja -C $build_dir test_cuda)"
built=$(date +%s)

mkdir -p "$log_dir"
# Without a device this test checks the refusal; with one it skips: not part of the GPU run.
filter='-CudaDevice.WithoutADeviceTheBackendIsRefusedByName'
set +e
"$build_dir/test_cuda" --gtest_filter="$filter" >"$log_dir/test_cuda.log" 2>&1
status=$?
set -e
# GoogleTest's closing summary: "[  PASSED  ] 12 tests.", "[  SKIPPED ] 1 test, listed below:", ...
summary() { sed -n "s/^\[  $1 *\] \([0-9][0-9]*\) tests\{0,1\}[,.].*/\1/p" "$log_dir/test_cuda.log" | tail -n 1; }
passed=$(summary PASSED)
failed=$(summary FAILED)
skipped=$(summary SKIPPED)
passed=${passed:-0} failed=${failed:-0} skipped=${skipped:-0}
done_at=$(date +%s)

echo "gpu-check report"
echo "  device:  $(echo "$gpus" | head -n 1)"
echo "  build:   $((built - start)) s (test_cuda, NDT_CUDA=on, sm_90)"
echo "  tests:   $passed passed, $failed failed, $skipped skipped in $((done_at - built)) s (log: $log_dir/test_cuda.log)"
echo "  not run: ndtrain bench train --device cuda (the model is not on the device yet; docs/gpu.md)"
[ "$status" -eq 0 ] || die "GPU tests failed (exit $status); see $log_dir/test_cuda.log"
[ "$skipped" -eq 0 ] || die "$skipped GPU test(s) skipped on a GPU machine; see $log_dir/test_cuda.log"
[ "$passed" -gt 0 ] || die "no GPU test ran; see $log_dir/test_cuda.log"
echo "gpu-check: OK"
