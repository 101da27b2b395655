#!/usr/bin/env bash
# One device call (issue 40): the experts' weight gradient by quill's wgmma kernel (--grouped-wgrad-kernel wgmma,
# src/ops/cuda/grouped_wgrad_wg.cu: the old fp32 gradient loaded by TMA under the product, added in registers,
# stored by TMA) against cuBLASLt's GEMM per expert. First the quick checks and the kernel's tests against the CPU
# and cuBLASLt (stop there if one fails), then grouped_bench at a seed rank's 32 experts x 384 and 768 rows and at
# the slice's counts (both kernels, accumulating and writing), then a seed stage A B B A (stage-ab-call.sh).
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests grouped_bench quill
#   device: run(carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/grouped-wgrad-call.sh")
# The stage: on an H200 (> 100 GB) first-bf16s (stage 0, bf16 moments, no offload, selective recompute); on an
# 80 GB H100 last-bf16h with the MoE activation recomputed (what fits); the "on" arm --grouped-wgrad-kernel $WGRAD_ON
# [auto]. SEED=0 stops after grouped_bench.
# Back: $OUT/grouped-wgrad.txt (the call's log), cuda_tests.log, grouped-bench-*.txt, $OUT/wgrad-ab.{txt,tar.gz}.
set -uo pipefail
# shellcheck source=scripts/gpu/bundle-env.sh
source "$(dirname "$0")/bundle-env.sh"
mkdir -p "$OUT"
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
timeout 200 "$B/bin/cuda_tests" --gtest_filter='GroupedWgradWgmma.*:GroupedLinearCuda.*:RouterGateCuda.*:CudaOrderedSum.*:*CudaRouter*:CudaDeterminism.TheSameTrainingTwiceGivesTheSameBits' \
  > "$OUT/cuda_tests.log" 2>&1
rc=$?
echo "cuda_tests rc $rc"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]|SKIPPED \]|rel L2|relative L2" "$OUT/cuda_tests.log" | head -30
if [ $rc -ne 0 ]; then echo "tests failed: no timing"; exit 1; fi
date -u +%T
read -ra counts <<< "$(printf '384 %.0s' $(seq 32))"
timeout 120 "$B/bin/grouped_bench" "${counts[@]}" > "$OUT/grouped-bench-384.txt" 2>&1
grep -E "^(backward weight|gate)" "$OUT/grouped-bench-384.txt"
read -ra counts <<< "$(printf '768 %.0s' $(seq 32))"
timeout 120 "$B/bin/grouped_bench" "${counts[@]}" > "$OUT/grouped-bench-768.txt" 2>&1
echo "-- 32 x 768 rows (two micro-batches' rows: --moe-expert-wgrad-micro-batches 2)"; grep -E "^(backward weight|gate)" "$OUT/grouped-bench-768.txt"
timeout 120 "$B/bin/grouped_bench" > "$OUT/grouped-bench-slice.txt" 2>&1
echo "-- slice counts"; grep -E "^(backward weight|gate)" "$OUT/grouped-bench-slice.txt"
date -u +%T
[ "${SEED:-1}" = 0 ] && exit 0
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "${mib:-0}" -gt 100000 ]; then
  stage=(CASES=first-bf16s BASE_EXTRA=)
else
  stage=(CASES=last-bf16h DEVICE_MEMORY=140GiB "BASE_EXTRA=--recompute-granularity selective --recompute-modules moe_act")
fi
env "${stage[@]}" NAME=wgrad-ab ON="--grouped-wgrad-kernel ${WGRAD_ON:-auto}" KEYS=grouped_wgrad_kernel \
  OPS='grouped_linear_backward_weight' CASE_TIMEOUT="${CASE_TIMEOUT:-110}" bash "$(dirname "$0")/stage-ab-call.sh" 2>&1 | tail -30
date -u +%T
} 2>&1 | tee "$OUT/grouped-wgrad.txt"
