#!/usr/bin/env bash
# The main job: installs what is missing, builds, prepares the fortunes corpus and
# trains a small byte-level GPT on it with data parallelism over NDT_RANKS ranks
# (default 2, one per core), ending with a text sample and the loss curve's first and
# last values. Extra arguments are passed to `ndtrain train` (e.g.
# --set train.steps=100). NDT_RANKS=1 runs one process without mpirun.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh ndtrain
# Prepared once: prepare refuses to replace shards without --force, so a rerun (or a
# run interrupted between the two shards) redoes it only when one is missing.
if [ ! -f data/fortunes/train.bin ] || [ ! -f data/fortunes/val.bin ]; then
  ./build/ndtrain prepare /usr/share/games/fortunes --out data/fortunes --force
fi
ranks="${NDT_RANKS:-2}"
# runs/demo belongs to the demo: a rerun starts over, deleting the previous demo's
# checkpoints (ndtrain refuses that without --overwrite; with --resume it continues).
if [ "$ranks" = 1 ]; then
  exec ./build/ndtrain train configs/demo.toml --overwrite "$@"
fi
# As root mpirun needs --allow-run-as-root; with more ranks than cores, --oversubscribe.
# --bind-to none lets each rank's threads use any core; ndtrain picks its thread count
# from the cores and the ranks on the node (runtime.threads = 0).
exec mpirun -np "$ranks" --oversubscribe --bind-to none --allow-run-as-root \
  ./build/ndtrain train configs/demo.toml --overwrite "$@"
