#!/usr/bin/env bash
# The multi-host benchmark (scripts/bench.sh hosts; docs/multinode.md): gpt2-124m
# training across 2 emulated hosts x 2 ranks (scripts/hosts.sh, TCP between them) at two
# link speeds, one sequence of 64 tokens per rank (the gradients' 500 MB per step
# against little compute: the emulated hosts share this machine's cores), DDP flat and hierarchical, HSDP (shard inside a host, replicate across)
# and FSDP across the hosts, each step time the median of the timed steps beside the
# planner's prediction for the same layout and the link's measured bandwidth. Needs root. Slow: about 10 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
out=/tmp/ndtrain-bench-hosts
mkdir -p "$out"
[ -s "$out/train.bin" ] || ./build/ndtrain prepare /usr/share/games/fortunes --out "$out" --force >/dev/null
bash scripts/hosts.sh up 2
trap 'bash scripts/hosts.sh down' EXIT
placement=$(bash scripts/hosts.sh mpirun-args 2 2)
common=(--set model.preset=gpt2-124m --set train.steps=4 --set train.batch_size=4 --set train.seq_len=64
        --set train.eval_every=0 --set train.eval_batches=1 --set sample.tokens=0 --set runtime.threads=1
        --set data.train="$out/train.bin" --set data.val="$out/val.bin" --set runtime.comm_timeout_s=600)
median_step() {  # the median step_s of steps 2.. of a metrics file
  python3 - "$1" <<'PY'
import json, statistics, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"step_s"' in l]
print(f"{statistics.median(r['step_s'] for r in steps[1:]):.2f}")
PY
}
planned() {  # the planner's step time for a mesh: DP_REPLICATE DP_SHARD ZERO_STAGE GBIT_S [--set ...] (the run's)
  ./build/ndtrain plan --preset gpt2-124m --device cpu --cpu-ranks 4 --nodes 2 --devices-per-node 2 --seq 64 --batch 4 \
    --micro-batch-sizes 1 --recompute none --zero-stages "$3" --inter-node-gbps "$4" "${@:5}" --json "$out/plan.json" \
    >/dev/null 2>&1 || true
  python3 - "$out/plan.json" "$1" "$2" <<'PY'
import json, sys
rep, shard = int(sys.argv[2]), int(sys.argv[3])
rows = [r for r in json.load(open(sys.argv[1]))["layouts"]
        if r["dp_replicate"] == rep and r["dp_shard"] == shard and r["tp"] == 1 and r["pp"] == 1 and r["cp"] == 1
        and "time_s" in r]
print(f"{rows[0]['time_s']['step']:.2f}" if rows else "-")
PY
}
link_gbps() {  # what the shaped link carries, Gbit/s per direction: a 64 MiB all-gather between the hosts
  # shellcheck disable=SC2046
  mpirun --oversubscribe --bind-to none --allow-run-as-root -x OMP_NUM_THREADS=1 \
    $(bash scripts/hosts.sh mpirun-args 2 1 | head -1) -np 2 ./build/ndtrain bench comm --min-bytes 67108864 \
    --max-bytes 67108864 --iters 5 --warmup 1 2>/dev/null | awk '/^all_gather/ {getline; printf "%.2f", $6 * 8}'
}
lscpu | grep -m1 'Model name'
for link in "1gbit 1ms" "10gbit 0.1ms"; do
  read -r rate delay <<<"$link"
  bash scripts/hosts.sh shape "$rate" "$delay"
  # The planner is given the link as measured: on emulated hosts the kernel's TCP over veth,
  # on the cores the ranks share, may carry less than the shaping allows.
  gbps=$(link_gbps)
  echo "$rate: the link carries $gbps Gbit/s (a 64 MiB all-gather between the hosts, ndtrain bench comm)"
  for row in "ddp-flat|--set parallel.dp_reduction=flat|4 1 0" \
             "ddp-hierarchical|--set parallel.dp_reduction=hierarchical|4 1 0" \
             "hsdp|--set parallel.zero_stage=3|2 2 3" \
             "fsdp|--set parallel.zero_stage=3 --set parallel.dp_shard=4|1 4 3"; do
    IFS='|' read -r name sets mesh <<<"$row"
    rm -rf "$out/$name"
    # shellcheck disable=SC2086
    mpirun --oversubscribe --bind-to none --allow-run-as-root -x OMP_NUM_THREADS=1 $placement -np 4 \
      ./build/ndtrain train "" "${common[@]}" $sets --set runtime.out_dir="$out/$name" >"$out/$name.log" 2>&1
    # shellcheck disable=SC2086
    echo "$rate $delay | $name | step $(median_step "$out/$name/metrics.jsonl") s | planner $(planned $mesh "$gbps" $sets) s"
  done
done
