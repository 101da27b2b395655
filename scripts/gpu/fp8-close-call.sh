#!/usr/bin/env bash
# One device call (issues 43 and 40): the FP8 experts' kernel's tests, the stacked FP8 projections' test, the experts'
# weight-gradient tests, the short convolution's tests; grouped_bench's FP8 and weight-gradient arms at the slice's
# counts and at a seed rank's (32 x 384 rows); then the slice's speed in bf16 and FP8 (`--no-fp8-wgrad`) at one and
# eight rows per step (random weights, per-op profiles of the gb8 arms). (It first measured two experiments, the FP8
# kernel's overlapped promotion and the weight gradient's L2 prefetch, both deleted after it:
# bench/results/2026-12-07-h100-close-call.)
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests quill grouped_bench
#   device: run(carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/fp8-close-call.sh")
# SLICE=0 stops after grouped_bench. Back: $OUT/fp8-close.txt, $OUT/tests.log, and fp8-call.sh's $OUT/fp8.txt and $OUT/fp8-slice.tar.gz.
set -uo pipefail
# shellcheck source=scripts/gpu/bundle-env.sh
source "$(dirname "$0")/bundle-env.sh"
mkdir -p "$OUT"
{
nvidia-smi --query-gpu=name --format=csv,noheader
echo "quill $(cat "$B/COMMIT" 2>/dev/null); $(date -u +%FT%TZ)"
filter='GroupedGemmWgmma.Fp8*:CudaStackedProjections.*:Fp8Cuda.*:GroupedWgradWgmma.*:*CudaShortConv*'
timeout 300 "$B/bin/cuda_tests" --gtest_filter="$filter" > "$OUT/tests.log" 2>&1
echo "cuda_tests rc $?"
grep -E "slice-shaped|stacked FP8|FAILED|PASSED|Failure" "$OUT/tests.log"
echo "== grouped_bench, the slice's counts"
timeout 90 "$B/bin/grouped_bench" 2>&1 | grep -E "^fp8|^backward weight"
echo "== grouped_bench, 32 experts x 384 rows (a seed rank's)"
read -ra counts <<< "$(printf "384 %.0s" $(seq 32))"
timeout 90 "$B/bin/grouped_bench" "${counts[@]}" 2>&1 | grep -E "^fp8|^backward weight"
} 2>&1 | tee "$OUT/fp8-close.txt"
[ "${SLICE:-1}" = 1 ] || exit 0  # SLICE=0: the tests and grouped_bench only
FP8='--fp8-format e4m3 --fp8-recipe blockwise --no-fp8-wgrad' TESTS=0 INIT=0 CEILINGS="${CEILINGS:-1}" CONV_STEPS=4 \
  GB8_STEPS=6 CONFIGS=configs/slice.json FP8_DENSE_ARM=0 LIMIT=220 bash "$(dirname "$0")/fp8-call.sh" > /dev/null 2>&1
grep -E "rc |tokens/s|^op |^fp8_|^linear_|^grouped_|^attention_" "$OUT/fp8.txt"
