#!/usr/bin/env bash
# One device call (issues 43, 41): the FP8 experts' kernel with two products in flight, checked and timed against
# the build before it, then scripts/gpu/fp8-call.sh (the slice and a second config, bf16 against FP8, convergence;
# the base build's slice arm when .gpu-base is carried) with what is left of LIMIT.
#   1. tests: GroupedGemmWgmma.*, Fp8Cuda.*, CudaFp8TransientCompute.* (the kernel against the CPU's FP8 reference
#      and cuBLASLt, the fallbacks), then the stacked projections, the MoE row ops on slot rows and determinism;
#      if one fails, nothing is timed
#   2. grouped_bench at a seed rank's 32 experts x 384 rows and at the slice's 32 x ~1,536: this build, then the
#      previous one (build/oldgb/bin/grouped_bench, its COMMIT beside it)
#   3. fp8-call.sh with TESTS=0
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests grouped_bench quill, packed as build/callN-bundle.tgz;
#           the previous grouped_bench as build/callN-oldgb.tgz (oldgb/bin/grouped_bench, oldgb/COMMIT)
#   device: run(carry=["build/callN-bundle.tgz", "build/callN-oldgb.tgz", ".gpu-base"],
#               command="tar -xzf build/callN-bundle.tgz -C build && tar -xzf build/callN-oldgb.tgz -C build &&
#                        bash scripts/gpu/fp8-pairs-call.sh")
# Back: $OUT/fp8-pairs.txt (tests and benches), $OUT/fp8-pairs.tar.gz (their logs), and fp8-call.sh's files.
set -uo pipefail
# shellcheck source=scripts/gpu/bundle-env.sh
source "$(dirname "$0")/bundle-env.sh"
R=/tmp/fp8-pairs
LIMIT=${LIMIT:-560}
rm -rf "$R"
mkdir -p "$OUT" "$R"
keep() { tar -czf "$OUT/fp8-pairs.tar.gz" -C "$R" . 2>/dev/null; }
counts() { printf "$1 %.0s" $(seq 32); }
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); previous grouped_bench $(cat build/oldgb/COMMIT 2>/dev/null || echo none); $(date -u +%FT%TZ)"
# gate NAME FILTER: the CUDA tests of FILTER into $R/NAME.log, their summary printed; false when one failed.
gate() {
  timeout 150 "$B/bin/cuda_tests" --gtest_filter="$2" > "$R/$1.log" 2>&1
  local rc=$?
  echo "$1 rc $rc"
  grep -E "^\[  (PASSED|FAILED)|FAILED  \]|Failure|Expected|Which is|actual|rel L2" "$R/$1.log" | head -30
  keep
  return $rc
}
# The FP8 kernel's tests; then this session's GPU paths (issue 40): the attention projections' stacked GEMMs, the
# MoE row ops on the plan's slot rows, determinism with both. The timings depend on all of them.
if ! gate cuda_tests 'GroupedGemmWgmma.*:Fp8Cuda.*:CudaFp8TransientCompute.*' ||
   ! gate cuda_tests_paths \
     'CudaStackedProjections.*:*CudaRoutePlan*:*CudaPermute*:CudaDeterminism.TheSameTrainingTwiceGivesTheSameBits'; then
  echo "tests failed: nothing timed"
  exit 1
fi
# The profiler's idle gaps (logged, not a gate: a diagnostic of the profiles that follow).
gate cuda_tests_idle 'CudaOpProfileIdle.*' || true
for rows in 384 1536; do
  read -ra c <<< "$(counts $rows)"
  for which in this previous; do
    gb=$B/bin/grouped_bench; [ $which = previous ] && gb=build/oldgb/bin/grouped_bench
    [ -x "$gb" ] || continue
    timeout 90 "$gb" "${c[@]}" > "$R/grouped-bench-$rows-$which.txt" 2>&1
    echo "-- grouped_bench, 32 experts x $rows rows, $which build (rc $?)"
    grep -E "^fp8" "$R/grouped-bench-$rows-$which.txt"
  done
  keep
done
date -u +%T
} 2>&1 | tee "$OUT/fp8-pairs.txt"
[ "${PIPESTATUS[0]}" = 0 ] || exit 1
grep -q "^tests failed" "$OUT/fp8-pairs.txt" && exit 1
TESTS=0 LIMIT=$((LIMIT - SECONDS)) bash "$(dirname "$0")/fp8-call.sh"
