#!/usr/bin/env bash
# Installs what llmsys needs to build, test and run, from Debian packages.
# Idempotent: when every package is present it does nothing (no apt-get call at all).
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config
  libopenblas-dev            # cblas_sgemm for every matmul
  libopenmpi-dev openmpi-bin # data-parallel ranks
  libzmq3-dev                # messaging between services (serve, loader)
  libcjson-dev               # JSON configs, reports, wire messages
  libmicrohttpd-dev          # HTTP APIs (serve, victim serve)
  libxxhash-dev              # checksums of checkpoints and wire frames
  coinor-libcbc-dev          # exact ILP for the planner
  dataset-fashion-mnist      # victim/attack data for the steal module (gzip idx)
  python3-sklearn            # only for its real CSV tables (wine, breast cancer, digits) in bench_steal
  libfreetype-dev fonts-dejavu-core fonts-dejavu-extra # glyphs task of the steal module (rendered fonts)
  zlib1g-dev                 # reads the gzipped idx files
  libdnnl-dev                # oneDNN: int8/bf16 GEMM for mixed-precision training and prefill
  elfutils                   # eu-stack: stack dumps of training ranks (robust)
  clang libclang-rt-14-dev   # libFuzzer targets (make fuzz)
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Test-only oracles for the tokenizer (independent BPE implementations run by Node.js, exact
# versions in tests/text/oracle/package.json). Optional: without Node or the registry,
# the text.oracle test reports itself skipped.
oracle="$(cd "$(dirname "$0")/.." && pwd)/tests/text/oracle"
if command -v npm >/dev/null 2>&1 && [ ! -d "$oracle/node_modules/js-tiktoken" ]; then
  (cd "$oracle" && timeout 300 npm install --no-audit --no-fund --loglevel=error >/dev/null 2>&1) ||
    echo "setup: npm could not install the tokenizer test oracles; text.oracle will be skipped" >&2
fi
