#!/usr/bin/env bash
# One device call (issues 40, 43): the routed experts' forward and input-gradient kernels with pairs of CTAs
# (CudaBackendOptions::grouped_gemm_cluster 2: a cluster of two CTAs computes two neighbouring column blocks of the
# same rows and multicasts the rows' slices to both; grouped_gemm_pipeline.cuh), bf16 and FP8.
#   1. tests: GroupedGemmWgmma.* (PairsOfCtasGiveTheSameBits: the pairs against the single CTAs, bit for bit) and the
#      FP8 and grouped op tests; stop if one fails
#   2. grouped_bench at a seed rank's 32 experts x 384 rows and at the slice's counts (its default): the "(wgmma
#      pairs)" arms against "(wgmma)", and the count of values that differ (0 expected)
#   3. NCU=1: Nsight Compute on the FP8 forward kernel, single and pairs (L2 and DRAM throughput, tensor pipe)
#   then REST (a command line, e.g. "bash scripts/gpu/overlap-close-any.sh") with the time that is left.
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests grouped_bench quill attention_bench
#   device: run(carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/grouped-pairs-call.sh")
# Back: $OUT/grouped-pairs.txt (the call's log), cuda_tests.log, grouped-bench-{384,slice}.txt, ncu-fp8-*.txt.
set -uo pipefail
# shellcheck source=scripts/gpu/bundle-env.sh
source "$(dirname "$0")/bundle-env.sh"
NCU=${NCU_BIN:-/usr/local/cuda/bin/ncu}
mkdir -p "$OUT"
read -ra seed_counts <<< "$(printf "384 %.0s" $(seq 32))"
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
timeout 150 "$B/bin/cuda_tests" --gtest_filter='GroupedGemmWgmma.*:Fp8Cuda.*:GroupedLinearCuda.*' > "$OUT/cuda_tests.log" 2>&1
rc=$?
echo "cuda_tests rc $rc"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]|pairs differ|Failure" "$OUT/cuda_tests.log" | head -20
if [ $rc -ne 0 ]; then echo "tests failed: no timing"; exit 1; fi
timeout 100 "$B/bin/grouped_bench" "${seed_counts[@]}" > "$OUT/grouped-bench-384.txt" 2>&1
echo "-- 32 experts x 384 rows"; grep -E "^(fp8 )?(forward|backward input)|pairs against" "$OUT/grouped-bench-384.txt"
timeout 120 "$B/bin/grouped_bench" > "$OUT/grouped-bench-slice.txt" 2>&1
echo "-- the slice's counts"; grep -E "^(fp8 )?(forward|backward input)|pairs against" "$OUT/grouped-bench-slice.txt"
date -u +%T
if [ "${NCU:-0}" = 1 ]; then
  # FP8 forward gate/up: the 2nd launch of the single-CTA arm (launches 0-12: one warm-up, 7 timed, 5 host-issue) and
  # of the pairs arm (launches 52-64, after the single CTAs' four FP8 arms; the report's name shows the template).
  for arm in "single 1" "pairs 53"; do
    read -r name skip <<< "$arm"
    timeout 90 "$NCU" -k "regex:grouped_gemm_fp8_kernel" --launch-skip "$skip" -c 1 --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
      "$B/bin/grouped_bench" "${seed_counts[@]}" > "$OUT/ncu-fp8-$name.txt" 2>&1
    echo "== fp8 forward, $name: ncu rc $?"
    grep -E "grouped_gemm_fp8_kernel|Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Memory Throughput" \
      "$OUT/ncu-fp8-$name.txt" | head -8
  done
fi
if [ -n "${REST:-}" ]; then
  left=$((570 - SECONDS))
  echo "== $REST ($left s left)"
  [ $left -gt 60 ] && OUT=$OUT/rest timeout "$left" bash -c "$REST"
fi
date -u +%T
} 2>&1 | tee "$OUT/grouped-pairs.txt"
