#!/usr/bin/env bash
# `--layout auto` against hand-chosen layouts (docs/planner.md): gpt2-124m trained on
# RANKS ranks of this machine under mpirun with the layout the planner chooses and with
# DDP, FSDP, tp = 2 and pp = 2, the five alternated ROUNDS times in one session (the
# machines are noisy: figures from the same minutes). Each run's tokens/s is its median
# over the steps after the first (metrics.jsonl's summary); per layout the median over
# the rounds, and its ratio to the best hand-chosen one.
# Usage: scripts/bench_layout.sh [RANKS] [ROUNDS] [STEPS]   (default: 2 ranks, 2 rounds, 4 steps)
# Needs build/ndtrain and jq. Batch 8 sequences of 128 tokens (BATCH, SEQ override), the
# vocabulary padded to 50304 as llm.c does (50257 does not split over tp = 2).
set -euo pipefail
ranks="${1:-2}"; rounds="${2:-2}"; steps="${3:-4}"
batch="${BATCH:-8}"; seq="${SEQ:-128}"
root="$(cd "$(dirname "$0")/.." && pwd)"; bin="$root/build/ndtrain"
work="$(mktemp -d /tmp/ndt_bench_layout.XXXXXX)"; trap 'rm -rf "$work"' EXIT
lscpu | grep -m1 'Model name'; echo "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $ranks ranks"
"$bin" prepare "$root/docs" --out "$work/data" --val-fraction 0.01 > /dev/null
cat > "$work/run.toml" <<TOML
[model]
preset = "gpt2-124m"
vocab_size = 50304  # llm.c's padding of 50257: divisible by tp = 2 (the data is byte-level)
max_seq_len = $seq
[train]
steps = $steps
batch_size = $batch
seq_len = $seq
eval_every = 0
[sample]
tokens = 0
[checkpoint]
save_on_exit = false
[data]
train = "$work/data/train.bin"
TOML
declare -A layouts=(
  [auto]="--layout auto"
  [ddp]=""
  [fsdp]="--set parallel.zero_stage=3"
  [tp2]="--set parallel.tp=2"
  [pp2]="--set parallel.pp=2"
)
order=(auto ddp fsdp tp2 pp2)
declare -A rates
for r in $(seq "$rounds"); do
  for name in "${order[@]}"; do
    out="$work/$name-$r"
    # shellcheck disable=SC2086
    mpirun -np "$ranks" --oversubscribe --bind-to none --allow-run-as-root -x OMP_NUM_THREADS=1 \
      "$bin" train "$work/run.toml" ${layouts[$name]} --set runtime.out_dir="$out" > "$out.log" 2>&1 ||
      { echo "$name failed:"; tail -5 "$out.log"; exit 1; }
    rate="$(jq -r 'select(.summary) | .summary.median_tokens_per_s' "$out/metrics.jsonl")"
    rates[$name]+="$rate "
    extra=""
    [ "$name" = auto ] && extra=" ($(grep -m1 'chosen:' "$out.log" | sed 's/^ *chosen: *//'))"
    echo "round $r $name: $rate tokens/s$extra"
  done
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2 ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2)}'; }
best=0; best_name=""
for name in ddp fsdp tp2 pp2; do
  m="$(median ${rates[$name]})"
  if awk -v a="$m" -v b="$best" 'BEGIN {exit !(a > b)}'; then best="$m"; best_name="$name"; fi
done
for name in "${order[@]}"; do
  m="$(median ${rates[$name]})"
  echo "$name: median $m tokens/s, $(awk -v a="$m" -v b="$best" 'BEGIN {printf "%.1f", 100 * a / b}')% of the best hand-chosen ($best_name)"
done
