#!/usr/bin/env bash
# One device call (issue 23): the wgmma backward's checks and attention_bench (scripts/gpu/wgmma-bwd-check.sh),
# then the slice benchmark with the peer (bench/slice/run.sh) in what is left of the call; everything under
# $OUT/all.tar.gz (the tool returns few files). Bundle: scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests
# attention_bench grouped_bench, carry ["build/gpu-bundle"]. Environment: SLICE [1]: 0 skips the slice benchmark, CHECKS [1]: 0 skips
# the checks (a call of the slice benchmark alone, with its whole budget), SLICE_BUDGET_S [430].
set -uo pipefail
FINAL=${OUT:-/tmp/out}
export OUT=/tmp/o
mkdir -p "$OUT" "$FINAL"
# The grouped weight gradient's cuBLASLt candidates (bench/grouped; a few seconds) when the bundle has grouped_bench.
[ "${CHECKS:-1}" = 1 ] && [ -x build/gpu-bundle/bin/grouped_bench ] && \
  build/gpu-bundle/bin/grouped_bench > /tmp/o/grouped-bench.txt 2>&1; tail -40 /tmp/o/grouped-bench.txt 2>/dev/null
[ "${CHECKS:-1}" = 1 ] && KERNELS=${KERNELS:-0} STALLS=${STALLS:-1} bash scripts/gpu/wgmma-bwd-check.sh 2>&1 | tail -40
[ "${SLICE:-1}" = 1 ] && env OUT=/tmp/o/slice QUILL=$PWD/build/gpu-bundle/bin/quill COMMIT=$(cat build/gpu-bundle/COMMIT) BUDGET_S=${SLICE_BUDGET_S:-430} \
  bash bench/slice/run.sh > /tmp/o/slice-run.log 2>&1
echo "slice rc $?"; tail -5 /tmp/o/slice-run.log; cat /tmp/o/slice/slice-bench.txt 2>/dev/null | head -60
tar -C /tmp/o -czf "$FINAL/all.tar.gz" .
