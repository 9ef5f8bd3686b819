#!/usr/bin/env bash
# A hot path against a previous binary (for developers, not CI): `ndtrain bench train`
# of each preset with the two binaries alternated ROUNDS times in one session (the
# machines are noisy: ratios from the same minutes), then per preset the median
# tokens/s of each and the median of the paired new/old ratios, with each binary's
# ledger peak and RSS growth.
# Usage: scripts/ab_bench.sh OLD_BINARY NEW_BINARY [ROUNDS] [PRESET:STEPS ...]
# (default: 4 rounds of gpt2-tiny:10 and gpt2-124m:3 at --batch 8 --seq 256 --threads 2)
# NDT_BENCH_ARGS adds options to both sides, e.g. NDT_BENCH_ARGS="--precision bf16".
set -euo pipefail
old="$1"; new="$2"; rounds="${3:-4}"; shift $(( $# < 3 ? $# : 3 ))
presets=("$@"); [ ${#presets[@]} -gt 0 ] || presets=(gpt2-tiny:10 gpt2-124m:3)
lscpu | grep -m1 'Model name'
run() {  # binary preset steps -> "tokens/s ledger_peak_gib rss_growth_gib"
  # shellcheck disable=SC2086  # NDT_BENCH_ARGS is split into options on purpose
  "$1" bench train --preset "$2" --batch 8 --seq 256 --threads 2 --steps "$3" ${NDT_BENCH_ARGS:-} |
    awk '/median step/ {for (i=1;i<=NF;i++) if ($i=="tokens/s,") t=$(i-1)}
         /memory \(rank 0\)/ {for (i=1;i<=NF;i++) {if ($i=="ledger") l=$(i+2); if ($i=="growth") r=$(i+1)}}
         END {print t, l, r}'
}
for spec in "${presets[@]}"; do
  preset="${spec%%:*}"; steps="${spec#*:}"
  ratios=(); olds=(); news=()
  for r in $(seq "$rounds"); do
    read -r o ol orss < <(run "$old" "$preset" "$steps")
    read -r n nl nrss < <(run "$new" "$preset" "$steps")
    echo "$preset round $r: old $o tokens/s (ledger $ol GiB, RSS growth $orss GiB), new $n tokens/s (ledger $nl GiB, RSS growth $nrss GiB)"
    olds+=("$o"); news+=("$n"); ratios+=("$(awk -v a="$n" -v b="$o" 'BEGIN {print a / b}')")
  done
  median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2 ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2)}'; }
  echo "$preset: median old $(median "${olds[@]}") tokens/s, new $(median "${news[@]}") tokens/s, median ratio new/old $(median "${ratios[@]}")"
done
