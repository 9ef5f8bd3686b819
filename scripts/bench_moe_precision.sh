#!/usr/bin/env bash
# MoE bf16 (and fp16) against fp32 step time (issue 36, section 3; docs/moe.md, "Precision"):
# llama-moe-tiny scaled to d_model 512 (d_ff 1408, 8 experts of width 704, top-2, 4
# blocks, heads of 128), one rank, 2 threads, B=8 T=256, on byte-level random text.
# `ndtrain train` of each precision alternated ROUNDS times in one session (the machines
# are noisy: ratios from the same minutes); each run's summary median tokens/s, then per
# precision the median and the median of the paired ratios against fp32.
# Usage: scripts/bench_moe_precision.sh [ROUNDS] [STEPS] [PRECISION ...]  (default 3 rounds of 8 steps, bf16)
set -euo pipefail
bin="${NDTRAIN:-./build/ndtrain}"; rounds="${1:-3}"; steps="${2:-8}"; shift $(( $# < 2 ? $# : 2 ))
lows=("$@"); [ ${#lows[@]} -gt 0 ] || lows=(bf16)
lscpu | grep -m1 'Model name'
dir="$(mktemp -d)"; trap 'rm -rf "$dir"' EXIT
head -c 3000000 /dev/urandom | base64 > "$dir/text.txt"
"$bin" prepare "$dir/text.txt" --out "$dir/data" > /dev/null
cat > "$dir/moe.toml" <<TOML
[model]
preset = "llama-moe-tiny"
d_model = 512
d_ff = 1408
moe_d_ff = 704
[train]
steps = $steps
batch_size = 8
seq_len = 256
log_every = 1000
eval_batches = 1
[data]
train = "$dir/data/train.bin"
[sample]
tokens = 0
[runtime]
threads = 2
out_dir = ""
TOML
run() {  # precision -> median tokens/s of the run
  OMP_NUM_THREADS=2 "$bin" train "$dir/moe.toml" --set precision.compute="$1" |
    awk '/^throughput: median/ {print $3}'
}
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2 ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2)}'; }
declare -A all ratios
for r in $(seq "$rounds"); do
  f="$(run fp32)"; all[fp32]+="$f "; line="round $r: fp32 $f tokens/s"
  for p in "${lows[@]}"; do
    t="$(run "$p")"; all[$p]+="$t "; ratios[$p]+="$(awk -v a="$t" -v b="$f" 'BEGIN {print a / b}') "
    line+=", $p $t tokens/s"
  done
  echo "$line"
done
echo "fp32: median $(median ${all[fp32]}) tokens/s"
for p in "${lows[@]}"; do
  echo "$p: median $(median ${all[$p]}) tokens/s, median ratio $p/fp32 $(median ${ratios[$p]})"
done
