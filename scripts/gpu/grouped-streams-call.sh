#!/usr/bin/env bash
# One device call (issue 40): the routed experts' grouped GEMMs over several streams (--moe-grouped-gemm-streams,
# docs/decisions/grouped-gemm-streams.md). First the bit test (2 and 4 streams against one, three training steps)
# and the grouped GEMM tests (stop there if one fails); then grouped_bench at a seed rank's 32 experts x 384 rows and
# at the slice's counts (the ops with 1, 2 and 4 streams); then, unless SEED=0, the seed's last stage under
# --simulate-rank with 1 and with STREAMS streams (scripts/gpu/seed-projection.sh's CASE, default last-bf16o).
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests grouped_bench quill && git rev-parse --short HEAD > build/gpu-bundle/COMMIT
#   device: run(carry=["build/gpu-bundle"], command="bash scripts/gpu/grouped-streams-call.sh")
# Back: $OUT/grouped-streams.txt (the call's log), cuda_tests.log, grouped-bench-*.txt, streams-seed.tar.gz.
set -uo pipefail
# shellcheck source=scripts/gpu/bundle-env.sh
source "$(dirname "$0")/bundle-env.sh"
STREAMS=${STREAMS:-4}
CASE=${CASE:-last-bf16o}
R=/tmp/grouped-streams
mkdir -p "$OUT" "$R"
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
timeout 200 "$B/bin/cuda_tests" --gtest_filter='CudaDeterminism.GroupedGemmStreamsGiveTheOneStreamBits:GroupedLinearCuda.*' \
  > "$OUT/cuda_tests.log" 2>&1
rc=$?
echo "cuda_tests rc $rc"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]|Failure|differ" "$OUT/cuda_tests.log" | head -20
if [ $rc -ne 0 ]; then echo "tests failed: no timing"; exit 1; fi
timeout 120 "$B/bin/grouped_bench" $(printf '384 %.0s' $(seq 32)) > "$OUT/grouped-bench-384.txt" 2>&1
echo "-- 32 experts x 384 rows"; grep -E "^(forward|backward input)" "$OUT/grouped-bench-384.txt"
timeout 120 "$B/bin/grouped_bench" > "$OUT/grouped-bench-slice.txt" 2>&1
echo "-- slice counts"; grep -E "^(forward|backward input)" "$OUT/grouped-bench-slice.txt"
date -u +%T
if [ "${SEED:-1}" = 0 ]; then exit 0; fi
for s in 1 "$STREAMS"; do
  TRAIN_EXTRA="--moe-grouped-gemm-streams $s ${TRAIN_EXTRA:-}" OUT=$R/streams$s GLOBAL_BATCH=16 STEPS=3 WARMUP=1 \
    CASE_TIMEOUT=${CASE_TIMEOUT:-150} bash scripts/gpu/seed-projection.sh "$CASE" 2>&1 | grep -E "^rank|train rc|error|refused"
done
tar -czf "$OUT/streams-seed.tar.gz" -C "$R" . 2>/dev/null
date -u +%T
} 2>&1 | tee "$OUT/grouped-streams.txt"
