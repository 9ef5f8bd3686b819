#!/usr/bin/env bash
# One rank with 2 threads against 2 ranks with 1 thread each (DDP) on the same model and
# global batch (issue 36 part 4: the first must reach >= 95% of the second's tokens/s),
# the two sides alternated ROUNDS times in one session (the machines are noisy: ratios
# from the same minutes), for each precision; then the median step of each side and the
# median of the paired ratios (2x1 step / 1x2 step: >= 0.95 meets the target).
# Usage: scripts/bench_threads_vs_ranks.sh [ROUNDS] [PRESET] [BATCH] [SEQ] [PRECISIONS]
# (default: 2 rounds of gpt2-124m, B=8, T=256, "fp32 bf16"; NDTRAIN names the binary).
set -euo pipefail
rounds="${1:-2}"; preset="${2:-gpt2-124m}"; batch="${3:-8}"; seq="${4:-256}"; precisions="${5:-fp32 bf16}"
ndtrain="${NDTRAIN:-./build/ndtrain}"
lscpu | grep -m1 'Model name'
step() {  # command... -> the median step in seconds
  "$@" --preset "$preset" --batch "$batch" --seq "$seq" --steps 3 | awk '/median step/ {print $3}'
}
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2 ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2)}'; }
for precision in $precisions; do
  threads=(); ranks=(); ratios=()
  for r in $(seq "$rounds"); do
    t=$(OMP_NUM_THREADS=2 step "$ndtrain" bench train --threads 2 --precision "$precision")
    d=$(step mpirun -np 2 --oversubscribe --bind-to none --allow-run-as-root -x OMP_NUM_THREADS=1 \
          "$ndtrain" bench train --threads 1 --precision "$precision" --reduce-dtype "$precision")
    echo "$precision round $r: 1 rank x 2 threads $t s, 2 ranks x 1 thread (DDP) $d s"
    threads+=("$t"); ranks+=("$d"); ratios+=("$(awk -v a="$d" -v b="$t" 'BEGIN {print a / b}')")
  done
  echo "$preset B=$batch T=$seq $precision: median step 1x2 $(median "${threads[@]}") s, 2x1 $(median "${ranks[@]}") s;" \
       "1x2 at $(median "${ratios[@]}") of 2x1's speed (median of paired ratios)"
done
