#!/usr/bin/env bash
# Issue 40's profile call: the per-op table of the seed's three stage kinds (world ranks 0, 8 and 24 of
# TP4 SP PP4 12/10/10/10 EP8 DP2 on Inkling-Small, bf16 moments, offload 0.1: the smallest that fits stage 0)
# under `quill train --simulate-rank`, for each quill binary given, in one call; then the grouped expert GEMMs
# at a seed rank's shapes (32 local experts x 384 rows; grouped_bench) and the gather_rows tests.
# Each case: 16 rows per step (8 micro-batches), 3 steps, step 0 warm-up, step 1 measured unprofiled,
# step 2 profiled (scripts/gpu/seed-projection.sh does the runs and the per-stage summary).
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests grouped_bench && cp OLD/quill build/gpu-bundle/bin/quill-before
#   device: run(carry=["build/gpu-bundle"], needs_h200=true, command="bash scripts/gpu/seed-profile.sh")
# Back (one archive, the device tool returns few files): $OUT/seed-profile.tar.gz with BIN/CASE/ folders
# (plan.txt, train.log, summary.json, collectives.json, metrics.jsonl, projection.json, op_profile_step2.txt)
# and $OUT/seed-profile.txt, the log of the whole call.
# Then, with the last binary only, AFTER_CASES ["first-bf16r"]: stage 0 with bf16 moments, no offload and recompute.
# On an 80 GB H100 (no H200 to be had): H100=1 sets CASES="last-bf16h" (the last stage with the seed's offload,
# as issue 40's first profile), AFTER_CASES="first-bf16ru middle-bf16ru" (every layer recomputed: each stage fits)
# and DEVICE_MEMORY=140GiB (seed-projection.sh says why).
# Environment: BINS ["quill-before quill"] (names under the bundle's bin/), CASES ["first-bf16o middle-bf16o
# last-bf16o"], AFTER_CASES, GROUPED [1], TESTS [1].
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=$PWD/build/gpu-bundle
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
BINS=${BINS:-"quill-before quill"}
if [ "${H100:-0}" = 1 ]; then
  CASES=${CASES:-"last-bf16h"}
  AFTER_CASES=${AFTER_CASES-"first-bf16ru middle-bf16ru"}
  export DEVICE_MEMORY=${DEVICE_MEMORY:-140GiB}
fi
CASES=${CASES:-"first-bf16o middle-bf16o last-bf16o"}
R=/tmp/seed-profile
mkdir -p "$OUT" "$R"
{
echo "seed-profile: $(date -u +%FT%TZ); bundle $(cat "$B/COMMIT" 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if [ "${TESTS:-1}" = 1 ] && [ -x "$B/bin/cuda_tests" ]; then
  timeout 120 "$B/bin/cuda_tests" --gtest_brief=1 --gtest_filter='CudaGatherRows.*:CudaMoe*' 2>&1 | tail -5
fi
for bin in $BINS; do
  [ -x "$B/bin/$bin" ] || { echo "no $B/bin/$bin"; continue; }
  echo "=== $bin"
  # shellcheck disable=SC2086
  Q=$B/bin/$bin OUT=$R/$bin GLOBAL_BATCH=16 STEPS=3 WARMUP=1 PROFILE_STEP=2 CASE_TIMEOUT=200 \
    bash scripts/gpu/seed-projection.sh $CASES
done
if [ -n "${AFTER_CASES-first-bf16r}" ]; then
  echo "=== $bin: ${AFTER_CASES-first-bf16r}"
  # shellcheck disable=SC2086
  Q=$B/bin/$bin OUT=$R/$bin GLOBAL_BATCH=16 STEPS=3 WARMUP=1 PROFILE_STEP=2 CASE_TIMEOUT=200 \
    bash scripts/gpu/seed-projection.sh ${AFTER_CASES-first-bf16r}
fi
if [ "${GROUPED:-1}" = 1 ] && [ -x "$B/bin/grouped_bench" ]; then
  echo "=== grouped_bench at a seed rank's shapes (32 local experts x 384 rows)"
  timeout 120 "$B/bin/grouped_bench" $(printf '384 %.0s' $(seq 32)) 2>&1
fi
} 2>&1 | tee "$OUT/seed-profile.txt"
tar -czf "$OUT/seed-profile.tar.gz" -C "$R" . 2>/dev/null
