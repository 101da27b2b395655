#!/usr/bin/env bash
# `quill tune --measure` (docs/tune.md) for Inkling-Small on 32 H200 (8 per node), one device call at a time:
# the K best layouts of the modelled ranking, each stage role of each (first, middle, last: 3 runs of
# `quill train --simulate-rank` for a PP4 layout) run on this machine's GPU with random weights and synthetic
# 8,192-token rows, re-ranked by the measured compute. A run may take a minute or two, a device call at most 10, so each
# call runs the runs named as arguments (CANDIDATE:STAGE, quill tune's --measure-only) and keeps every run in
# the measure directory; a call with no argument runs whatever is still missing (under the call's limit: give
# arguments). Every call copies the run directories (not the rows) to $OUT/tune-measure, which the next call,
# on a fresh machine, takes back when carried as runs/tune-measure.
#   here:   cmake --build build -j2 && scripts/gpu-bundle.sh build build/gpu-bundle
#   device: run(carry=["build/gpu-bundle"], command="bash scripts/gpu/tune-measure.sh 1")          (candidate 1: 3 runs)
#   here:   copy that call's $OUT/tune-measure to runs/tune-measure
#   device: run(carry=["build/gpu-bundle", "runs/tune-measure"], command="bash scripts/gpu/tune-measure.sh 2")
#           (its output has the whole measured ranking: candidate 1's runs reused; again here, at any time:)
#           build/quill tune --model tests/fixtures/configs/inkling-small-hf.json --gpus 32 --gpus-per-node 8 \
#             --gpu h200 --measure 2 --measure-device cuda --measure-dir runs/tune-measure     (all reused: no GPU)
# $OUT/tune-measure.txt: the progress per run, both rankings and the per-stage table (modelled vs measured).
# K (default 2), STEPS (2: one warm-up, one measured), RUN_TIMEOUT (s per run, default 170: three runs and the
# search fit a 10-minute call).
# Dry run on the CPU (the command lines, not the figures): Q=build/quill DEVICE=cpu CONFIG=configs/seed-shape \
#   TUNE_FLAGS="--gpu cpu --device-memory 5MiB --row-tokens 32 --global-batch 16 --compute-rates RATES.json" \
#   OUT=/tmp/tm-dry bash scripts/gpu/tune-measure.sh
set -uo pipefail
# shellcheck source=scripts/gpu/bundle-env.sh
source "$(dirname "$0")/bundle-env.sh"
CONFIG=${CONFIG:-tests/fixtures/configs/inkling-small-hf.json}
TUNE_FLAGS=${TUNE_FLAGS:---gpu h200}
K=${K:-2}
STEPS=${STEPS:-2}
RUN_TIMEOUT=${RUN_TIMEOUT:-170}
M=${M:-/tmp/tune-measure}
mkdir -p "$OUT" "$M"
# Runs of an earlier call (carried back): the measure directory takes them unless it has its own.
if [ -d runs/tune-measure ]; then
  for d in runs/tune-measure/*/; do
    [ -d "$d" ] && [ ! -e "$M/$(basename "$d")" ] && cp -r "$d" "$M/"
  done
fi
only=()
for a in "$@"; do only+=(--measure-only "$a"); done
{
[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown); $(date -u +%FT%TZ)"
start=$(date +%s)
"$Q" tune --model "$CONFIG" --gpus 32 --gpus-per-node 8 $TUNE_FLAGS --top 10 --measure "$K" \
  --measure-steps "$STEPS" --measure-device "$DEVICE" --measure-dir "$M" --measure-timeout "$RUN_TIMEOUT" \
  "${only[@]}" < /dev/null 2>&1
echo "quill tune rc $? in $(( $(date +%s) - start )) s"
} 2>&1 | tee -a "$OUT/tune-measure.txt"
# The run directories back (their outputs and keys; the rows are made again where needed).
mkdir -p "$OUT/tune-measure"
for d in "$M"/*/; do
  case $(basename "$d") in rows-*) continue ;; esac
  cp -r "$d" "$OUT/tune-measure/"
done
