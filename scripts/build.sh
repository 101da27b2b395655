#!/usr/bin/env bash
# Configures and builds quill into ${QUILL_BUILD:-build}. Uses the CUDA toolkit when nvcc exists.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${QUILL_BUILD:-build}
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${QUILL_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$(nproc)"
