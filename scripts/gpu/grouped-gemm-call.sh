#!/usr/bin/env bash
# One device call (issues 40 and 43; docs/decisions/grouped-gemm-wgmma.md): the routed experts' forward and
# input-gradient GEMMs by quill's wgmma kernel (--grouped-gemm-kernel wgmma) against cuBLASLt's per-expert GEMMs.
# First the kernel's tests and the grouped op tests (cuda_tests), then grouped_bench on a seed rank's counts (32
# experts x 384 rows) and on the slice's (one measured step), each op by both paths, and their agreement.
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests grouped_bench quill
#   device: run(carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/grouped-gemm-call.sh")
# Back: $OUT/grouped-gemm.txt (the call's log) and $OUT/cuda_tests.log.
set -uo pipefail
# shellcheck source=scripts/gpu/bundle-env.sh
source "$(dirname "$0")/bundle-env.sh"
mkdir -p "$OUT"
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
timeout 300 "$B/bin/cuda_tests" --gtest_filter='GroupedGemmWgmma.*:GroupedLinearCuda.*:Fp8Cuda.*' > "$OUT/cuda_tests.log" 2>&1
echo "cuda_tests rc $?"
grep -E "^\[  (FAILED|PASSED)|rel L2|Failure|error" "$OUT/cuda_tests.log" | head -40
echo "=== grouped_bench, a seed rank: 32 experts x 384 rows"
# shellcheck disable=SC2046
timeout 120 "$B/bin/grouped_bench" $(printf '384 %.0s' $(seq 32)) 2>&1 | sed '/^per expert/q'
echo "=== grouped_bench, the slice's counts"
timeout 120 "$B/bin/grouped_bench" 2>&1 | sed '/^per expert/q'
} 2>&1 | tee "$OUT/grouped-gemm.txt"
