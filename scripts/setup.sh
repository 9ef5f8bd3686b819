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
  libxml2-utils chromium        # the report test: xmllint, and loading the HTML in a headless browser
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "setup: installing ${missing[*]}"
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
