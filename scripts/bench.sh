#!/usr/bin/env bash
# The benchmarks behind docs/performance.md. Builds, then prints, for each model and
# thread count, training tokens/s and MFU next to the sgemm throughput at the same
# thread count, and memory (predicted, ledger, process RSS). Slow: the gpt2-124m runs
# take a few minutes on 2 cores. Usage: scripts/bench.sh [train] [comm] [dp] [zero] [tp] [cp] [usp] [moe] [checkpoint] [hosts]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh ndtrain >/dev/null
what="${*:-train}"
mpirun_flags=(--oversubscribe --bind-to none --allow-run-as-root -x OMP_NUM_THREADS=1)
for part in $what; do
  case "$part" in
    train)
      for threads in 1 2; do
        ./build/ndtrain bench train --preset gpt2-124m --batch 8 --seq 256 --threads "$threads" --steps 3
        ./build/ndtrain bench train --preset gpt2-tiny --batch 8 --seq 256 --threads "$threads" --steps 10
      done
      ;;
    comm)
      mpirun -np 2 "${mpirun_flags[@]}" ./build/ndtrain bench comm
      mpirun -np 2 "${mpirun_flags[@]}" ./build/ndtrain bench overlap
      ;;
    dp)
      ./build/ndtrain bench train --preset gpt2-124m --batch 8 --seq 256 --threads 2 --steps 3
      mpirun -np 2 "${mpirun_flags[@]}" ./build/ndtrain bench train --preset gpt2-124m --batch 8 --seq 256 --threads 1 --steps 3
      ;;
    zero)
      for stage in 0 1 2 3; do
        mpirun -np 2 "${mpirun_flags[@]}" ./build/ndtrain bench train --preset gpt2-124m --batch 8 --seq 256 --threads 1 --steps 3 --zero-stage "$stage"
      done
      mpirun -np 2 "${mpirun_flags[@]}" ./build/ndtrain bench train --preset gpt2-124m --batch 8 --seq 256 --threads 1 --steps 3 --zero-stage 3 --no-prefetch
      ;;
    tp)
      # gpt2's vocabulary (50257) does not split over 2 ranks: all three use llm.c's padded 50304.
      ./build/ndtrain bench train --preset gpt2-124m --batch 8 --seq 256 --threads 2 --steps 3 --vocab 50304
      mpirun -np 2 "${mpirun_flags[@]}" ./build/ndtrain bench train --preset gpt2-124m --batch 8 --seq 256 --threads 1 --steps 3 --vocab 50304 --tp 2
      mpirun -np 2 "${mpirun_flags[@]}" ./build/ndtrain bench train --preset gpt2-124m --batch 8 --seq 256 --threads 1 --steps 3 --vocab 50304 --tp 2 --sequence-parallel
      ;;
    cp)
      # Long context on a tiny model: one rank with 2 threads, then ring and Ulysses at
      # cp = 2 (one thread per rank), alternated three times (the machine is noisy).
      ./build/ndtrain bench train --preset gpt2-tiny --batch 1 --seq 4096 --threads 2 --steps 3
      for round in 1 2 3; do
        for mode in ring ulysses; do
          mpirun -np 2 "${mpirun_flags[@]}" ./build/ndtrain bench train --preset gpt2-tiny --batch 1 --seq 4096 --threads 1 --steps 5 --cp 2 --cp-mode "$mode"
        done
      done
      ./build/ndtrain bench train --preset llama-tiny --batch 1 --seq 1024 --steps 1 --memory-budget-gib 1
      ;;
    usp)
      # cp = 4 on 4 ranks (oversubscribed on 2 cores, one thread per rank): ring, Ulysses
      # and USP (2 Ulysses ranks x a ring of 2), alternated three times.
      for round in 1 2 3; do
        for mode in ring ulysses usp; do
          ulysses=()
          [[ "$mode" == usp ]] && ulysses=(--cp-ulysses 2)
          mpirun -np 4 "${mpirun_flags[@]}" ./build/ndtrain bench train --preset gpt2-tiny --batch 1 --seq 4096 --threads 1 --steps 4 --cp 4 --cp-mode "$mode" "${ulysses[@]}"
        done
      done
      ;;
    moe)
      # llama-moe-tiny (8 experts, top-2): one rank with 2 threads, then 2 ranks with one
      # thread each, DDP (every expert on both) and ep = 2, alternated three times.
      for round in 1 2 3; do
        OMP_NUM_THREADS=2 ./build/ndtrain bench train --preset llama-moe-tiny --batch 8 --seq 256 --threads 2 --steps 8
        for ep in 1 2; do
          mpirun -np 2 "${mpirun_flags[@]}" ./build/ndtrain bench train --preset llama-moe-tiny --batch 8 --seq 256 --threads 1 --steps 8 --ep "$ep"
        done
      done
      ;;
    checkpoint)
      ./build/ndtrain bench checkpoint --preset gpt2-124m --reps 3
      ;;
    hosts)
      bash scripts/bench_hosts.sh
      ;;
    *) echo "unknown benchmark '$part' (train, comm, dp, zero, tp, cp, usp, moe, checkpoint, hosts)" >&2; exit 2 ;;
  esac
done
