#!/usr/bin/env bash
# Sets up, builds and runs every test (CPU; GPU tests skip themselves without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd "${QUILL_BUILD:-build}"
ctest --output-on-failure -j "$(nproc)"
