#!/usr/bin/env bash
# ndtrain against PyTorch on the same CPU (issue 36's speed table, docs/performance.md):
# gpt2-124m on 2 threads, `ndtrain bench train` and bench/pytorch/gpt2_step.py alternated
# ROUNDS times in one session (the machines are noisy: ratios from the same minutes), for
# fp32 at B=8 T=256 and B=4 T=64 and bf16 at B=8 T=256 (PyTorch: autocast). Prints each
# pair's steps per round, then per run the median of the paired ratios (PyTorch step /
# ndtrain step) and bf16 against ndtrain's own fp32 of the same round.
# Usage: scripts/bench_vs_pytorch.sh [ROUNDS]   (default 3; NDTRAIN names the binary;
# PyTorch: apt-get install python3-torch, bench/pytorch/README.md)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
ndtrain="${NDTRAIN:-./build/ndtrain}"
lscpu | grep -m1 'Model name'
grep -o -w 'avx2\|avx512f\|avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
# Both sides' OpenBLAS honours it: Haswell's on an AVX-512 Zen 5 made fp32 1.75x slower (docs/performance.md).
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
ours() {  # precision batch seq steps -> the median step in seconds
  OMP_NUM_THREADS=2 "$ndtrain" bench train --preset gpt2-124m --threads 2 --precision "$1" --batch "$2" \
    --seq "$3" --steps "$4" | awk '/median step/ {print $3}'
}
theirs() {  # precision batch seq steps -> the median step in seconds
  /usr/bin/python3 bench/pytorch/gpt2_step.py --threads 2 --warmup 1 --precision "$1" --batch "$2" --seq "$3" \
    --steps "$4" | python3 -c 'import json, sys; print(json.loads(sys.stdin.read().splitlines()[-1])["median_step_s"])'
}
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2 ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2)}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
runs=("fp32 8 256 3" "fp32 4 64 5" "bf16 8 256 3")
declare -A pairs own_fp32 bf16_vs_fp32
for r in $(seq "$rounds"); do
  for run in "${runs[@]}"; do
    read -r precision batch seq steps <<<"$run"
    a=$(ours "$precision" "$batch" "$seq" "$steps")
    b=$(theirs "$precision" "$batch" "$seq" "$steps")
    echo "round $r, $precision B=$batch T=$seq: ndtrain $a s, PyTorch $b s, ratio $(ratio "$b" "$a")"
    pairs[$run]+="$(ratio "$b" "$a") "
    [[ "$run" == "fp32 8 256 3" ]] && own_fp32[$r]=$a
    [[ "$run" == "bf16 8 256 3" ]] && bf16_vs_fp32[$r]=$(ratio "${own_fp32[$r]}" "$a")
  done
done
for run in "${runs[@]}"; do
  read -r precision batch seq _ <<<"$run"
  # shellcheck disable=SC2086  # the ratios are words
  echo "$precision B=$batch T=$seq: ndtrain at $(median ${pairs[$run]})x PyTorch's speed (median of paired ratios: ${pairs[$run]% })"
done
echo "bf16 B=8 T=256 against ndtrain's fp32 of the same round: $(median "${bf16_vs_fp32[@]}")x (${bf16_vs_fp32[*]})"
