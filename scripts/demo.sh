#!/usr/bin/env bash
# The main job on its built-in default: set up, build, and train the tiny Inkling model on the
# bundled synthetic conversations (CPU). Extra arguments go to `quill demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec "${QUILL_BUILD:-build}/quill" demo "$@"
