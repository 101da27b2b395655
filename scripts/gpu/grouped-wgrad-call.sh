#!/usr/bin/env bash
# One device call (issue 40): the experts' weight gradient by quill's wgmma kernel (--grouped-wgrad-kernel wgmma,
# src/ops/cuda/grouped_wgrad_wg.cu). First its tests against the CPU and cuBLASLt (stop there if one fails), then
# grouped_bench at a seed rank's 32 experts x 384 rows and at the slice's counts (both kernels, accumulating and
# writing), then the seed's stage 0 under --simulate-rank with cuBLASLt and with wgmma in the same call, and the
# middle and last stages with wgmma (scripts/gpu/seed-profile.sh cases, bf16 moments, offload 0.1).
#   here:   cmake --build build && scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests grouped_bench
#           && git rev-parse --short HEAD > build/gpu-bundle/COMMIT
#   device: run(carry=["build/gpu-bundle"], needs_h200=true, command="bash scripts/gpu/grouped-wgrad-call.sh")
# On an 80 GB H100: BASE_CASES=last-bf16h WG_CASES=last-bf16h DEVICE_MEMORY=140GiB (only the last stage fits, with the
# seed's offload 0.7; seed-profile.sh says why).
# SEED=0 stops after the kernel's tests and grouped_bench (a short call when device time is scarce).
# Back: $OUT/grouped-wgrad.txt (the call's log), cuda_tests.log, grouped-bench-*.txt, seed-{cublaslt,wgmma}.tar.gz.
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=$PWD/build/gpu-bundle
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
timeout 150 "$B/bin/cuda_tests" --gtest_filter='GroupedWgradWgmma.*:GroupedLinearCuda.*:LinearCuda.*' > "$OUT/cuda_tests.log" 2>&1
rc=$?
echo "cuda_tests rc $rc"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]|SKIPPED \]|rel L2" "$OUT/cuda_tests.log" | grep -v "^  linear\|^  grouped bf16\|^  grouped f32" | head -30
if [ $rc -ne 0 ]; then echo "tests failed: no timing"; exit 1; fi
date +%T
timeout 120 "$B/bin/grouped_bench" $(printf '384 %.0s' $(seq 32)) > "$OUT/grouped-bench-384.txt" 2>&1
grep -E "^(forward|backward|gate)" "$OUT/grouped-bench-384.txt"
timeout 120 "$B/bin/grouped_bench" > "$OUT/grouped-bench-slice.txt" 2>&1
echo "-- slice counts"; grep -E "^(backward weight|gate)" "$OUT/grouped-bench-slice.txt"
date +%T
if [ "${SEED:-1}" = 0 ]; then exit 0; fi
BINS=quill CASES="${BASE_CASES:-first-bf16o}" AFTER_CASES='' GROUPED=0 TESTS=0 OUT=$OUT/cublaslt bash scripts/gpu/seed-profile.sh 2>&1 \
  | grep -E "^rank|train rc|error"
TRAIN_EXTRA="--grouped-wgrad-kernel wgmma" BINS=quill CASES="${WG_CASES:-first-bf16o middle-bf16o last-bf16o}" AFTER_CASES='' GROUPED=0 \
  TESTS=0 OUT=$OUT/wgmma bash scripts/gpu/seed-profile.sh 2>&1 | grep -E "^rank|train rc|error"
date +%T
} 2>&1 | tee "$OUT/grouped-wgrad.txt"
