#!/usr/bin/env bash
# The main job: installs what is missing, builds, prepares the fortunes corpus and
# trains a small byte-level GPT on it, ending with a text sample and the loss curve's
# first and last values. Extra arguments are passed to `ndtrain train` (e.g.
# --set train.steps=100).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh ndtrain
if [ ! -f data/fortunes/train.bin ]; then
  ./build/ndtrain prepare /usr/share/games/fortunes --out data/fortunes
fi
./build/ndtrain train configs/demo.toml "$@"
