#!/usr/bin/env bash
# Sets up, builds and runs every test (CPU; GPU tests skip themselves without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
scripts/build.sh
# tiktoken's o200k_base ranks for the tokenizer exactness tests (npm); without them those tests
# skip and say why.
scripts/fetch-o200k.sh || echo "test.sh: could not fetch the o200k_base ranks; the o200k tokenizer tests will skip" >&2
cd "${QUILL_BUILD:-build}"
ctest --output-on-failure -j "$(nproc)"
